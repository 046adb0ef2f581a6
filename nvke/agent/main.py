"""nvke-agent: sample the node's GPUs every interval and post the batch to the control plane.

    nvke-agent --url https://nvke.example.com --token "$NVKE_NODE_TOKEN"
    nvke-agent --url http://127.0.0.1:8000 --token ... --simulate GPU-uuid1,GPU-uuid2   # no GPU needed
    nvke-agent preflight [--mode mps]   # is this node fit for GPU sharing? (exit 1 when a check fails)

The token is the node's telemetry token (POST /api/v1/telemetry/node-tokens/). Without NVML the agent
exits at once with status 2 and says why. A refused batch (4xx) is dropped and reported; when the
control plane is unreachable, batches are kept (up to a bound) and sent with the next one. At start it
posts the node's GPU inventory and its sharing preflight facts (preflight.py)."""

import argparse
import json
import logging
import os
import sys
import time
import urllib.error
import urllib.request

from . import nvml, preflight
from .synthetic import SimulatedCollector

log = logging.getLogger("nvke-agent")
MAX_BACKLOG = 3600  # samples kept while the control plane is unreachable
EXIT_NO_NVML = 2


class Refused(Exception):
    """The control plane answered 4xx: the batch (or the token) is wrong; resending will not help."""


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
        if 400 <= error.code < 500:
            raise Refused(f"{error.code}: {error.read().decode(errors='replace')}") from None
        raise


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
    args = parser.parse_args(argv)
    if not args.token:
        parser.error("a node token is needed: --token or NVKE_NODE_TOKEN")
    return args


def run(collector, args: argparse.Namespace) -> int:
    backlog: list[dict] = []
    registered = False
    while True:
        started = time.time()
        if not registered:  # once the control plane answers; a refusal (its provider names GPUs) is final
            try:
                for failure in report_preflight(args.url, args.token, collector.facts()):
                    log.warning("sharing preflight: %s", failure)
                log.info("inventory: %d GPU UUIDs changed", register(args.url, args.token, collector.uuids))
                registered = True
            except Refused as error:
                log.info("inventory not taken: %s", error)
                registered = True
            except (urllib.error.URLError, OSError) as error:
                log.warning("control plane unreachable (%s); inventory next time", error)
        backlog = (backlog + collector.sample(started))[-MAX_BACKLOG:]
        sent = False
        try:
            log.info("posted %d samples", post(args.url, args.token, backlog))
            backlog, sent = [], True
        except Refused as error:
            log.error("control plane refused the batch: %s", error)
            backlog = []
            if "invalid_node_token" in str(error):
                return 1
        except (urllib.error.URLError, OSError) as error:
            log.warning("control plane unreachable (%s); keeping %d samples", error, len(backlog))
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
    try:
        return run(collector, args)
    except KeyboardInterrupt:
        return 0
    finally:
        collector.close()


if __name__ == "__main__":
    sys.exit(main())
