"""Preemption's cost under the allocation lock: a full fleet of 1-GPU claims of priority 0, and an
8-GPU claim of priority 10 that must take one node's eight. Times `preemption.preempt_for` (what the
lock's holder spends choosing and taking victims) over rounds: each round creates the preemptor,
then releases it (its victims are placed again, the fleet is full again).

    DATABASE_URL=postgres://.../nvke_bench_preemption NVKE_DEV=1 python bench/preemption.py \\
        [--nodes 40] [--rounds 10] [--json]

Celery runs eagerly (no REDIS_URL). Prints the median and the fastest round, in ms."""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "nvke.settings")


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--nodes", type=int, default=40)
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    if not os.environ.get("DATABASE_URL", "").startswith("postgres") or os.environ.get("REDIS_URL"):
        sys.exit("Set DATABASE_URL to a PostgreSQL database this benchmark may empty, and no REDIS_URL.")
    from bench_db import ensure_database

    ensure_database(os.environ["DATABASE_URL"])
    import django

    django.setup()
    result = measure(args)
    print(json.dumps(result) if args.json else result)


def measure(args: argparse.Namespace) -> dict:
    from bench_db import bench_pool

    from claims.allocator import create_claim, preemption, release_claim, service
    from claims.models import Claim
    from nvke.tenancy.context import TenantContext

    tenant, cluster, pool = bench_pool("h100", "h100-sxm5-80gb", 8, args.nodes)
    context = TenantContext(tenant, "owner")
    for i in range(args.nodes * 8):
        create_claim(context=context, cluster=cluster, name=f"fill-{i}", kind="whole", gpus=1)
    timings: list[float] = []
    original = preemption.preempt_for

    def timed(*call_args, **kwargs):
        start = time.perf_counter()
        try:
            return original(*call_args, **kwargs)
        finally:
            timings.append(time.perf_counter() - start)

    service.preemption.preempt_for = timed
    rounds = []
    for i in range(args.rounds):
        timings.clear()
        claim = create_claim(
            context=context, cluster=cluster, name=f"urgent-{i}", kind="whole", gpus=8, priority=10
        )
        assert claim.status == Claim.Status.ALLOCATED, claim.pending_reason
        rounds.append(timings[0] * 1000)
        release_claim(claim)
    return {
        "nodes": args.nodes,
        "preempt_ms_median": round(statistics.median(rounds), 1),
        "preempt_ms_min": round(min(rounds), 1),
        "rounds": len(rounds),
    }


if __name__ == "__main__":
    main()
