"""Defragmentation on the trace's workload families: GPUs freed by a bounded number of claim moves
(`claims.allocation.plan_defrag`, what the API's defrag routes run), against a full repack.

    python bench/defrag.py --nodes openb_node_list_gpu_node.csv --pods openb_pod_list_gpushare100.csv \\
        --moves 10,50,200 [--depart 0.3] [--seed 42] [--json]

Scenario: the pods of one seed (bench/allocator.py's arrivals) are placed with fgd until arrived demand
reaches 100% of the GPUs; then a share `--depart` of the placed pods, drawn at random, leaves. That churn
is what leaves holes: nothing departs in the paper's method, so without it there is little to defragment.

Then, on copies of that fleet:
- `plan_defrag(max_moves=M)` for each M: the moves it plans (only fractions move), the GPUs they free
  (idle after the moves - idle before) and the GPUs freed per move;
- a full repack: every remaining claim, whole GPUs and CPU-only pods included, placed again on an empty
  fleet with binpack, largest GPU demand first (first-fit decreasing); the GPUs idle after it, minus those
  idle before, is what moving everything would free. It is a reference, not an optimum; claims it could
  not place again are reported (`repack_unplaced`), and then the comparison is not like for like;
- `bound_gpus_freed`: what no placement can beat, the claims' GPU demand packed without gaps and
  without CPU, memory or model constraints (the trace's nodes oversubscribe no GPU, so it holds).
"""

from __future__ import annotations

import argparse
import copy
import json
import math
import random
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import allocator  # noqa: E402

from claims.allocation import Fleet, Placement, Workload, plan_defrag  # noqa: E402
from claims.allocation.state import NodeState  # noqa: E402


def churned(nodes_csv: Path, pods_csv: Path, seed: int, depart: float) -> tuple[list[NodeState], dict]:
    """The fleet after placing one seed's arrivals up to 100% and a share `depart` of them leaving."""
    pods = allocator.read_pods(pods_csv)
    nodes = allocator.read_nodes(nodes_csv)
    capacity = sum(len(n.gpus) for n in nodes)
    fleet = Fleet(nodes)
    workload = Workload((p.request for p in pods), window=len(pods))
    placed: dict[int, Placement] = {}
    for i, pod in enumerate(allocator.arrivals(pods, capacity, 1.0, seed)):
        placement = fleet.place(pod.request, "fgd", workload)
        if isinstance(placement, Placement):
            fleet.apply(placement)
            placed[i] = placement
    rng = random.Random(seed)
    for claim in rng.sample(sorted(placed), round(depart * len(placed))):
        fleet.release(placed.pop(claim))
    return fleet.nodes, placed


def idle_gpus(nodes: list[NodeState]) -> int:
    return sum(g.idle() for n in nodes for g in n.gpus)


def repack(nodes: list[NodeState], placed: dict) -> tuple[int, int]:
    """Idle GPUs after placing every claim again, largest first, on an empty copy; and how many failed."""
    empty = copy.deepcopy(nodes)
    for n in empty:
        n.cpu_milli_used = n.memory_mib_used = 0
        for g in n.gpus:
            g.exclusive, g.memory_used_mib, g.compute_used, g.ceiling_used, g.mig_used = False, 0, 0, 0, []
    fleet = Fleet(empty)
    unplaced = 0
    for p in sorted(placed.values(), key=lambda p: (-p.request.gpu_demand, -p.request.cpu_milli)):
        target = fleet.place(p.request, "binpack")
        if isinstance(target, Placement):
            fleet.apply(target)
        else:
            unplaced += 1
    return idle_gpus(fleet.nodes), unplaced


def bench(nodes_csv: Path, pods_csv: Path, moves: list[int], seed: int, depart: float) -> dict:
    nodes, placed = churned(nodes_csv, pods_csv, seed, depart)
    before = idle_gpus(nodes)
    result: dict = {"pods": pods_csv.name, "seed": seed, "depart": depart, "claims": len(placed)}
    result["idle_gpus_before"] = before
    result["bounded"] = []
    for m in moves:
        start = time.process_time()
        plan = plan_defrag(nodes, placed, m)
        seconds = time.process_time() - start
        after = copy.deepcopy(nodes)
        fleet = Fleet(after)
        for move in plan:
            fleet.release(move.source)
            fleet.apply(move.target)
        freed = idle_gpus(after) - before
        result["bounded"].append(
            {
                "max_moves": m,
                "moves": len(plan),
                "gpus_freed": freed,
                "freed_per_move": round(freed / len(plan), 3) if plan else 0.0,
                "cpu_s": round(seconds, 2),
            }
        )
    idle_after, unplaced = repack(nodes, placed)
    result["repack_gpus_freed"] = idle_after - before
    # No placement frees more than this: the claims' GPU demand packed without any gap or constraint.
    demand = sum(p.request.gpu_demand for p in placed.values())
    result["bound_gpus_freed"] = sum(len(n.gpus) for n in nodes) - math.ceil(demand) - before
    result["repack_claims"] = len(placed)
    result["repack_unplaced"] = unplaced
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--nodes", type=Path, required=True)
    parser.add_argument("--pods", type=Path, required=True)
    parser.add_argument("--moves", default="10,50,200", help="move budgets, comma-separated")
    parser.add_argument("--depart", type=float, default=0.3, help="share of placed pods that leave")
    parser.add_argument("--seed", type=int, default=42)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    moves = [int(m) for m in args.moves.split(",")]
    result = bench(args.nodes, args.pods, moves, args.seed, args.depart)
    if args.json:
        print(json.dumps(result))
        return 0
    print(f"{result['pods']}: {result['claims']} claims, {result['idle_gpus_before']} GPUs idle after churn")
    for b in result["bounded"]:
        freed = f"{b['gpus_freed']} GPUs ({b['freed_per_move']}/move)"
        print(f"  {b['max_moves']:>4} moves max: {b['moves']} moves free {freed}")
    print(f"  full repack ({result['repack_claims']} claims): {result['repack_gpus_freed']} GPUs freed")
    print(f"  no placement frees more than {result['bound_gpus_freed']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
