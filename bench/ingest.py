"""Agent ingestion through the real HTTP path: N GPUs on 8-GPU nodes, each node posting its batch once a
second to `--web-processes` web processes, from a load generator that speaks nvke-agent's protocol
(POST /api/v1/telemetry/ingest/ with the node's token, the same JSON, keep-alive connections).

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/nvke_ingest REDIS_URL=redis://127.0.0.1:6379/13 \
        python bench/ingest.py --gpus 10000 --web-processes 1 [--server uvicorn|daphne] [--json]

It empties that database and Redis db, builds the fleet (bench_db.telemetry_fleet), issues every node a
token, starts the web processes (each its own port; the nodes are spread over them as a load balancer
would) and, after a warm-up, measures `--seconds`: every node's batch is due at its own offset in each
second and is sent on one of `--connections` connections. `--json` prints one line: `samples_per_s`
(answered 202 within the window: below the offered rate when the server falls behind), `p50_s` and
`p99_s` (due → answered, so a backlog on a connection counts), `web_cpu_cores` (the web processes'
user + system CPU over the window, added up), `rejected` (samples answered 4xx/5xx), `lost` (samples
answered 202 that the server's counter does not have, plus those never answered)."""

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "nvke.settings")
METRICS = ("DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_DEV_FB_USED", "DCGM_FI_DEV_GPU_TEMP", "DCGM_FI_DEV_POWER_USAGE")


def body(uuids: list[str], now: float) -> bytes:
    """One node's batch, as nvke-agent's NVML collector builds it."""
    samples = [
        {"gpu": f"GPU-{u}", "ts": now, "metrics": dict(zip(METRICS, (50 + i, 30000, 60, 400.5), strict=True))}
        for i, u in enumerate(uuids)
    ]
    return json.dumps({"samples": samples}).encode()


async def connection(port: int, nodes: list[tuple[str, list[str], float]], start: float, until: float, stats):
    """Posts each of its nodes' batches when due (node offset within every second), one at a time."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    second = 0
    while True:
        for token, uuids, offset in nodes:
            due = start + second + offset
            if due >= until:
                writer.close()
                return
            if due > time.time():
                await asyncio.sleep(due - time.time())
            payload = body(uuids, time.time())
            writer.write(
                b"POST /api/v1/telemetry/ingest/ HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                + f"Authorization: Node {token}\r\nContent-Type: application/json\r\n".encode()
                + f"Content-Length: {len(payload)}\r\n\r\n".encode()
                + payload
            )
            stats["sent"] += len(uuids)
            try:
                status = int((await reader.readline()).split()[1])
                length = 0
                while (line := await reader.readline()) not in (b"\r\n", b""):
                    if line.lower().startswith(b"content-length:"):
                        length = int(line.split(b":")[1])
                await reader.readexactly(length)
            except (ConnectionError, IndexError, asyncio.IncompleteReadError):
                stats["unanswered"] += len(uuids)
                return
            answered = time.time()
            if due >= stats["measure_from"]:
                stats["latencies"].append(answered - due)
            if stats["measure_from"] <= answered < stats["measure_until"] and status == 202:
                stats["window_accepted"] += len(uuids)
            stats["accepted" if status == 202 else "rejected"] += len(uuids)
        second += 1


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--gpus", type=int, default=10_000)
    parser.add_argument("--web-processes", type=int, default=1)
    parser.add_argument("--server", choices=("uvicorn", "daphne"), default="uvicorn")
    parser.add_argument("--connections", type=int, default=100)
    parser.add_argument("--seconds", type=float, default=20)
    parser.add_argument("--warmup", type=float, default=5)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    if not os.environ.get("DATABASE_URL", "").startswith("postgres") or not os.environ.get("REDIS_URL"):
        sys.exit(
            "Set DATABASE_URL (PostgreSQL) and REDIS_URL to a database and Redis db this benchmark may empty."
        )
    sys.path.insert(0, str(ROOT / "bench"))
    from bench_db import cpu_s, ensure_database, telemetry_fleet, web_server

    ensure_database(os.environ["DATABASE_URL"])
    import django

    django.setup()
    import redis
    from django.core.management import call_command

    from nodepools.models import Node
    from telemetry import store
    from telemetry.models import NodeToken
    from tests.integration.processes import free_port, port_open

    call_command("migrate", verbosity=0)
    redis.Redis.from_url(os.environ["REDIS_URL"]).flushdb()
    telemetry_fleet(args.gpus, max(1, args.gpus // 2000))
    fleet = []
    for node in Node.objects.prefetch_related("gpus"):
        uuids = [str(g.uuid) for g in sorted(node.gpus.all(), key=lambda g: g.index)]
        if uuids:
            fleet.append((NodeToken.issue(node)[1], uuids))
    ports = [free_port() for _ in range(args.web_processes)]
    servers = [
        subprocess.Popen(
            web_server(args.server, port), cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT
        )
        for port in ports
    ]
    try:
        while not all(port_open(port) for port in ports):
            time.sleep(0.2)
        start = time.time() + 1
        until = start + args.warmup + args.seconds
        stats = {"measure_from": start + args.warmup, "measure_until": until, "latencies": []}
        stats.update(sent=0, unanswered=0, accepted=0, rejected=0, window_accepted=0)
        per_connection = [[] for _ in range(args.connections)]
        for i, (token, uuids) in enumerate(fleet):
            per_connection[i % args.connections].append((token, uuids, i / len(fleet)))

        async def measure() -> dict:
            tasks = [
                asyncio.create_task(connection(ports[c % len(ports)], nodes, start, until, stats))
                for c, nodes in enumerate(per_connection)
                if nodes
            ]
            await asyncio.sleep(stats["measure_from"] - time.time())
            web, generator = sum(cpu_s(s.pid) for s in servers), time.process_time()
            await asyncio.sleep(until - time.time())  # the window: CPU and answers within it
            cpu = {
                "web": sum(cpu_s(s.pid) for s in servers) - web,
                "generator": time.process_time() - generator,
            }
            await asyncio.gather(*tasks)  # what was due in the window, however late it is answered
            return cpu

        cpu = asyncio.run(measure())
    finally:
        for server in servers:
            server.terminate()
            server.wait(10)
    counted = store.ingest_counts().get("accepted", 0)
    result = {
        "server": args.server,
        "web_processes": args.web_processes,
        "gpus": sum(len(uuids) for _, uuids in fleet),
        "nodes": len(fleet),
        "connections": args.connections,
        "seconds": args.seconds,
        "samples_per_s": round(stats["window_accepted"] / args.seconds),
        "p50_s": round(statistics.median(stats["latencies"]), 4),
        "p99_s": round(statistics.quantiles(stats["latencies"], n=100)[98], 4),
        "web_cpu_cores": round(cpu["web"] / args.seconds, 2),
        "generator_cpu_cores": round(cpu["generator"] / args.seconds, 2),
        "rejected": stats["rejected"],
        "lost": max(0, stats["accepted"] - counted) + stats["unanswered"],
        "load_average": os.getloadavg(),
    }
    print(json.dumps(result) if args.json else "\n".join(f"{k}: {v}" for k, v in result.items()))


if __name__ == "__main__":
    main()
