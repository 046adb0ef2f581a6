"""Gang-placement benchmark: the trace's multi-GPU pods as multi-node jobs, placed with and without claim
groups (claims/allocation/gangs.py), on Alibaba cluster-trace-gpu-v2023.

    python bench/gangs.py --nodes openb_node_list_gpu_node.csv --pods openb_pod_list_default.csv \\
        --seeds 3 [--scale 10] [--json]

Method (bench/allocator.py's, see bench/README.md): per seed, pods sampled with replacement to 130% of
the cluster's GPUs and shuffled, placed one at a time with FGD, nothing departs; read when arrived demand
first reaches 100%. Jobs: every whole-GPU pod asking 2 GPUs or more becomes a job of k identical members
(k = 2 or 4, even odds, from a generator seeded with the seed), each member the pod's shape; every
other pod is a single claim. Topology: the node list in order, eight 8-GPU nodes to an NVLink clique
(other nodes have none) and 32 nodes to a rack.

- without groups, a job's members are placed one by one, each where it fits: a job can be part placed
  and hold GPUs that do it no good;
- with groups, a job is placed all or nothing (minimum k) into the tightest domain (place_gang).

Printed: GPU allocation at 100% arrived; at the end (130% arrived), jobs arrived and fully placed, GPUs
held by part-placed jobs and the share of placed jobs inside one clique or one rack; single-claim and
gang decisions/s (each over its own calls, by this process's CPU time, so a loaded machine skews them
less). Wait times and preemptions need departures and priorities, which this replay has not:
bench/gang_replay.py replays the same jobs on the trace's clock for those."""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import time
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import allocator  # noqa: E402

from claims.allocation.fgd import Workload  # noqa: E402
from claims.allocation.fleet import Fleet, PlacementCache  # noqa: E402
from claims.allocation.gangs import NVLINK, RACK, GangPlacement, place_gang  # noqa: E402
from claims.allocation.state import NodeState, Placement, Request  # noqa: E402

CLIQUE_NODES, RACK_NODES = 8, 32


@dataclass(frozen=True)
class Job:
    request: Request
    members: int
    gpus: float  # all members together


def jobs_of(sample: list[allocator.Pod], seed: int) -> list[Job]:
    rng = random.Random(seed)
    jobs = []
    for pod in sample:
        multi = pod.request.kind == "whole" and pod.request.gpus >= 2
        members = rng.choice((2, 4)) if multi else 1
        jobs.append(Job(pod.request, members, pod.gpus * members))
    return jobs


def topology_of(nodes: list[NodeState]) -> dict[str, dict[str, str]]:
    topology = {}
    eight = 0
    for i, node in enumerate(nodes):
        topology[node.id] = {RACK: f"r{i // RACK_NODES}"}
        if len(node.gpus) == 8:
            topology[node.id][NVLINK] = f"c{eight // CLIQUE_NODES}"
            eight += 1
    return topology


@dataclass
class Run:
    alloc_at_100: float
    jobs: int
    jobs_placed: int
    held_by_part_placed: float
    in_one_clique: int
    in_one_rack: int
    single_decisions: int
    single_seconds: float
    gang_decisions: int
    gang_seconds: float


def replay(
    nodes: list[NodeState], jobs: list[Job], groups: bool, workload: Workload, cache: PlacementCache
) -> Run:
    capacity = sum(len(n.gpus) for n in nodes)
    topology = topology_of(nodes)
    fleet = Fleet(nodes, cache)
    run = Run(0.0, 0, 0, 0.0, 0, 0, 0, 0.0, 0, 0.0)
    arrived = allocated = 0.0
    placed_of: list[list[Placement]] = []

    def place(one: Fleet, request: Request) -> Placement | None:
        return one.place(request, "binpack") or None  # on one node: the allocator's choice for gangs

    for job in jobs:
        arrived += job.gpus
        placements: list[Placement] = []
        start = time.process_time()
        if job.members > 1 and groups:
            found = place_gang(job.request, job.members, job.members, fleet, topology, place)
            if isinstance(found, GangPlacement):
                placements = found.placements
            run.gang_decisions += 1
        else:
            for _ in range(job.members):
                found = fleet.place(job.request, "fgd", workload)
                if isinstance(found, Placement):
                    fleet.apply(found)
                    placements.append(found)
                run.single_decisions += 1
        if groups:
            for placement in placements if job.members > 1 else ():
                fleet.apply(placement)
        elapsed = time.process_time() - start
        if job.members > 1 and groups:
            run.gang_seconds += elapsed
        else:
            run.single_seconds += elapsed
        allocated += job.gpus / job.members * len(placements)
        if job.members > 1:
            placed_of.append(placements)
        if not run.alloc_at_100 and arrived >= capacity:
            run.alloc_at_100 = allocated / capacity
    multi = [(p, j) for p, j in zip(placed_of, (j for j in jobs if j.members > 1), strict=False)]
    run.jobs = len(multi)
    for placements, job in multi:
        if len(placements) == job.members:
            run.jobs_placed += 1
            run.in_one_clique += len(
                {topology[p.node_id].get(NVLINK) for p in placements} - {None}
            ) == 1 and all(NVLINK in topology[p.node_id] for p in placements)
            run.in_one_rack += len({topology[p.node_id][RACK] for p in placements}) == 1
        elif placements:
            run.held_by_part_placed += job.request.gpus * len(placements)
    return run


def bench(nodes_csv: Path, pods_csv: Path, seeds: int, scale: int, first_seed: int = 42) -> dict:
    pods = allocator.read_pods(pods_csv)
    capacity = sum(len(n.gpus) for n in allocator.read_nodes(nodes_csv, scale))
    workload = Workload((p.request for p in pods), window=len(pods))
    result: dict = {"seeds": seeds, "scale": scale, "capacity_gpus": capacity}
    for groups in (False, True):
        cache = PlacementCache()
        runs = []
        for seed in range(first_seed, first_seed + seeds):
            jobs = jobs_of(allocator.arrivals(pods, capacity, 1.3, seed), seed)
            runs.append(replay(allocator.read_nodes(nodes_csv, scale), jobs, groups, workload, cache))
        placed = sum(r.jobs_placed for r in runs) or 1
        result["with_groups" if groups else "without_groups"] = {
            "gpu_alloc_pct_at_100": round(100 * statistics.mean(r.alloc_at_100 for r in runs), 2),
            "multi_member_jobs_at_end": round(statistics.mean(r.jobs for r in runs), 1),
            "jobs_fully_placed": round(statistics.mean(r.jobs_placed for r in runs), 1),
            "gpus_held_by_part_placed_jobs": round(statistics.mean(r.held_by_part_placed for r in runs), 1),
            "placed_jobs_in_one_clique_pct": round(100 * sum(r.in_one_clique for r in runs) / placed, 1),
            "placed_jobs_in_one_rack_pct": round(100 * sum(r.in_one_rack for r in runs) / placed, 1),
            "single_decisions_per_s": round(
                sum(r.single_decisions for r in runs) / sum(r.single_seconds for r in runs), 1
            ),
            "gang_decisions_per_s": (
                round(sum(r.gang_decisions for r in runs) / sum(r.gang_seconds for r in runs), 1)
                if groups
                else None
            ),
        }
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--nodes", type=Path, required=True)
    parser.add_argument("--pods", type=Path, required=True)
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--scale", type=int, default=1, help="the node list this many times over")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    result = bench(args.nodes, args.pods, args.seeds, args.scale)
    print(json.dumps(result, indent=None if args.json else 2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
