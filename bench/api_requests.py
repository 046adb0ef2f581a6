"""API request latency through a real web process, with the database connection pool on and off.

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/nvke_bench_api python bench/api_requests.py \
        [--requests 400] [--rounds 2] [--json]

It empties that database, seeds the catalog, creates a tenant with one cluster and an API token, then,
alternating per round, starts `daphne nvke.asgi:application` with NVKE_DB_POOL_MAX_SIZE=10 and =0 and
times `GET /api/v1/clusters/` from one keep-alive HTTP client (rate limits raised out of the way)."""

import argparse
import http.client
import json
import os
import socket
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


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def ms_per_request(pool_size: int, token: str, requests: int) -> float:
    port = free_port()
    server = subprocess.Popen(
        [sys.executable, "-m", "daphne", "-p", str(port), "nvke.asgi:application"],
        cwd=ROOT,
        env={**os.environ, "NVKE_DB_POOL_MAX_SIZE": str(pool_size)},
        stdout=subprocess.DEVNULL,  # the access log
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 60
        while True:  # until daphne listens
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                if time.monotonic() > deadline or server.poll() is not None:
                    sys.exit("daphne did not start")
                time.sleep(0.1)
        client = http.client.HTTPConnection("127.0.0.1", port)
        headers = {"Authorization": f"Bearer {token}"}

        def get() -> None:
            client.request("GET", "/api/v1/clusters/", headers=headers)
            response = client.getresponse()
            response.read()
            assert response.status == 200, response.status

        for _ in range(30):  # warm-up: imports, first connections
            get()
        start = time.perf_counter()
        for _ in range(requests):
            get()
        return (time.perf_counter() - start) / requests * 1000
    finally:
        server.terminate()
        server.wait()


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--requests", type=int, default=400)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    if not os.environ.get("DATABASE_URL", "").startswith("postgres"):
        sys.exit("Set DATABASE_URL to a PostgreSQL database this benchmark may empty.")
    sys.path.insert(0, str(ROOT / "bench"))
    from bench_db import bench_cluster, ensure_database, fresh_catalog

    ensure_database(os.environ["DATABASE_URL"])
    import django

    django.setup()
    from django.contrib.auth import get_user_model

    from nvke.tenancy.models import ApiToken, Membership, Tenant

    fresh_catalog()
    tenant = Tenant.objects.create(name="Bench", slug="bench")
    bench_cluster(tenant)
    user = get_user_model().objects.create(username="bench")
    Membership.objects.create(user=user, tenant=tenant, role="owner")
    _, token = ApiToken.issue(tenant=tenant, user=user, name="bench")
    rounds: dict[str, list[float]] = {"pool": [], "no_pool": []}
    for _ in range(args.rounds):
        rounds["pool"].append(round(ms_per_request(10, token, args.requests), 2))
        rounds["no_pool"].append(round(ms_per_request(0, token, args.requests), 2))
    result = {
        "requests": args.requests,
        "ms_per_request_pool": statistics.median(rounds["pool"]),
        "ms_per_request_no_pool": statistics.median(rounds["no_pool"]),
        "rounds": rounds,
    }
    print(json.dumps(result) if args.json else "\n".join(f"{k:>24}: {v}" for k, v in result.items()))


if __name__ == "__main__":
    main()
