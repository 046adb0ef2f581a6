"""Trace-replay benchmark of NVKE's GPU allocator (claims/allocation) on Alibaba cluster-trace-gpu-v2023.

    python bench/allocator.py --nodes openb_node_list_gpu_node.csv --pods openb_pod_list_default.csv \\
        --policy fgd --seeds 10 [--json]

Method of the FGD paper's simulator (see bench/README.md): per seed, sample pods with replacement until
the requested GPUs reach 130% of the cluster's GPUs, shuffle, place one at a time, nothing departs.
Report the allocated GPU share, and the unallocated GPUs, when arrived demand first reaches 100% of
capacity, as the mean over seeds; and placement decisions per second (place + apply, failures included,
over the whole replay) with the CPU time each took. Also a lower bound on the unallocated GPUs that no
policy can beat (`sliver_lower_bound`). `--scale N` repeats the node list N times (a fleet N x larger,
with N x as many pods arriving), for how the cost per placement grows with the fleet.

Mapping of the trace onto the allocator:
- every node is a "fractional"-mode node; GPU memory is unknown (0) and the shared resource is the
  compute share (gpu_milli), so the GPU-share pods are `fraction` claims with compute_milli only;
- num_gpu >= 1 with gpu_milli == 1000 is a `whole` claim of num_gpu GPUs (taken from idle GPUs);
- num_gpu == 0 pods are CPU-only claims: they take node CPU and memory, and count 0 GPUs of demand
  (as in the simulator); node CPU and memory bound every pod;
- gpu_spec "" or "nan" means any model, otherwise the '|'-separated models are allowed;
- FGD's workload is the trace's pod list (the simulator's "typical pods": the most frequent shapes
  covering 95% of pods).
"""

from __future__ import annotations

import argparse
import json
import random
import resource
import statistics
import sys
import time
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))  # bench/traces.py, however this file is loaded

import traces  # noqa: E402

from claims.allocation.fgd import Workload  # noqa: E402
from claims.allocation.fleet import POLICIES, Fleet, PlacementCache  # noqa: E402
from claims.allocation.state import FRACTIONAL, GpuState, NodeState, Placement, Request  # noqa: E402


@dataclass(frozen=True)
class Pod:
    request: Request
    gpus: float  # requested GPUs: num_gpu for whole pods, gpu_milli / 1000 for GPU-share pods, 0 for CPU
    row: traces.PodRow | None = None  # its line of the trace (qos, creation and deletion times)


def read_nodes(path: Path, scale: int = 1) -> list[NodeState]:
    """The node list; `scale` > 1 repeats it that many times (copy k's names end in "#k")."""
    return [
        NodeState(
            id=row.name if scale == 1 else f"{row.name}#{k}",
            gpu_model=row.model,
            sharing_mode=FRACTIONAL,
            gpus=[GpuState(i, memory_mib=0) for i in range(row.gpus)],
            cpu_milli_total=row.cpu_milli,
            memory_mib_total=row.memory_mib,
        )
        for k in range(scale)
        for row in traces.read_nodes(path)
    ]


def read_pods(path: Path) -> list[Pod]:
    """Any pod list of the dataset's layout (bench/traces.py reads and checks it)."""
    pods = []
    for row in traces.read_pods(path):
        models = frozenset(row.gpu_spec.split("|")) if row.gpu_spec else frozenset()
        common = {"cpu_milli": row.cpu_milli, "host_memory_mib": row.memory_mib, "allowed_models": models}
        if row.num_gpu == 0:
            request = Request("cpu", **common)
        elif row.sharing:
            request = Request("fraction", compute_milli=row.gpu_milli, **common)
        else:
            request = Request("whole", gpus=row.num_gpu, **common)
        pods.append(Pod(request, row.gpus, row))
    return pods


def arrivals(pods: list[Pod], capacity: int, ratio: float, seed: int) -> list[Pod]:
    """Sample with replacement until `ratio` x capacity GPUs are requested, then shuffle."""
    rng = random.Random(seed)
    sample: list[Pod] = []
    requested = 0.0
    while requested < ratio * capacity:
        pod = rng.choice(pods)
        sample.append(pod)
        requested += pod.gpus
    rng.shuffle(sample)
    return sample


def sliver_lower_bound(arrived: list[Pod]) -> float:
    """GPUs that any placement leaves unallocated, from GPU-share sizes alone (CPU and memory ignored).

    A pod of s > 500 milli holds a GPU whose other 1000 - s can only take pods of at most that size.
    For a residual r: the pods with 1000 - r <= s < 1000 leave at least sum(1000 - s) free, minus what
    all pods of size <= r could fill; a pod that fails instead leaves even more unallocated (s > r)."""
    sizes = [round(p.gpus * 1000) for p in arrived if p.request.kind == "fraction"]
    best = 0
    for r in sorted({1000 - s for s in sizes if s > 500}):
        left = sum(1000 - s for s in sizes if 500 < s and 1000 - s <= r)
        best = max(best, left - sum(s for s in sizes if s <= r))
    return best / 1000


@dataclass
class Run:
    alloc_at_100: float  # allocated GPUs / capacity when arrived demand first reaches capacity
    alloc_at_end: float
    decisions: int
    seconds: float
    cpu_seconds: float  # this process's CPU time: the cost, whatever else the machine runs
    bound_at_100: float  # sliver_lower_bound of the pods arrived by then


