"""kube_sync's watches at 10, 100 and 500 attached clusters in one process: threads, resident memory,
open sockets, the time until every watch is up, and event latency (a node changed on the stand-in →
kube_sync's `ClusterWatch` has it and has called `changed()`).

Each cluster is a DRA-capable one (the most watches: Nodes, ResourceSlices, pods, ResourceClaims,
managed namespaces, NVIDIADrivers) of one node, served by a light stand-in: one HTTPS process (an ASGI
app under hypercorn, HTTP/2 by ALPN as kube-apiserver) answering every cluster under its own path
(https://127.0.0.1:PORT/c17), lists and watches with `timeoutSeconds`, and a plain-HTTP control port that
changes a cluster's node (a MODIFIED event on its node watches). tests/kubeapi's FakeKubeApi is a thread
per connection and stream with a full store and its actors: 500 of them do not fit two cores beside the
process measured. The clusters share one CA, yet each has its own connection, as each has its ApiClient.

Each (code, size) runs in a fresh process; `--before DIR` measures another checkout's code (e.g. a
worktree of the commit before) beside this one's. kube_sync's passes are not run here (they need the
database): before, each cluster had one more thread for them; now PASS_WORKERS serve every cluster.

    python bench/kube_sync.py [--sizes 10,100,500] [--before /path/to/old/checkout] [--json]"""

import argparse
import asyncio
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
NODE = "gpu-0"


# ---- the light stand-in (its own process) ------------------------------------------------------------


def serve(port: int, control: int, material: str) -> None:
    """List and watch every resource under /c<i>/ (HTTP/2 by ALPN, as kube-apiserver, or HTTP/1.1);
    POST control:/touch?cluster=i&value=v relabels cluster i's node and sends the event to its node
    watches. An ASGI app under hypercorn, which speaks HTTP/2."""
    from urllib.parse import parse_qs

    from hypercorn.asyncio import serve as hypercorn_serve
    from hypercorn.config import Config

    ca_bundle, cert_file, key_file = json.loads(Path(material).read_text())
    revision = {"rv": 1}
    labels: dict[str, str] = {}
    watchers: dict[str, set[asyncio.Queue]] = {}

    def node(cluster: str) -> dict:
        metadata = {
            "name": NODE,
            "resourceVersion": str(revision["rv"]),
            "labels": {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3", "bench": labels.get(cluster, "")},
        }
        return {"apiVersion": "v1", "kind": "Node", "metadata": metadata}

    async def respond(send, body: bytes, more: bool = False) -> None:
        await send({"type": "http.response.body", "body": body, "more_body": more})

    async def watch(cluster: str, nodes: bool, query: dict, receive, send) -> None:
        queue: asyncio.Queue = asyncio.Queue()
        if nodes:
            watchers.setdefault(cluster, set()).add(queue)
        deadline = time.monotonic() + float(query.get("timeoutSeconds", 60))

        async def disconnected() -> None:  # past the (empty) request body: the client went away
            while (await receive())["type"] != "http.disconnect":
                pass

        gone = asyncio.ensure_future(disconnected())
        try:
            while (left := deadline - time.monotonic()) > 0 and not gone.done():
                got = asyncio.ensure_future(queue.get())
                await asyncio.wait({got, gone}, timeout=left, return_when=asyncio.FIRST_COMPLETED)
                if not got.done():
                    got.cancel()
                    continue
                await respond(send, json.dumps(got.result()).encode() + b"\n", more=True)
            await respond(send, b"")
        finally:
            gone.cancel()
            watchers.get(cluster, set()).discard(queue)

    async def app(scope, receive, send) -> None:
        if scope["type"] == "lifespan":
            while (await receive())["type"] != "lifespan.shutdown":
                await send({"type": "lifespan.startup.complete"})
            await send({"type": "lifespan.shutdown.complete"})
            return
        query = {k: v[0] for k, v in parse_qs(scope["query_string"].decode()).items()}
        headers = [(b"content-type", b"application/json")]
        if scope["path"] == "/touch":
            cluster = query["cluster"]
            labels[cluster] = query["value"]
            revision["rv"] += 1
            for queue in watchers.get(cluster, ()):
                queue.put_nowait({"type": "MODIFIED", "object": node(cluster)})
            await send({"type": "http.response.start", "status": 200, "headers": headers})
            return await respond(send, b"ok")
        cluster, _, tail = scope["path"].lstrip("/").partition("/")
        nodes = tail == "api/v1/nodes"
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        if query.get("watch") in ("true", "1", "True"):
            return await watch(cluster, nodes, query, receive, send)
        items = [node(cluster)] if nodes else []
        await respond(
            send, json.dumps({"metadata": {"resourceVersion": str(revision["rv"])}, "items": items}).encode()
        )

    config = Config()
    config.bind = [f"127.0.0.1:{port}"]
    config.insecure_bind = [f"127.0.0.1:{control}"]
    config.certfile, config.keyfile = cert_file, key_file
    config.backlog = 4096
    config.keep_alive_timeout = 90  # kube-apiserver's IdleTimeout
    config.h2_max_concurrent_streams = 100  # kube-apiserver's, secure_serving.go
    config.accesslog = config.errorlog = None
    del ca_bundle

    async def main() -> None:
        server = asyncio.ensure_future(hypercorn_serve(app, config))
        while True:  # ready once it accepts
            try:
                writer = (await asyncio.open_connection("127.0.0.1", port))[1]
                writer.close()
                break
            except OSError:
                await asyncio.sleep(0.05)
        print("ready", flush=True)
        await server

    asyncio.run(main())


# ---- the process measured -----------------------------------------------------------------------------


def process_figures() -> dict:
    status = dict(line.split(":", 1) for line in Path("/proc/self/status").read_text().splitlines())
    sockets = 0
    for fd in os.listdir("/proc/self/fd"):
        try:
            sockets += os.readlink(f"/proc/self/fd/{fd}").startswith("socket:")
        except FileNotFoundError:  # the listing's own descriptor, closed by now
            pass
    return {
        "threads": threading.active_count(),
        "rss_mib": round(int(status["VmRSS"].split()[0]) / 1024, 1),
        "sockets": sockets,
    }


def measure(code: str, clusters: int, port: int, control: int, material: str, samples: int) -> dict:
    sys.path.insert(0, code)
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "nvke.settings")
    os.environ.setdefault("NVKE_DEV", "1")  # development keys; nothing here is stored
    os.environ.setdefault("NVKE_OUTBOUND_ALLOWED_NETWORKS", "127.0.0.0/8")
    import logging
    import urllib.request

    import django

    django.setup()
    logging.disable(logging.CRITICAL)  # failed calls are counted, not printed
    from nvke.providers.base import ClusterRef
    from nvke.providers.kubernetes.operations import KubernetesOperations
    from nvke.providers.kubernetes.watch import ClusterWatch

    ca_bundle = json.loads(Path(material).read_text())[0]
    before = process_figures()
    failures: list = []
    expected: dict[int, str] = {}
    seen = [threading.Event() for _ in range(clusters)]
    watches: list = []

    def changed(i: int) -> None:
        labels = watches[i].nodes.get(NODE, {}).get("metadata", {}).get("labels", {})
        if i in expected and labels.get("bench") == expected[i]:
            seen[i].set()

    started = time.perf_counter()
    for i in range(clusters):
        ref = ClusterRef(
            name=f"c{i}", endpoint=f"https://127.0.0.1:{port}/c{i}", token="t", ca_bundle=ca_bundle
        )
        watch = ClusterWatch(
            KubernetesOperations(ref),
            changed=lambda i=i: changed(i),
            failed=failures.append,
            dra=True,
            watch_timeout_s=60,
        )
        watches.append(watch)
        watch.start()
    while not all(w.resource_version for watch in watches for w in watch.watches):
        if time.perf_counter() - started > 600:
            raise SystemExit("not every watch came up in 600 s")
        time.sleep(0.05)
    up_s = time.perf_counter() - started
    time.sleep(2)  # every list done: its watch's request sent
    after = process_figures()

    latencies = []
    for value in range(samples):
        i = random.randrange(clusters)
        expected[i] = str(value)
        seen[i].clear()
        at = time.perf_counter()
        urllib.request.urlopen(
            urllib.request.Request(
                f"http://127.0.0.1:{control}/touch?cluster=c{i}&value={value}", method="POST"
            )
        ).read()
        if seen[i].wait(10):
            latencies.append((time.perf_counter() - at) * 1000)
    latencies.sort()
    return {
        "clusters": clusters,
        "streams_per_cluster": len(watches[0].watches),
        "threads": after["threads"],
        "threads_added": after["threads"] - before["threads"],
        "rss_mib": after["rss_mib"],
        "rss_added_mib": round(after["rss_mib"] - before["rss_mib"], 1),
        "sockets": after["sockets"],
        "all_watching_s": round(up_s, 2),
        "event_ms_p50": round(statistics.median(latencies), 2) if latencies else None,
        "event_ms_p95": round(latencies[int(len(latencies) * 0.95) - 1], 2) if latencies else None,
        "events_lost": samples - len(latencies),
        "failed_calls": len(failures),
    }


