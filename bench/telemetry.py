"""Telemetry benchmark: N simulated GPUs at 1 sample/s each, C websocket clients watching; reports the
samples/s stored, end-to-end latency (sample time → frame received) p50/p99, the server's own part of it
(its /metrics histogram of frames by the age of their oldest sample when handed to the sockets), and
CPU used.

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/nvke_tm REDIS_URL=redis://127.0.0.1:6379/13 \
        python bench/telemetry.py --gpus 10000 --clients 1000 --client-processes 4 [--views pool,gpu] [--json]

It empties that database and Redis db, builds a fleet of `--tenants` tenants, each one cluster with one
pool of 8-GPU nodes, starts one web process (`--server`: uvicorn, as production runs, or daphne) and one
sender process, then opens the clients, spread evenly over the tenants. `--views` names the kinds of
view a tenant's clients take in turn: `fleet` (the default; the tenant's whole fleet), `pool` (its
pool: the same GPUs) and `gpu` (one of its GPUs, a different one for each such client).

The clients run in `--client-processes` processes, each with its own event loop, so that one process
decoding every frame does not measure itself instead of the server. Each counts the latency of every
row it receives in 1 ms bins; the bins of all processes are added up, so p50/p99 are over all clients
(to the millisecond). Their CPU is reported per process and summed.

The sender writes each node's batch the way the simulator does (telemetry.store.write_many: the nodes
of one slice in one Redis round trip), spread evenly over every second in 20 slices. With `--http` it
posts each node's batch to the ingestion endpoint with the node's token instead (the nvke-agent
path), from `--http-concurrency` connections. `--claim-usage` (store path only) adds one fractional
claim's usage to every sample, so each write also tracks claim stretches for rescaling by the
thresholds of the node's pool (telemetry.policy; half the pools have a policy of their own, with the
default values, so either kind is looked up and the Redis commands stay the same); the claim ids
are not real claims (write_many does not check them; ingestion does, so the HTTP path cannot carry
them here). `--write-cpu ROUNDS` measures only `write_many`'s CPU per sample in this process (no
server, no clients): far less noisy than the sender's share of a busy machine."""

import argparse
import asyncio
import json
import multiprocessing
import os
import random
import statistics
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "nvke.settings")
METRICS_TOKEN = "bench-metrics"


def redis_cpu() -> float:
    """The Redis server's CPU seconds (the server is shared with whatever else uses it meanwhile)."""
    import redis

    info = redis.Redis.from_url(os.environ["REDIS_URL"]).info("cpu")
    return info["used_cpu_user"] + info["used_cpu_sys"]


# --- setup -----------------------------------------------------------------------------------------


def values(now: float, i: int) -> dict:
    util = 50 + (i * 7 + int(now)) % 50
    return {"util": util, "mem": 20000 + util * 100, "temp": 60, "power": 400, "sm": 1700, "xid": 0}


def store_batches(by_node: dict, part: list[int], now: float, claim_usage: bool) -> list:
    """The samples of these nodes, as the simulator builds them (with a claim's usage on request)."""
    from telemetry import store

    return [
        (
            node_id,
            [
                store.Sample(pk, now, v := values(now, pk), {pk: v["util"]} if claim_usage else {})
                for pk, _ in by_node[node_id]
            ],
        )
        for node_id in part
    ]


def gpus_by_node() -> dict[int, list[tuple[int, str]]]:
    from nodepools.models import Gpu

    by_node: dict[int, list[tuple[int, str]]] = {}
    for pk, node_id, uuid in Gpu.objects.values_list("pk", "node_id", "uuid").order_by("node_id", "index"):
        by_node.setdefault(node_id, []).append((pk, str(uuid)))
    return by_node


