"""nvke-agent: sample the node's GPUs every interval and post the batch to the control plane.

    nvke-agent --url https://nvke.example.com --token "$NVKE_NODE_TOKEN"
    nvke-agent --url http://127.0.0.1:8000 --token ... --simulate GPU-uuid1,GPU-uuid2   # no GPU needed
    nvke-agent preflight [--mode mps]   # is this node fit for GPU sharing? (exit 1 when a check fails)
    nvke-agent ... --device-plugin [--mps]   # also NVKE's device plugin (and MPS daemons): node_side.py

The token is the node's telemetry token (POST /api/v1/telemetry/node-tokens/). Without NVML the agent
exits at once with status 2 and says why. A refused batch (4xx) is dropped and reported. When the
control plane is busy (429, 503: after its Retry-After) or unreachable (exponential backoff), the
agent waits a jittered while, so a fleet refused together does not return together; meanwhile it keeps
sampling into a bounded backlog and counts the oldest samples it has to drop. At start it posts the
node's GPU inventory, and its sharing preflight facts (preflight.py) then and whenever they change."""

import argparse
import json
import logging
import os
import random
import sys
import time
import urllib.error
import urllib.request

from . import device_plugin, kubelet, nvml, preflight
from .mps import MpsSupervisor
from .node_side import NodeSide, node_pods
from .synthetic import SimulatedCollector

log = logging.getLogger("nvke-agent")
MAX_BACKLOG = 3600  # samples kept while the control plane is unreachable or busy
MAX_BACKOFF_S = 60.0
EXIT_NO_NVML = 2


class Refused(Exception):
    """The control plane answered 4xx: the batch (or the token) is wrong; resending will not help."""


class Busy(Exception):
    """The control plane answered 429 or 503: send again after `retry_after_s`."""

    def __init__(self, code: int, retry_after_s: float):
        super().__init__(f"{code}, retry after {retry_after_s:g} s")
        self.retry_after_s = retry_after_s


def _post(url: str, path: str, token: str, body: dict, timeout_s: float) -> dict:
    request = urllib.request.Request(
        url.rstrip("/") + path,
        data=json.dumps(body).encode(),
        headers={"Authorization": f"Node {token}", "Content-Type": "application/json"},
        method="POST",
    )
    try:
        with urllib.request.urlopen(request, timeout=timeout_s) as response:
            return json.load(response)
    except urllib.error.HTTPError as error:
        if error.code in (429, 503):
            raise Busy(error.code, _seconds(error.headers.get("Retry-After"))) from None
        if 400 <= error.code < 500:
            raise Refused(f"{error.code}: {error.read().decode(errors='replace')}") from None
        raise


def _seconds(retry_after: str | None) -> float:
    """Retry-After in seconds (NVKE sends seconds; an HTTP date or nothing counts as one second)."""
    try:
        return max(0.0, float(retry_after or ""))
    except ValueError:
        return 1.0


def post(url: str, token: str, samples: list[dict], timeout_s: float = 10) -> int:
    return _post(url, "/api/v1/telemetry/ingest/", token, {"samples": samples}, timeout_s)["accepted"]


def register(url: str, token: str, uuids: list[str], timeout_s: float = 10) -> int:
    """Tell the control plane which UUID each GPU index has (an attached cluster without NVIDIA's DRA
    driver learns them only here); returns how many it changed."""
    body = {"gpus": [{"index": i, "uuid": uuid} for i, uuid in enumerate(uuids)]}
    return _post(url, "/api/v1/telemetry/inventory/", token, body, timeout_s)["updated"]


def report_preflight(url: str, token: str, facts: dict, timeout_s: float = 10) -> list[str]:
    """Post the node's sharing preflight facts; returns what fails for its pool's sharing mode."""
    return _post(url, "/api/v1/telemetry/preflight/", token, {"facts": facts}, timeout_s)["failures"]


def preflight_command(argv: list[str]) -> int:
    """`nvke-agent preflight`: print the node's sharing checklist; 1 when a check fails."""
    parser = argparse.ArgumentParser(
        prog="nvke-agent preflight", description="Check this node for GPU sharing."
    )
    parser.add_argument(
        "--mode", choices=preflight.MODES, help="one sharing mode (default: every sharing mode)"
    )
    args = parser.parse_args(argv)
    try:
        loaded = nvml.load()
    except nvml.NvmlUnavailable as error:
        print(f"NVML unavailable: {error}")
        loaded = None
    text, failed = preflight.checklist(
        preflight.gather(loaded), [args.mode] if args.mode else list(preflight.SHARING)
    )
    print(text)
    return 1 if failed else 0


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="nvke-agent", description=__doc__.split("\n\n")[0])
    parser.add_argument("--url", default=os.environ.get("NVKE_URL"), required="NVKE_URL" not in os.environ)
    parser.add_argument("--token", default=os.environ.get("NVKE_NODE_TOKEN"), help="or NVKE_NODE_TOKEN")
    parser.add_argument("--interval", type=float, default=1.0, help="seconds between samples")
    parser.add_argument("--once", action="store_true", help="post one batch and exit")
    parser.add_argument("--simulate", metavar="UUIDS", help="comma-separated GPU UUIDs to invent metrics for")
    parser.add_argument(
        "--device-plugin", action="store_true", help="serve NVKE's device plugin (nvke.io/gpu-share)"
    )
    parser.add_argument("--node-name", default=os.environ.get("NODE_NAME"), help="or NODE_NAME")
    parser.add_argument("--kubelet-dir", default=kubelet.DEVICE_PLUGIN_PATH)
    parser.add_argument("--slots-per-gpu", type=int, default=device_plugin.SLOTS_PER_GPU)
    parser.add_argument("--mps", action="store_true", help="start and supervise an MPS daemon per GPU")
    args = parser.parse_args(argv)
    if not args.token:
        parser.error("a node token is needed: --token or NVKE_NODE_TOKEN")
    if args.device_plugin and not args.node_name:
        parser.error("the device plugin needs the node's name: --node-name or NODE_NAME")
    if not 1 <= args.slots_per_gpu <= 64:
        parser.error("--slots-per-gpu: use 1 to 64")
    return args