def replay(
    nodes: list[NodeState], sample: list[Pod], policy: str, workload: Workload | None, cache: PlacementCache
) -> Run:
    """Place the pods one at a time on `nodes` (fresh); nothing departs."""
    capacity = sum(len(n.gpus) for n in nodes)
    fleet = Fleet(nodes, cache)
    arrived = allocated = 0.0
    at_100 = None
    count_at_100 = len(sample)
    start, cpu_start = time.perf_counter(), time.process_time()
    for i, pod in enumerate(sample):
        arrived += pod.gpus
        placement = fleet.place(pod.request, policy, workload)
        if isinstance(placement, Placement):
            fleet.apply(placement)
            allocated += pod.gpus
        if at_100 is None and arrived >= capacity:
            at_100, count_at_100 = allocated / capacity, i + 1
    seconds, cpu_seconds = time.perf_counter() - start, time.process_time() - cpu_start
    at_end = allocated / capacity
    bound = sliver_lower_bound(sample[:count_at_100])
    return Run(at_100 if at_100 is not None else at_end, at_end, len(sample), seconds, cpu_seconds, bound)


def bench(
    nodes_csv: Path,
    pods_csv: Path,
    policy: str,
    seeds: int,
    first_seed: int = 42,
    ratio: float = 1.3,
    paper_fgd: bool = False,
    scale: int = 1,
) -> dict:
    pods = read_pods(pods_csv)
    capacity = sum(len(n.gpus) for n in read_nodes(nodes_csv, scale))
    workload = None
    if policy == "fgd":
        workload = Workload((p.request for p in pods), window=len(pods), extensions=not paper_fgd)
    # One cache for all seeds, as one long-running allocator process would have (same nodes, same
    # workload); "placements_per_s_first_seed" is the rate with cold caches.
    cache = PlacementCache()
    runs = [
        replay(read_nodes(nodes_csv, scale), arrivals(pods, capacity, ratio, seed), policy, workload, cache)
        for seed in range(first_seed, first_seed + seeds)
    ]
    alloc = statistics.mean(r.alloc_at_100 for r in runs)
    decisions = sum(r.decisions for r in runs)
    return {
        "policy": policy + (" (paper's measure)" if paper_fgd and policy == "fgd" else ""),
        "seeds": seeds,
        "gpu_alloc_pct_at_100": round(100 * alloc, 2),
        "unallocated_gpus_at_100": round((1 - alloc) * capacity, 1),
        "placements_per_s": round(decisions / sum(r.seconds for r in runs), 1),
        "cpu_us_per_placement": round(1e6 * sum(r.cpu_seconds for r in runs) / decisions, 1),
        "placements_per_s_first_seed": round(runs[0].decisions / runs[0].seconds, 1),
        "gpu_alloc_pct_at_end": round(100 * statistics.mean(r.alloc_at_end for r in runs), 2),
        "capacity_gpus": capacity,
        "scale": scale,
        # Peak resident memory of the process so far (Linux reports KiB): nodes, caches and all seeds.
        "max_rss_mib": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
        "decisions": decisions,
        "unallocated_lower_bound_at_100": round(statistics.mean(r.bound_at_100 for r in runs), 1),
        "per_seed_unallocated_at_100": [round((1 - r.alloc_at_100) * capacity, 1) for r in runs],
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--nodes", type=Path, required=True, help="node list CSV (sn,cpu_milli,memory_mib,gpu,model)"
    )
    parser.add_argument(
        "--pods", type=Path, required=True, help="pod list CSV (name,cpu_milli,memory_mib,num_gpu,...)"
    )
    parser.add_argument("--policy", choices=[*POLICIES, "all"], default="fgd")
    parser.add_argument("--seeds", type=int, default=10)
    parser.add_argument("--first-seed", type=int, default=42, help="seeds are first-seed, first-seed+1, ...")
    parser.add_argument("--ratio", type=float, default=1.3, help="arrived GPU demand to replay, x capacity")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument(
        "--paper-fgd",
        action="store_true",
        help="fgd with the paper's fragmentation measure alone (no NVKE additions)",
    )
    parser.add_argument(
        "--scale", type=int, default=1, help="repeat the node list this many times (a fleet N x larger)"
    )
    args = parser.parse_args(argv)
    policies = POLICIES if args.policy == "all" else (args.policy,)
    try:
        results = [
            bench(
                args.nodes, args.pods, p, args.seeds, args.first_seed, args.ratio, args.paper_fgd, args.scale
            )
            for p in policies
        ]
    except traces.TraceError as error:
        print(f"allocator: {error}", file=sys.stderr)
        return 2
    if args.json:
        if len(results) == 1:
            print(json.dumps(results[0]))
        else:
            print(json.dumps({"policy": "all", "seeds": args.seeds, "results": results}))
        return 0
    print(f"{'policy':<10} {'GPU alloc % @100%':>18} {'unallocated GPUs':>17} {'placements/s':>13}", end="")
    print(f"  (mean of {args.seeds} seeds)")
    for r in results:
        print(
            f"{r['policy']:<10} {r['gpu_alloc_pct_at_100']:>18.2f} {r['unallocated_gpus_at_100']:>17.1f} "
            f"{r['placements_per_s']:>13.0f}"
        )
    print(
        f"no policy can leave fewer than {results[0]['unallocated_lower_bound_at_100']:.1f} GPUs unallocated"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
