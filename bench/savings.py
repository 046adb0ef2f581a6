"""What sharing saves on an A10 inference fleet: the story users tell, measured with NVKE's allocator.

    python bench/savings.py [--services 240] [--seeds 10] [--json]

A seeded mix of inference services, as a fleet at whole-card allocation sees them: each holds one A10
(24 GB) and uses on average about a third of its memory (memory 2–14 GiB, mean ≈ 7.7 GiB of the card's
22.5 GiB) and a compute ceiling of 10–40%. Before: one card per service. After: the same services as
`fraction` claims placed by the allocator's pure core (fgd, NVKE's default) on A10 nodes of 4 GPUs in a
time-slicing pool with that mode's default policy (ceilings may add up to 200%, 10% guaranteed). Reports
GPUs needed and the memory used of the cards in use, before and after, mean over seeds. Throughput is
not measured here: a shared GPU gives each service at least its guarantee and at most its ceiling."""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from claims.allocation.fleet import Fleet  # noqa: E402
from claims.allocation.state import TIME_SLICING, GpuState, NodeState, Placement, Request  # noqa: E402

A10_MIB = 23028  # the catalog's A10 (catalog/seed.py)
GPUS_PER_NODE = 4
BUDGET_MILLI, GUARANTEE_MILLI = 2000, 100  # time-slicing defaults (nodepools/sharing.py)


def services(n: int, rng: random.Random) -> list[Request]:
    """Inference services: memory 2–14 GiB (triangular, mode 6 GiB: mean ≈ a third of the card), compute
    ceiling 10–40% in steps of 5."""
    return [
        Request(
            "fraction",
            memory_mib=int(rng.triangular(2, 14, 6) * 1024),
            compute_milli=rng.randrange(100, 401, 50),
            cpu_milli=2000,
            host_memory_mib=8192,
        )
        for _ in range(n)
    ]


def a10_nodes(count: int) -> list[NodeState]:
    return [
        NodeState(
            id=i,
            gpu_model="a10",
            sharing_mode=TIME_SLICING,
            gpus=[GpuState(g, A10_MIB) for g in range(GPUS_PER_NODE)],
            cpu_milli_total=16_000 * GPUS_PER_NODE,
            memory_mib_total=128 * 1024 * GPUS_PER_NODE,
            ceiling_budget=BUDGET_MILLI,
            default_guarantee=GUARANTEE_MILLI,
        )
        for i in range(count)
    ]


def run(n: int, seed: int) -> dict:
    requests = services(n, random.Random(seed))
    held = sum(r.memory_mib for r in requests)
    # Before: a whole card each.
    before = {"gpus": n, "memory_use": held / (n * A10_MIB)}
    # After: the same services, shared, on as many nodes as whole cards would have taken.
    fleet = Fleet(a10_nodes(-(-n // GPUS_PER_NODE)))
    for request in requests:
        placement = fleet.place(request)
        if not isinstance(placement, Placement):
            raise SystemExit(f"seed {seed}: {placement.reason}")
        fleet.apply(placement)
    used = [g for node in fleet.nodes for g in node.gpus if not g.idle()]
    after = {"gpus": len(used), "memory_use": sum(g.memory_used_mib for g in used) / (len(used) * A10_MIB)}
    ceilings = max(g.ceiling_used for g in used) / 10
    return {"before": before, "after": after, "max_ceilings_percent": ceilings}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--services", type=int, default=240)
    parser.add_argument("--seeds", type=int, default=10)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    runs = [run(args.services, seed) for seed in range(args.seeds)]

    def mean(*path: str) -> float:
        return statistics.mean(r[path[0]][path[1]] for r in runs)

    result = {
        "services": args.services,
        "seeds": args.seeds,
        "gpus_before": mean("before", "gpus"),
        "gpus_after": mean("after", "gpus"),
        "fewer_gpus_percent": round(100 * (1 - mean("after", "gpus") / mean("before", "gpus")), 1),
        "memory_use_before_percent": round(100 * mean("before", "memory_use"), 1),
        "memory_use_after_percent": round(100 * mean("after", "memory_use"), 1),
        "max_ceilings_on_a_gpu_percent": max(r["max_ceilings_percent"] for r in runs),
    }
    if args.json:
        print(json.dumps(result))
    else:
        for key, value in result.items():
            print(f"{key:32} {value}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