def node_side(collector, args: argparse.Namespace) -> NodeSide | None:
    """The device plugin and MPS daemons the flags ask for (GPU UUIDs as NVML names them)."""
    if not (args.device_plugin or args.mps):
        return None
    uuids = [f"GPU-{uuid}" for uuid in collector.uuids]
    mps = MpsSupervisor(uuids) if args.mps else None
    server = None
    if args.device_plugin:
        from kubernetes import client, config

        config.load_incluster_config()
        plugin = device_plugin.DevicePlugin(
            uuids,
            node_pods(client.ApiClient(), args.node_name),
            args.slots_per_gpu,
            pipe_directory=mps.pipe_directory if mps else lambda uuid: "",
            mps_up=mps.up if mps else lambda uuid: False,
        )
        server = device_plugin.PluginServer(plugin, args.kubelet_dir)
    return NodeSide(server, mps, lambda: {f"GPU-{u}": ok for u, ok in collector.health().items()})


class Sender:
    """The samples not yet accepted, at most `max_backlog` (the oldest dropped and counted), and when
    to try again: after a busy answer, its Retry-After; after a failure, 1, 2, 4 … up to MAX_BACKOFF_S
    seconds; each stretched by a random factor of 1 to 1.5."""

    def __init__(
        self, url: str, token: str, max_backlog: int = MAX_BACKLOG, rng: random.Random | None = None
    ):
        self.url, self.token, self.max_backlog = url, token, max_backlog
        self.rng = rng or random.Random()
        self.backlog: list[dict] = []
        self.dropped = 0
        self.failures = 0
        self.not_before = 0.0

    def add(self, samples: list[dict]) -> None:
        self.backlog.extend(samples)
        overflow = len(self.backlog) - self.max_backlog
        if overflow > 0:
            self.dropped += overflow
            del self.backlog[:overflow]
            log.warning("backlog full: dropped %d samples so far", self.dropped)

    def flush(self, now: float) -> bool:
        """Post the backlog unless it is too early; True when it was accepted. Raises Refused."""
        if not self.backlog or now < self.not_before:
            return False
        try:
            log.info("posted %d samples", post(self.url, self.token, self.backlog))
        except Refused:
            self.backlog = []
            raise
        except Busy as busy:
            self._wait(now, busy.retry_after_s, f"control plane busy ({busy})")
            return False
        except (urllib.error.URLError, OSError) as error:
            self.failures += 1
            self._wait(now, min(MAX_BACKOFF_S, 2.0 ** (self.failures - 1)), f"unreachable ({error})")
            return False
        self.backlog, self.failures, self.not_before = [], 0, 0.0
        return True

    def _wait(self, now: float, delay_s: float, why: str) -> None:
        self.not_before = now + delay_s * (1 + self.rng.random() / 2)
        log.warning(
            "%s; keeping %d samples, next try in %.1f s", why, len(self.backlog), self.not_before - now
        )


def run(collector, args: argparse.Namespace, node: NodeSide | None = None) -> int:
    sender = Sender(args.url, args.token)
    registered = False
    facts, reported = collector.facts(), None
    while True:
        started = time.time()
        now = {**facts, **(node.step() if node else {})}
        if now != reported:  # at start, and when the device plugin or an MPS daemon comes or goes
            try:
                for failure in report_preflight(args.url, args.token, now):
                    log.warning("sharing preflight: %s", failure)
                reported = now
            except Refused as error:
                log.info("preflight facts not taken: %s", error)
                reported = now
            except (Busy, urllib.error.URLError, OSError) as error:
                log.warning("control plane unreachable or busy (%s); preflight facts next time", error)
        if not registered:  # once the control plane answers; a refusal (its provider names GPUs) is final
            try:
                log.info("inventory: %d GPU UUIDs changed", register(args.url, args.token, collector.uuids))
                registered = True
            except Refused as error:
                log.info("inventory not taken: %s", error)
                registered = True
            except (Busy, urllib.error.URLError, OSError) as error:
                log.warning("control plane unreachable or busy (%s); inventory next time", error)
        sender.add(collector.sample(started))
        sent = False
        try:
            sent = sender.flush(time.time())
        except Refused as error:
            log.error("control plane refused the batch: %s", error)
            if "invalid_node_token" in str(error):
                return 1
        if args.once:
            return 0 if sent else 1
        time.sleep(max(0.0, args.interval - (time.time() - started)))


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["preflight"]:
        return preflight_command(argv[1:])
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    args = parse_args(argv)
    if args.simulate:
        collector = SimulatedCollector([u.strip() for u in args.simulate.split(",") if u.strip()])
    else:
        try:
            collector = nvml.NvmlCollector(nvml.load())
        except nvml.NvmlUnavailable as error:
            print(
                f"nvke-agent: cannot read GPUs: {error}. Use --simulate UUIDS for development.",
                file=sys.stderr,
            )
            return EXIT_NO_NVML
    node = node_side(collector, args)
    try:
        return run(collector, args, node)
    except KeyboardInterrupt:
        return 0
    finally:
        if node is not None:
            node.close()
        collector.close()


if __name__ == "__main__":
    sys.exit(main())
