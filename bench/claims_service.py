"""Service-path benchmark: claims per second through the allocation service on PostgreSQL, with N
concurrent worker processes, and the over-commits found afterwards.

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/nvke_bench python bench/claims_service.py \
        --workers 4 --claims 250 [--rounds 10] [--queue] [--json]

REDIS_URL defaults to redis://127.0.0.1:6379/13 (the Channels layer that carries each claim's event).
It empties that database (flush), seeds the catalog, builds one cluster with a fractional L4 pool and a
MIG H100 pool in the simulator, then runs `manage.py claim_load` in each worker process; the clock
starts once every loader has loaded Django (and, with --queue, every allocator worker answers a ping)."""

import argparse
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
# The production shape: a Redis channel layer carries every claim's websocket event.
os.environ.setdefault("REDIS_URL", "redis://127.0.0.1:6379/13")


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--workers", type=int, default=4)
    parser.add_argument("--claims", type=int, default=250, help="claims per worker")
    parser.add_argument("--nodes", type=int, default=40, help="nodes per pool")
    parser.add_argument(
        "--queue",
        action="store_true",
        help="queue the claims: the loaders submit, N real Celery workers on the allocator queue place",
    )
    parser.add_argument(
        "--allocators", type=int, help="with --queue: allocator workers (default: as many as --workers)"
    )
    parser.add_argument(
        "--rounds", type=int, default=1, help="measure this many times, each on a fresh database"
    )
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    if not os.environ.get("DATABASE_URL", "").startswith("postgres"):
        sys.exit("Set DATABASE_URL to a PostgreSQL database this benchmark may empty.")

    from bench_db import ensure_database

    ensure_database(os.environ["DATABASE_URL"])
    import django

    django.setup()
    rounds = []
    for _ in range(args.rounds):
        rounds.append(measure(args, set_up(args.nodes)))
        if not args.json:
            print(f"round {len(rounds)}: {rounds[-1]['claims_per_s']} claims/s", file=sys.stderr)
    rates = [r["claims_per_s"] for r in rounds]
    result = {
        **rounds[-1],
        "claims_per_s": statistics.median(rates),  # the median round
        "claims_per_s_rounds": rates,
        "overcommits": sum(r["overcommits"] for r in rounds),
        "rounds": len(rounds),
    }
    if args.json:
        print(json.dumps(result))
    else:
        for key, value in result.items():
            print(f"{key:>20}: {value}")


def set_up(nodes: int):
    """An emptied database with one cluster: a fractional L4 pool and a MIG H100 pool."""
    from bench_db import bench_cluster, fresh_catalog
    from django.db import connection

    from catalog.models import DriverRelease, GpuModel
    from nodepools.models import NodePool
    from nodepools.services import reconcile
    from nvke.tenancy.models import Tenant

    fresh_catalog()
    tenant = Tenant.objects.create(name="Bench", slug="bench")
    cluster = bench_cluster(tenant)
    driver = DriverRelease.objects.get(version="580.105.08")
    for name, model, mode in [("frac", "l4", "fractional"), ("mig", "h100-sxm5-80gb", "mig")]:
        pool = NodePool.objects.create(
            tenant=tenant,
            cluster=cluster,
            name=name,
            gpu_model=GpuModel.objects.get(name=model),
            gpus_per_node=8,
            node_count=nodes,
            min_nodes=0,
            max_nodes=nodes,
            driver_release=driver,
            sharing_mode=mode,
        )
        reconcile(pool.pk)
    with connection.cursor() as cursor:  # the set-up's writes are flushed now, not during the measurement
        cursor.execute("CHECKPOINT")
    return cluster


def measure(args: argparse.Namespace, cluster) -> dict:
    """One round: the loaders (and allocator workers) against the cluster, then the invariants."""
    from bench_db import cpu_s
    from django.db.models import Max

    from claims.models import Claim
    from claims.selectors import allocation_violations

    allocators = []
    if args.queue:
        import redis

        redis.Redis.from_url(os.environ["REDIS_URL"]).flushdb()
        allocators = [
            subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "celery",
                    "--quiet",
                    "-A",
                    "nvke",
                    "worker",
                    "-Q",
                    "allocator",
                    "-P",
                    "solo",
                    "-n",
                    f"allocator{i}@%h",
                    "--without-gossip",
                    "--without-mingle",
                    "-l",
                    "warning",
                ],
                cwd=ROOT,
                stdout=subprocess.DEVNULL,  # keeps --json output parseable; errors still reach stderr
            )
            for i in range(args.allocators or args.workers)
        ]
    if allocators:  # every allocator worker answers before the clock starts
        from nvke.celery import app

        while len(app.control.ping(timeout=1.0)) < len(allocators):
            pass
    workers = [
        subprocess.Popen(
            [
                sys.executable,
                str(ROOT / "manage.py"),
                "claim_load",
                "--cluster",
                str(cluster.pk),
                "--claims",
                str(args.claims),
                "--prefix",
                f"w{i}",
                "--seed",
                str(i),
                "--wait-for-go",
                *(["--queue"] if args.queue else []),
            ],
            cwd=ROOT,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        for i in range(args.workers)
    ]
    sessions = []  # each loader's database session (a PostgreSQL backend process on this machine)
    for w in workers:  # Django loaded in each loader
        ready, pid = w.stdout.readline().split()
        assert ready == "ready"
        sessions.append(int(pid))
    sessions_cpu = -sum(cpu_s(pid) for pid in sessions)
    start_at = time.time()
    for w in workers:
        w.stdin.write("go\n")
        w.stdin.flush()
    reports = [json.loads(w.stdout.readline()) for w in workers]
    sessions_cpu += sum(cpu_s(pid) for pid in sessions)  # before the loaders end their sessions
    for w in workers:
        w.communicate()
    if any(w.returncode for w in workers):
        sys.exit("a loader failed")
    finished = max(r["finished_at"] for r in reports)
    if args.queue:  # done when the allocator workers have placed every claim: at the last placement
        deadline = time.time() + 300
        while Claim.objects.filter(status=Claim.Status.PENDING).exists() and time.time() < deadline:
            time.sleep(0.05)
        # (not when this loop noticed it: that came after the loaders' processes had exited)
        last = Claim.objects.aggregate(last=Max("allocated_at"))["last"]
        finished = max(finished, last.timestamp()) if last else time.time()
        for allocator in allocators:
            allocator.terminate()
            allocator.wait()
    wall = finished - start_at
    total = sum(r["claims"] for r in reports)
    return {
        "path": "queue" if args.queue else "api",
        "workers": args.workers,
        "claims": total,
        "allocated": Claim.objects.filter(status=Claim.Status.ALLOCATED).count(),
        "pending": Claim.objects.filter(status=Claim.Status.PENDING).count(),
        "seconds": round(wall, 2),
        "claims_per_s": round(total / wall, 1),
        "overcommits": len(allocation_violations(cluster.pk)),
        "loader_seconds": [r["seconds"] for r in reports],
        # CPU per claim of the loaders' processes and of their PostgreSQL sessions (with --queue the
        # allocator workers' is not counted)
        "cpu_ms_per_claim": {
            "loaders": round(1000 * sum(r["cpu_seconds"] for r in reports) / total, 3),
            "their_sessions": round(1000 * sessions_cpu / total, 3),
        },
        "gpus": 2 * 8 * args.nodes,
    }


if __name__ == "__main__":
    main()
