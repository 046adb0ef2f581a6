"""Queue fairness benchmark: three queues of one cohort, nominal 1/3 of the cluster each; one is idle,
then returns. How long until it holds its nominal share again, and the share each queue holds over time,
with reclaim (borrowed claims preemptible) and without (every claim non-preemptible: it waits for
departures). Runs NVKE's own allocator on PostgreSQL (create_claim, place_pending, release_claim and
the preemption path), in simulated ticks.

    DATABASE_URL=postgres://.../nvke_bench_queues NVKE_DEV=1 python bench/queues_fairness.py \\
        [--ticks 60] [--return-at 20] [--job-ticks 6-14] [--seed 42] [--svg FILE] [--json]

Method: one cluster, 3 nodes × 8 H100 (24 GPUs); queues a, b, c with nominal 8 H100 GPUs each, cohort
"lab", no limits. Jobs are 2-GPU claims lasting --job-ticks (6–14, uniform, seeded). Each tick: finished jobs
are released; every active queue tops its backlog up to 4 pending jobs; a placement pass runs; each
queue's allocated GPUs are read. a and b are active throughout; c is idle until --return-at, then
active. Reclaim time: ticks from c's return until c holds 8 GPUs (its nominal). Celery runs eagerly
(no REDIS_URL): the allocator queue's passes run in process after each commit."""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "nvke.settings")

QUEUES, NOMINAL, JOB_GPUS, BACKLOG = ("a", "b", "c"), 8, 2, 4
TOTAL = 3 * NOMINAL


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--ticks", type=int, default=60)
    parser.add_argument("--return-at", type=int, default=20)
    parser.add_argument("--seed", type=int, default=42)
    parser.add_argument("--job-ticks", default="6-14", help="a job's length in ticks, uniform: min-max")
    parser.add_argument("--svg", help="write the shares over time here (both runs)")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    if not os.environ.get("DATABASE_URL", "").startswith("postgres") or os.environ.get("REDIS_URL"):
        sys.exit("Set DATABASE_URL to a PostgreSQL database this benchmark may empty, and no REDIS_URL.")
    from bench_db import ensure_database

    ensure_database(os.environ["DATABASE_URL"])
    import django

    django.setup()
    result = {mode: run(args, reclaim=mode == "reclaim") for mode in ("reclaim", "no_reclaim")}
    if args.svg:
        Path(args.svg).write_text(svg(result, args.return_at))
    if args.json:
        print(json.dumps(result))
        return
    for mode, found in result.items():
        print(
            f"{mode:>10}: c reclaims its nominal in {found['reclaim_ticks']} ticks; "
            f"{found['preempted']} preempted"
        )


def run(args: argparse.Namespace, *, reclaim: bool) -> dict:
    from bench_db import bench_cluster, fresh_catalog

    from catalog.models import DriverRelease, GpuModel
    from claims.allocator import create_claim, place_pending, release_claim
    from claims.models import Claim, Queue
    from nodepools.models import NodePool
    from nodepools.services import reconcile
    from nvke.tenancy.context import TenantContext
    from nvke.tenancy.models import Tenant

    fresh_catalog()
    tenant = Tenant.objects.create(name="Bench", slug="bench")
    cluster = bench_cluster(tenant)
    h100 = GpuModel.objects.get(name="h100-sxm5-80gb")
    pool = NodePool.objects.create(
        tenant=tenant,
        cluster=cluster,
        name="h100",
        gpu_model=h100,
        gpus_per_node=8,
        node_count=3,
        min_nodes=0,
        max_nodes=3,
        driver_release=DriverRelease.objects.get(version="580.105.08"),
    )
    reconcile(pool.pk)
    queues = {
        name: Queue.objects.create(
            tenant=tenant,
            cluster=cluster,
            name=name,
            cohort="lab",
            quotas=[{"gpu_model": h100.name, "gpus": NOMINAL}],
        )
        for name in QUEUES
    }
    context = TenantContext(tenant, "owner")
    rng = random.Random(args.seed)
    lengths = tuple(int(n) for n in args.job_ticks.split("-"))
    ends: dict[int, int] = {}  # claim pk → the tick its job ends, counted from its placement
    made = 0
    shares: list[dict[str, float]] = []
    preempted: set[int] = set()  # claims ever preempted (a finished job's claim is deleted)
    reclaimed_at = None
    for tick in range(args.ticks):
        for claim in Claim.objects.filter(cluster=cluster, status="allocated"):
            ends.setdefault(claim.pk, tick + rng.randint(*lengths))
            if ends[claim.pk] <= tick:
                release_claim(claim)
        for name in QUEUES:
            if name == "c" and tick < args.return_at:
                continue
            waiting = Claim.objects.filter(queue=queues[name], status="pending").count()
            for _ in range(BACKLOG - waiting):
                made += 1
                create_claim(
                    context=context,
                    cluster=cluster,
                    name=f"{name}-{made}",
                    kind="whole",
                    gpus=JOB_GPUS,
                    queue=queues[name],
                    preemptible=reclaim,
                    place=False,
                )
        place_pending(cluster.pk)
        for claim_id in Claim.objects.filter(cluster=cluster, status="pending").values_list("pk", flat=True):
            ends.pop(claim_id, None)  # preempted: its job starts again when placed again
        preempted.update(
            Claim.objects.filter(cluster=cluster, preempted_at__isnull=False).values_list("pk", flat=True)
        )
        held = {
            name: sum(
                Claim.objects.filter(queue=queues[name], status="allocated").values_list("gpus", flat=True)
            )
            for name in QUEUES
        }
        shares.append({name: held[name] / TOTAL for name in QUEUES})
        if tick >= args.return_at and reclaimed_at is None and held["c"] >= NOMINAL:
            reclaimed_at = tick
    return {
        "reclaim_ticks": None if reclaimed_at is None else reclaimed_at - args.return_at,
        "preempted": len(preempted),
        "shares": shares,
    }