# ---- the orchestrator ---------------------------------------------------------------------------------


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--sizes", default="10,100,500")
    parser.add_argument("--before", help="a checkout of the code to compare with (its root)")
    parser.add_argument("--samples", type=int, default=100, help="events timed per size")
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--serve", nargs=3, metavar=("PORT", "CONTROL", "MATERIAL"), help=argparse.SUPPRESS)
    parser.add_argument(
        "--measure", nargs=5, metavar=("CODE", "N", "PORT", "CONTROL", "MATERIAL"), help=argparse.SUPPRESS
    )
    args = parser.parse_args()
    if args.serve:
        serve(int(args.serve[0]), int(args.serve[1]), args.serve[2])
        return
    if args.measure:
        code, n, port, control, material = args.measure
        print(json.dumps(measure(code, int(n), int(port), int(control), material, args.samples)), flush=True)
        os._exit(0)  # the old code's watch threads end only at their next event or timeout

    sys.path.insert(0, str(ROOT))
    from tests.kubeapi.tls import server_material

    material = Path(tempfile.mkdtemp(prefix="nvke-bench-")) / "tls.json"
    material.write_text(json.dumps(server_material()))
    port, control = free_port(), free_port()
    server = subprocess.Popen(
        [sys.executable, __file__, "--serve", str(port), str(control), str(material)], stdout=subprocess.PIPE
    )
    try:
        assert server.stdout and server.stdout.readline().strip() == b"ready"
        codes = ([("before", args.before)] if args.before else []) + [("after", str(ROOT))]
        results = []
        for size in [int(s) for s in args.sizes.split(",")]:
            for name, code in codes:
                child = [sys.executable, __file__, "--samples", str(args.samples), "--measure", code]
                out = subprocess.run(
                    [*child, str(size), str(port), str(control), str(material)],
                    capture_output=True,
                    text=True,
                )
                if out.returncode:
                    raise SystemExit(f"{name} at {size}: {out.stderr[-3000:]}")
                results.append({"code": name, **json.loads(out.stdout.strip().splitlines()[-1])})
                if not args.json:
                    print(results[-1], flush=True)
    finally:
        server.kill()
    if args.json:
        print(json.dumps(results))


if __name__ == "__main__":
    main()
