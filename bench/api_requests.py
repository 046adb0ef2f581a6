"""API read latency at fleet scale through a real web process: p50 and p99 per endpoint.

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/nvke_bench_api python bench/api_requests.py \
        [--nodes 1000] [--claims 10000] [--requests 300] [--server daphne|uvicorn] [--json]

It empties that database, seeds the catalog and builds the scale fleet (bench_db.scale_fleet: one
cluster, `--nodes` 8-GPU nodes, `--claims` placed claims), starts one web process (`--server`) with
the database connection pool on, and times each endpoint below from one keep-alive HTTP client with
a bearer token (rate limits raised out of the way): lists at their default page size (50; `nodes/` 20)
and details, `--requests` times each after a warm-up. `--json` prints one line: per endpoint `p50_ms`,
`p99_ms`, `server_cpu_ms`, the web process's CPU per request (from /proc: steadier than latency on a busy
machine), and `bytes`, the body's size."""

import argparse
import http.client
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
os.environ.setdefault("REDIS_URL", "redis://127.0.0.1:6379/13")
os.environ["NVKE_RATE_LIMIT_TOKEN"] = os.environ["NVKE_RATE_LIMIT_USER"] = "1000000/minute"
SERVERS = ("daphne", "uvicorn")


def endpoints(cluster) -> dict[str, str]:
    """The reads measured: each list and one detail of each resource, busy ones (a full node, a placed
    claim) rather than empty ones."""
    from claims.models import Claim

    claim = Claim.objects.filter(cluster=cluster, status="allocated").order_by("pk").first()
    node = claim.allocation.node
    gpu = claim.allocation.shares.first().gpu_id
    return {
        "clusters": "/api/v1/clusters/",
        "cluster": f"/api/v1/clusters/{cluster.pk}/",
        "node-pools": "/api/v1/node-pools/",
        "node-pool": f"/api/v1/node-pools/{node.pool_id}/",
        "nodes": "/api/v1/nodes/",
        "node": f"/api/v1/nodes/{node.pk}/",
        "claims": "/api/v1/claims/",
        "claim": f"/api/v1/claims/{claim.pk}/",
        "telemetry-gpus": "/api/v1/telemetry/gpus/",
        "telemetry-gpu": f"/api/v1/telemetry/gpus/{gpu}/",
    }


def percentile(values: list[float], p: int) -> float:
    return statistics.quantiles(values, n=100)[p - 1]


def measure(server: str, token: str, urls: dict[str, str], requests: int) -> dict:
    from tests.integration.processes import free_port, port_open

    port = free_port()
    from bench_db import cpu_s, web_server

    process = subprocess.Popen(
        web_server(server, port),
        cwd=ROOT,
        env={**os.environ, "NVKE_DB_POOL_MAX_SIZE": "10"},
        stdout=subprocess.DEVNULL,  # the access log
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 60
        while not port_open(port):
            if time.monotonic() > deadline or process.poll() is not None:
                sys.exit(f"{server} did not start")
            time.sleep(0.1)
        client = http.client.HTTPConnection("127.0.0.1", port)
        headers = {"Authorization": f"Bearer {token}"}

        sizes = {}

        def get(url: str) -> float:
            started = time.perf_counter()
            client.request("GET", url, headers=headers)
            response = client.getresponse()
            sizes[url] = len(response.read())
            assert response.status == 200, (url, response.status)
            return (time.perf_counter() - started) * 1000

        results = {}
        for name, url in urls.items():
            for _ in range(20):  # warm-up: imports, first connections, caches
                get(url)
            cpu_before = cpu_s(process.pid)
            times = [get(url) for _ in range(requests)]
            results[name] = {
                "p50_ms": round(percentile(times, 50), 2),
                "p99_ms": round(percentile(times, 99), 2),
                "server_cpu_ms": round((cpu_s(process.pid) - cpu_before) / requests * 1000, 2),
                "bytes": sizes[url],
            }
        return results
    finally:
        process.terminate()
        process.wait()


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--nodes", type=int, default=1000)
    parser.add_argument("--claims", type=int, default=10_000)
    parser.add_argument("--requests", type=int, default=300)
    parser.add_argument("--server", choices=SERVERS, default="daphne")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    if not os.environ.get("DATABASE_URL", "").startswith("postgres"):
        sys.exit("Set DATABASE_URL to a PostgreSQL database this benchmark may empty.")
    sys.path.insert(0, str(ROOT / "bench"))
    from bench_db import ensure_database, fresh_catalog, scale_fleet

    ensure_database(os.environ["DATABASE_URL"])
    import django

    django.setup()
    import redis
    from django.contrib.auth import get_user_model

    from claims.models import Claim
    from nodepools.models import Gpu
    from nvke.tenancy.models import ApiToken, Membership, Tenant

    started = time.time()
    fresh_catalog()
    tenant = Tenant.objects.create(name="Bench", slug="bench")
    user = get_user_model().objects.create(username="bench")
    Membership.objects.create(user=user, tenant=tenant, role="owner")
    cluster = scale_fleet(tenant, args.nodes, args.claims)
    redis.Redis.from_url(os.environ["REDIS_URL"]).flushdb()  # the queued placement tasks: placed already
    _, token = ApiToken.issue(tenant=tenant, user=user, name="bench")
    setup_s = time.time() - started
    load_before = os.getloadavg()
    result = {
        "server": args.server,
        "nodes": args.nodes,
        "gpus": Gpu.objects.count(),
        "claims_allocated": Claim.objects.filter(status="allocated").count(),
        "requests_each": args.requests,
        "setup_s": round(setup_s),
        "endpoints": measure(args.server, token, endpoints(cluster), args.requests),
        "load_average": [load_before, os.getloadavg()],
    }
    if args.json:
        print(json.dumps(result))
    else:
        for name, figures in result.pop("endpoints").items():
            print(
                f"{name:>16}: p50 {figures['p50_ms']:7.2f} ms   p99 {figures['p99_ms']:7.2f} ms"
                f"   server CPU {figures['server_cpu_ms']:6.2f} ms"
            )
        for key, value in result.items():
            print(f"{key:>16}: {value}")


if __name__ == "__main__":
    main()