TICKS = ((0, "0"), (1 / 3, "1/3"), (1, "1"))  # the share axis's labels


def svg(runs: dict[str, dict], returned: int) -> str:
    """The shares over time, a line per queue, one panel per run (by hand: no matplotlib in the venv)."""
    width, panel, pad = 640, 240, 40
    colors = {"a": "#1f77b4", "b": "#ff7f0e", "c": "#2ca02c"}
    lines = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{panel * len(runs)}" '
        'font-family="sans-serif" font-size="11">',
        f'<rect width="{width}" height="{panel * len(runs)}" fill="white"/>',
    ]
    for row, (mode, run) in enumerate(runs.items()):
        shares, top = run["shares"], row * panel

        def x(t: float, n: int = len(shares)) -> float:
            return pad + (width - 2 * pad) * t / max(1, n - 1)

        def y(share: float, top: int = top) -> float:
            return top + panel - pad - (panel - 2 * pad) * share

        lines += [
            f'<text x="{pad}" y="{top + 16}" font-weight="bold">{mode.replace("_", " ")}: c holds its '
            f"nominal {run['reclaim_ticks']} ticks after it returns, {run['preempted']} preempted</text>",
            f'<line x1="{pad}" y1="{y(0)}" x2="{width - pad}" y2="{y(0)}" stroke="black"/>',
            f'<line x1="{pad}" y1="{y(0)}" x2="{pad}" y2="{y(1)}" stroke="black"/>',
            f'<line x1="{pad}" y1="{y(1 / 3):.1f}" x2="{width - pad}" y2="{y(1 / 3):.1f}" '
            'stroke="#999" stroke-dasharray="4"/>',
            f'<line x1="{x(returned):.1f}" y1="{y(0)}" x2="{x(returned):.1f}" y2="{y(1)}" stroke="#999"/>',
            f'<text x="{x(returned) + 4:.1f}" y="{y(1) + 10}" fill="#666">c returns</text>',
            f'<text x="{width - pad}" y="{y(0) + 14}" text-anchor="end">tick {len(shares) - 1}</text>',
            *(f'<text x="{pad - 4}" y="{y(v) + 4:.1f}" text-anchor="end">{t}</text>' for v, t in TICKS),
        ]
        for i, name in enumerate(colors):
            points = " ".join(f"{x(t):.1f},{y(share[name]):.1f}" for t, share in enumerate(shares))
            dash = ' stroke-dasharray="6 3"' if name == "c" else ""
            lines.append(
                f'<polyline fill="none" stroke="{colors[name]}" stroke-width="2"{dash} points="{points}"/>'
            )
            left = width - pad - 180 + 60 * i
            lines.append(f'<text x="{left}" y="{top + 32}" fill="{colors[name]}">queue {name}</text>')
    lines.append("</svg>")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