def write_cpu(rounds: int, claim_usage: bool) -> dict:
    """This process's CPU for `write_many` alone: each round writes every GPU once, in 20 slices of
    nodes as the sender does (no server, no clients). Median over the rounds, per sample."""
    from telemetry import store

    by_node = gpus_by_node()
    nodes = list(by_node)
    random.Random(7).shuffle(nodes)
    chunk = -(-len(nodes) // 20)
    samples = sum(len(g) for g in by_node.values())
    per_round = []
    for _ in range(rounds + 1):  # the first round warms caches and connections up
        now = time.time()
        slices = [
            store_batches(by_node, nodes[i : i + chunk], now, claim_usage)
            for i in range(0, len(nodes), chunk)
        ]
        started = time.process_time()
        for batches in slices:
            store.write_many(batches, now)
        per_round.append(time.process_time() - started)
    per_round = per_round[1:]
    return {
        "write_cpu_us_per_sample": round(statistics.median(per_round) / samples * 1e6, 2),
        "write_cpu_us_per_sample_rounds": [round(r / samples * 1e6, 2) for r in per_round],
    }


# --- sender process ----------------------------------------------------------------------------------


def send(seconds: float, http: str | None, concurrency: int, claim_usage: bool = False) -> None:
    """Every second, one batch per node, spread over the second in 20 slices. Prints a JSON summary."""
    import django

    django.setup()
    from telemetry import store
    from telemetry.models import NodeToken

    by_node = gpus_by_node()
    nodes = list(by_node)
    random.Random(7).shuffle(nodes)  # every tenant's nodes report all through the second, as in a fleet
    tokens = {}
    if http:
        from nodepools.models import Node

        for node in Node.objects.filter(pk__in=nodes):
            tokens[node.pk] = NodeToken.issue(node)[1]
    slices = 20
    chunk = -(-len(nodes) // slices)
    sent = late = 0
    started = time.time()
    session = None
    if http:
        from concurrent.futures import ThreadPoolExecutor

        import requests

        pool = ThreadPoolExecutor(concurrency)
        session = requests.Session()
        adapter = requests.adapters.HTTPAdapter(pool_connections=concurrency, pool_maxsize=concurrency)
        session.mount("http://", adapter)

    def post(node_id: int, now: float) -> int:
        body = {
            "samples": [
                {
                    "gpu": uuid,
                    "ts": now,
                    "metrics": {
                        "DCGM_FI_DEV_GPU_UTIL": 50 + (pk + int(now)) % 50,
                        "DCGM_FI_DEV_FB_USED": 30000,
                        "DCGM_FI_DEV_GPU_TEMP": 60,
                        "DCGM_FI_DEV_POWER_USAGE": 400,
                        "DCGM_FI_DEV_SM_CLOCK": 1700,
                    },
                }
                for pk, uuid in by_node[node_id]
            ]
        }
        response = session.post(
            f"{http}/api/v1/telemetry/ingest/",
            json=body,
            headers={"Authorization": f"Node {tokens[node_id]}"},
        )
        return len(body["samples"]) if response.status_code == 202 else 0

    tick = 0
    while time.time() - started < seconds:
        slot = started + tick / slices
        if time.time() < slot:
            time.sleep(slot - time.time())
        elif time.time() - slot > 1.0:
            late += 1
        part = nodes[(tick % slices) * chunk : (tick % slices + 1) * chunk]
        now = time.time()
        if http:
            sent += sum(pool.map(post, part, [now] * len(part)))
        else:
            batches = store_batches(by_node, part, now, claim_usage)
            store.write_many(batches, now)  # as the simulator does: a slice of the fleet per round trip
            sent += sum(len(samples) for _, samples in batches)
        tick += 1
    elapsed = time.time() - started
    print(json.dumps({"sent": sent, "seconds": elapsed, "behind_by_over_1s": late}), flush=True)


# --- clients ---------------------------------------------------------------------------------------


async def open_client(port: int, cookie: str, query: str, gate: asyncio.Semaphore):
    from websockets.asyncio.client import connect

    async with gate:  # a few handshakes at a time: hundreds at once overflow the accept queue
        ws = await connect(
            f"ws://127.0.0.1:{port}/ws/telemetry/{query}",
            additional_headers={"Cookie": f"sessionid={cookie}", "Origin": f"http://127.0.0.1:{port}"},
            max_size=None,
            open_timeout=120,
        )
        assert json.loads(await ws.recv())["type"] == "telemetry.hello"
        return ws


async def watch(ws, until: float, measure_from: float, stats: dict) -> None:
    async with ws:
        while time.time() < until:
            try:
                text = await asyncio.wait_for(ws.recv(), timeout=max(0.1, until - time.time()))
            except TimeoutError:
                break
            received = time.time()
            frame = json.loads(text)
            if frame["type"] != "telemetry.frame" or received < measure_from:
                continue
            stats["frames"] += 1
            ts = frame["columns"].index("ts")
            stats["latency_ms"].update(round((received - row[ts]) * 1000) for row in frame["gpus"])


def client_process(conn, port: int, clients: list[tuple[str, str]], total: float, warmup: float) -> None:
    """One client process: open its sockets and send how many, receive the start time, watch until
    `total` seconds after it; send back its frames, its rows' latencies (ms → count) and its CPU seconds,
    both counted from `warmup` seconds after the start."""

    async def run() -> tuple[dict, float]:
        gate = asyncio.Semaphore(10)
        sockets = await asyncio.gather(*(open_client(port, *client, gate) for client in clients))
        conn.send(len(sockets))
        start = await asyncio.to_thread(conn.recv)
        measure_from = start + warmup
        stats = {"frames": 0, "latency_ms": Counter()}
        watching = asyncio.gather(*(watch(ws, start + total, measure_from, stats) for ws in sockets))
        await asyncio.sleep(max(0.0, measure_from - time.time()))
        cpu_from = time.process_time()
        await watching
        return stats, time.process_time() - cpu_from

    stats, cpu = asyncio.run(run())
    conn.send({**stats, "cpu_s": cpu})


def watcher_queries(sessions: list[dict], clients: int, kinds: list[str]) -> list[tuple[str, str]]:
    """(session cookie, query string) of each client: tenants in turn, and each tenant's clients take
    the kinds in turn; a tenant's `gpu` clients watch different GPUs while it has GPUs left."""
    from nodepools.models import Gpu, NodePool

    pools = dict(NodePool.objects.values_list("tenant_id", "pk"))
    gpus: dict[int, list[int]] = {}
    for tenant_id, pk in Gpu.objects.values_list("tenant_id", "pk").order_by("pk"):
        gpus.setdefault(tenant_id, []).append(pk)
    queries = []
    for i in range(clients):
        session = sessions[i % len(sessions)]
        tenant, n = session["tenant"], i // len(sessions)  # this client is its tenant's n-th
        kind = kinds[n % len(kinds)]
        if kind == "gpu":
            query = f"?gpu={gpus[tenant][n % len(gpus[tenant])]}"
        else:
            query = {"fleet": "", "pool": f"?pool={pools[tenant]}"}[kind]
        queries.append((session["cookie"], query))
    return queries


def frame_lag_buckets(port: int) -> dict[str, float]:
    """The server's cumulative frame-lag histogram (/metrics: nvke_telemetry_frame_lag_seconds), by `le`."""
    import requests
    from prometheus_client.parser import text_string_to_metric_families

    headers = {"Authorization": f"Bearer {METRICS_TOKEN}"}
    text = requests.get(f"http://127.0.0.1:{port}/metrics", headers=headers, timeout=60).text
    for family in text_string_to_metric_families(text):
        if family.name == "nvke_telemetry_frame_lag_seconds":
            return {s.labels["le"]: s.value for s in family.samples if s.name.endswith("_bucket")}
    return {}


def bucket_quantile(before: dict[str, float], after: dict[str, float], q: float) -> str:
    """The least bucket bound that at least `q` of the frames sent between the two reads were under."""
    counts = [(le, after[le] - before.get(le, 0.0)) for le in after]
    total = counts[-1][1] if counts else 0
    return next((le for le, n in counts if total and n >= q * total), "")


def percentile(counts: Counter, p: float) -> float:
    """The least latency (s) that at least p% of the rows were at or under, from ms → count."""
    total, running = counts.total(), 0
    for ms in sorted(counts):
        running += counts[ms]
        if running >= p / 100 * total:
            return ms / 1000
    return float("nan")


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--gpus", type=int, default=10_000)
    parser.add_argument("--clients", type=int, default=200)
    parser.add_argument(
        "--client-processes", type=int, default=1, help="spread the clients over this many processes"
    )
    parser.add_argument("--tenants", type=int, default=50)
    parser.add_argument(
        "--views", default="fleet", help="comma-separated kinds the clients cycle through: fleet, pool, gpu"
    )
    parser.add_argument("--seconds", type=float, default=30)
    parser.add_argument("--warmup", type=float, default=5)
    parser.add_argument("--http", action="store_true", help="post through the ingestion endpoint")
    parser.add_argument("--http-concurrency", type=int, default=16)
    parser.add_argument(
        "--claim-usage", action="store_true", help="store path: every sample carries a claim's usage"
    )
    parser.add_argument(
        "--write-cpu",
        type=int,
        metavar="ROUNDS",
        help="only time write_many in this process (CPU per sample, median of ROUNDS); no server",
    )
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--server", choices=("uvicorn", "daphne"), default="uvicorn")
    parser.add_argument("--server-log", help="write the web process's output to this file")
    parser.add_argument("--_send", nargs=4, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args._send:
        http = args._send[1] if args._send[1] != "-" else None
        send(float(args._send[0]), http, int(args._send[2]), args._send[3] == "1")
        return
    if not os.environ.get("DATABASE_URL", "").startswith("postgres") or not os.environ.get("REDIS_URL"):
        sys.exit(
            "Set DATABASE_URL (PostgreSQL) and REDIS_URL to a database and Redis db this benchmark may empty."
        )

    import django

    django.setup()
    import redis
    from bench_db import cpu_s, telemetry_fleet, web_server
    from django.core.management import call_command

    from tests.integration.processes import free_port, port_open

    call_command("migrate", verbosity=0)
    redis.Redis.from_url(os.environ["REDIS_URL"]).flushdb()
    t0 = time.time()
    sessions = telemetry_fleet(args.gpus, args.tenants)
    setup_s = time.time() - t0
    if args.write_cpu:
        result = {
            "gpus": args.gpus,
            "claim_usage": args.claim_usage,
            **write_cpu(args.write_cpu, args.claim_usage),
        }
        print(json.dumps(result) if args.json else "\n".join(f"{k}: {v}" for k, v in result.items()))
        return
    port = free_port()
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "NVKE_METRICS_TOKEN": METRICS_TOKEN}
    log = open(args.server_log, "w") if args.server_log else subprocess.DEVNULL  # noqa: SIM115
    server = subprocess.Popen(
        web_server(args.server, port),
        cwd=ROOT,
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    clients = []
    try:
        while not port_open(port):
            time.sleep(0.2)
        total = args.warmup + args.seconds
        watchers = watcher_queries(sessions, args.clients, args.views.split(","))
        spawn = multiprocessing.get_context("spawn")  # a fresh interpreter: no Django, no inherited sockets
        pipes = []
        for i in range(args.client_processes):
            pipe, child_end = spawn.Pipe()
            part = watchers[i :: args.client_processes]
            client = spawn.Process(target=client_process, args=(child_end, port, part, total, args.warmup))
            client.start()
            child_end.close()  # so that a client process that dies is an EOFError here, not a hang
            pipes.append(pipe)
            clients.append(client)
        connected = sum(pipe.recv() for pipe in pipes)
        sender = subprocess.Popen(
            [
                sys.executable,
                __file__,
                "--_send",
                str(total + 2),
                f"http://127.0.0.1:{port}" if args.http else "-",
                str(args.http_concurrency),
                "1" if args.claim_usage and not args.http else "0",
            ],
            cwd=ROOT,
            env=env,
            stdout=subprocess.PIPE,
            text=True,
        )
        start = time.time()
        for pipe in pipes:
            pipe.send(start)
        measure_from = start + args.warmup
        time.sleep(max(0.0, measure_from - time.time()))  # CPU counts from the end of the warmup
        lag_start = frame_lag_buckets(port)
        cpu_start = {
            "server": cpu_s(server.pid),
            "sender": cpu_s(sender.pid),
            "redis": redis_cpu(),
        }
        watched = [pipe.recv() for pipe in pipes]
        window = time.time() - measure_from
        cpu = {
            "server": cpu_s(server.pid) - cpu_start["server"],
            "sender": cpu_s(sender.pid) - cpu_start["sender"],
            "clients": sum(w["cpu_s"] for w in watched),
            "redis_server_shared": redis_cpu() - cpu_start["redis"],
        }
        lag_end = frame_lag_buckets(port)
        sent = json.loads(sender.communicate(timeout=60)[0].strip().splitlines()[-1])
        for client in clients:
            client.join(10)
    finally:
        for client in clients:
            if client.is_alive():
                client.terminate()
        server.terminate()
        server.wait(10)
    latencies = sum((w["latency_ms"] for w in watched), Counter())
    result = {
        "gpus": args.gpus,
        "clients": args.clients,
        "clients_connected": connected,
        "client_processes": args.client_processes,
        "tenants": args.tenants,
        "views": args.views,
        "server": args.server,
        "path": "http" if args.http else "store",
        "claim_usage": args.claim_usage and not args.http,
        "setup_s": round(setup_s, 1),
        "samples_per_s": round(sent["sent"] / sent["seconds"]),
        "sender_behind_by_over_1s": sent["behind_by_over_1s"],
        "frames_per_s": round(sum(w["frames"] for w in watched) / window),
        "latency_p50_s": round(percentile(latencies, 50), 3),
        "latency_p99_s": round(percentile(latencies, 99), 3),
        "latency_rows": latencies.total(),
        # The server's part, from its own histogram: the bucket bound under which half / 99% of the frames
        # were handed to their sockets, counted from each frame's oldest sample.
        "server_frame_lag_p50_le_s": bucket_quantile(lag_start, lag_end, 0.5),
        "server_frame_lag_p99_le_s": bucket_quantile(lag_start, lag_end, 0.99),
        "cpu_cores_used": {k: round(v / window, 2) for k, v in cpu.items()},
        "cpu_cores_used_per_client_process": [round(w["cpu_s"] / window, 2) for w in watched],
        "load_average": os.getloadavg(),
    }
    print(json.dumps(result) if args.json else "\n".join(f"{k}: {v}" for k, v in result.items()))


if __name__ == "__main__":
    main()
