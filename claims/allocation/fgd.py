"""Fragmentation Gradient Descent (Weng et al., "Beware of Fragmentation: Scheduling GPU-Sharing Workloads
with Fragmentation Gradient Descent", USENIX ATC '23).

The fragmentation of a node, measured against a workload of claim shapes m with frequencies p_m, is the
expected amount of free GPU that the next claim could not use:

    F_n = sum_m p_m * F_n(m)
    F_n(m) = all free GPU of n                   if m cannot be placed on n at all
                                                  (model, mode, CPU, host memory, too few GPUs fit)
           = free GPU of the GPUs that cannot     otherwise
             take m's per-GPU part

(free GPU in milli-GPUs). FGD places a claim where F grows least (the "gradient"). This follows the
paper's simulator (hkust-adsl/kubernetes-scheduler-simulator, `NodeGpuShareFragAmountScore`), extended
to whole-GPU, MIG and memory-sized fractions through the same per-GPU "can it take m" test. Claims
without GPUs are left out of the workload: each one counts all free GPU as fragment on every node, the
same for every candidate placement of a given claim, so it cannot change a decision.

NVKE's additions (bench/README.md has what each saved on the trace and its workload families):

1. F_n looks one claim ahead, so a node with 3 free GPUs and CPU for only one more typical claim looks
   healthy. We add the GPU that the node's free CPU and host memory cannot feed at the workload's
   average CPU (memory) per GPU. Where the workload asks more CPU per GPU than the fleet has, CPU binds
   fleet-wide and the CPU of the workload's CPU-only claims counts in that average too (wherever those
   claims land, the CPU they take is gone for the GPUs):

       S_n = max(0, free GPU - min(free CPU / CPU per GPU, free memory / memory per GPU))

2. Claims that may run only on some GPU models (`allowed_models`, or a size that fits whole only on
   nodes of some models) reserve a share of those models. `reserved[model]` is that share of the
   workload's GPU demand; Fleet.place charges a claim taking GPU from a model the part of it those
   claims would need if the fleet's free capacity filled with the workload (fleet.py, `_reserve_cost`).
   It depends on the fleet's free capacity per model, so it is added when nodes of different models are
   compared, not memoised per node state.

3. The paper measures against the typical shapes (the most frequent ones covering 95% of the claims).
   That leaves out rare shapes that ask many GPUs (12 of the default list's 13 multi-GPU shapes: 0.7%
   of its claims, 4.9% of the GPUs asked), which are stranded when other claims break into the nodes
   that fit them. Where CPU does not bind fleet-wide we measure against every multi-GPU shape recorded
   too (default list 263.15 -> 260.3 unallocated GPUs; every shape recorded: 259.5 for 43% more
   instructions per decision). Where CPU binds, the typical shapes alone: there the large shapes mostly
   cannot be fed anyway, and measuring against every shape left cpu300 828.7 instead of 762.3."""

from __future__ import annotations

import bisect
import functools
import itertools
import math
from collections import Counter, deque
from collections.abc import Iterable
from dataclasses import dataclass

from claims.allocation.keys import PCIE, InternedGpu, InternedNode, StaticInfo, gpu_id
from claims.allocation.state import (
    CPU_ONLY,
    FRACTION,
    MIG_SLICE,
    MODES_FOR_KIND,
    WHOLE,
    Request,
    isolation_allowed,
    mig_start_fits,
)

_versions = itertools.count(1)


@dataclass(frozen=True)
class Distribution:
    """A frozen snapshot of the workload: GPU claim shapes and their frequencies (summing to 1)."""

    shapes: tuple[Request, ...]
    weights: tuple[float, ...]
    version: int
    extensions: bool = True  # NVKE's additions to the paper's measure (S_n, the model reserve)
    cpu_only_cpu: float = 0.0  # CPU the workload's CPU-only claims take, per GPU claim
    # The typical GPU shapes and every multi-GPU shape recorded, with frequencies summing to 1 (empty:
    # no multi-GPU shape outside the typical ones): what FragModel measures against where CPU does not
    # bind (addition 3).
    extended_shapes: tuple[Request, ...] = ()
    extended_weights: tuple[float, ...] = ()

    @functools.cached_property
    def cpu_per_gpu(self) -> float:
        """Milli-CPU the claims ask per milli-GPU, CPU-only claims included (inf without GPU claims)."""
        gpu = sum(p * s.gpu_demand * 1000 for s, p in zip(self.shapes, self.weights, strict=True))
        cpu = sum(p * s.cpu_milli for s, p in zip(self.shapes, self.weights, strict=True)) + self.cpu_only_cpu
        return cpu / gpu if gpu else math.inf


class Workload:
    """Claim shapes seen recently, with counts: the target workload FGD measures fragmentation against.

    Keeps the last `window` claims. The distribution is the most frequent shapes covering `coverage`
    of them (the simulator's "typical pods", 95%), renormalised. It is rebuilt at most every
    `refresh_every` recorded claims, because the allocator caches fragmentation per distribution. The
    distribution also keeps every multi-GPU shape recorded (`extended_shapes`, addition 3 in the module's
    docstring).
    `extensions=False` gives the paper's measure alone (for comparison)."""

    def __init__(
        self,
        requests: Iterable[Request] = (),
        *,
        window: int = 10_000,
        coverage: float = 0.95,
        refresh_every: int = 500,
        extensions: bool = True,
    ) -> None:
        self._extensions = extensions
        self._recent: deque[Request] = deque(maxlen=window)
        self._counts: Counter[Request] = Counter()
        self._coverage = coverage
        self._refresh_every = refresh_every
        self._since_refresh = 0
        self._distribution: Distribution | None = None
        for request in requests:
            self.record(request)

    def record(self, request: Request) -> None:
        if len(self._recent) == self._recent.maxlen:
            old = self._recent[0]
            self._counts[old] -= 1
            if not self._counts[old]:
                del self._counts[old]
        self._recent.append(request)
        self._counts[request] += 1
        self._since_refresh += 1

    def distribution(self) -> Distribution:
        if self._distribution is None or self._since_refresh >= self._refresh_every:
            self._distribution = distribution_of(self._counts, self._coverage, self._extensions)
            self._since_refresh = 0
        return self._distribution


def distribution_of(
    counts: Counter[Request], coverage: float = 0.95, extensions: bool = True
) -> Distribution:
    """The most frequent shapes that cover `coverage` of all claims, GPU shapes only, normalised."""
    total = sum(counts.values())
    typical: list[tuple[Request, int]] = []
    covered = 0
    # Most frequent first; ties in a stable order so that runs repeat.
    for shape, n in sorted(counts.items(), key=lambda item: (-item[1], repr(item[0]))):
        if total and covered >= coverage * total:
            break
        typical.append((shape, n))
        covered += n
    gpu_shapes = [(shape, n) for shape, n in typical if shape.kind != CPU_ONLY]
    weight = sum(n for _, n in gpu_shapes) or 1
    chosen = {shape for shape, _ in gpu_shapes}
    extended = sorted(
        (
            (shape, n)
            for shape, n in counts.items()
            if n and shape.kind != CPU_ONLY and (shape in chosen or shape.gpus > 1)
        ),
        key=lambda item: (-item[1], repr(item[0])),
    )
    extended_weight = sum(n for _, n in extended) or 1
    more = len(extended) > len(gpu_shapes)
    return Distribution(
        tuple(shape for shape, _ in gpu_shapes),
        tuple(n / weight for _, n in gpu_shapes),
        next(_versions),
        extensions,
        sum(n * shape.cpu_milli for shape, n in typical if shape.kind == CPU_ONLY) / weight,
        tuple(shape for shape, _ in extended) if more else (),
        tuple(n / extended_weight for _, n in extended) if more else (),
    )


def solo(request: Request) -> Distribution:
    """The distribution of one shape: FGD's fallback when the caller has no workload."""
    shapes = (request,) if request.kind != CPU_ONLY else ()
    return Distribution(shapes, (1.0,) * len(shapes), next(_versions))


class FragModel:
    """Fragmentation of interned node states against one distribution, memoised per state.
    `cpu_bound`: the fleet has less CPU per GPU than the workload asks (Distribution.cpu_per_gpu).
    `node_types`: the fleet's (static part, GPU count) pairs, for the models a shape fits at all."""

    def __init__(
        self,
        distribution: Distribution,
        cpu_bound: bool = False,
        node_types: frozenset[tuple[StaticInfo, int]] = frozenset(),
    ) -> None:
        self.distribution = distribution
        # Addition 3: the multi-GPU shapes too where CPU does not bind, the typical ones where it does.
        if distribution.extensions and not cpu_bound and distribution.extended_shapes:
            shapes, weights = distribution.extended_shapes, distribution.extended_weights
        else:
            shapes, weights = distribution.shapes, distribution.weights
        self._shapes = shapes
        pairs = list(zip(shapes, weights, strict=True))
        self._params = [
            (p, s.cpu_milli, s.host_memory_mib, s.gpus, s.kind == WHOLE and s.nvlink_required)
            for s, p in pairs
        ]
        # Workload's host resources per milli-GPU, for the stranding term S_n. CPU-only claims' CPU counts
        # only where the fleet is `cpu_bound`: otherwise there is CPU to spare for them, and counting it
        # anyway strands GPUs that would have been fed (bench/README.md: +17% on multigpu20).
        gpu = sum(p * s.gpu_demand * 1000 for s, p in pairs)
        cpu = sum(p * s.cpu_milli for s, p in pairs) + (distribution.cpu_only_cpu if cpu_bound else 0.0)
        memory = sum(p * s.host_memory_mib for s, p in pairs)
        self._cpu_per_gpu = cpu / gpu if gpu and distribution.extensions else 0.0
        self._memory_per_gpu = memory / gpu if gpu and distribution.extensions else 0.0
        # The paper's part of F depends on free CPU and memory only through which shapes they admit:
        # memoise it per (static, CPU level, memory level, GPU states) to share it between states.
        self._cpu_levels = sorted({s.cpu_milli for s in shapes})
        self._memory_levels = sorted({s.host_memory_mib for s in shapes})
        self._shape_frag: dict[tuple, float] = {}
        self._frag: dict[int, float] = {}
        self._gpu_vectors: dict[tuple[int, int], tuple[tuple[int, ...], tuple[int, ...]]] = {}
        self._static_ok: dict[int, tuple[bool, ...]] = {}
        # Per GPU model, the share of the workload's GPU demand that may run only there (Fleet.place).
        self.reserved = reserved_shares(pairs, node_types) if distribution.extensions else {}

    def frag(self, node: InternedNode) -> float:
        value = self._frag.get(node.id)
        if value is None:
            value = self._frag[node.id] = self.frag_of(
                node.static, node.cpu_free, node.memory_free, node.gpus, node.total_free
            )
        return value

    def frag_of(
        self, static: StaticInfo, cpu_free: int, memory_free: int, gpus: tuple[InternedGpu, ...], total: int
    ) -> float:
        """F + S of a node state given by its parts (`gpus` in canonical order, `total` their free share):
        scoring a candidate placement needs the state it leads to, and interning each one cost more."""
        key = (
            static.id,
            bisect.bisect_right(self._cpu_levels, cpu_free),
            bisect.bisect_right(self._memory_levels, memory_free),
            tuple(map(gpu_id, gpus)),
        )
        shape_frag = self._shape_frag.get(key)
        if shape_frag is None:
            shape_frag = self._shape_frag[key] = self._compute(static, cpu_free, memory_free, gpus, total)
        return shape_frag + self._stranded(total, cpu_free, memory_free)

    def _compute(
        self, static: StaticInfo, cpu_free: int, memory_free: int, gpus: tuple[InternedGpu, ...], total: int
    ) -> float:
        if not total or not self._shapes:
            return 0.0
        # Per shape: how many GPUs can take it, and how much free GPU sits on those that cannot. Equal
        # GPU states are next to each other in canonical order.
        vectors = [self._vectors(g, len(list(same))) for g, same in itertools.groupby(gpus)]
        if len(vectors) == 1:
            ok_counts, stranded = vectors[0]
        else:
            ok_counts = tuple(map(sum, zip(*(v[0] for v in vectors), strict=True)))
            stranded = tuple(map(sum, zip(*(v[1] for v in vectors), strict=True)))
        frag = 0.0
        for j, ((p, cpu, memory, count, nvlink), static_ok, ok, lost) in enumerate(
            zip(self._params, self._static(static), ok_counts, stranded, strict=True)
        ):
            if (
                static_ok
                and cpu <= cpu_free
                and memory <= memory_free
                and ok >= count
                and (not nvlink or self._nvlink_ok(gpus, j, count))
            ):
                frag += p * lost
            else:
                frag += p * total
        return frag

    def _stranded(self, total: int, cpu_free: int, memory_free: int) -> float:
        """S_n; 0 when the distribution asks for the paper's measure alone (no per-GPU ratios)."""
        fed = float(total)
        if self._cpu_per_gpu:
            fed = min(fed, cpu_free / self._cpu_per_gpu)
        if self._memory_per_gpu:
            fed = min(fed, memory_free / self._memory_per_gpu)
        return total - fed

    def _nvlink_ok(self, gpus: tuple[InternedGpu, ...], j: int, count: int) -> bool:
        per_domain = Counter(g.link for g in gpus if g.link != PCIE and self._vectors(g, 1)[0][j])
        return any(n >= count for n in per_domain.values())

    def _static(self, static: StaticInfo) -> tuple[bool, ...]:
        vector = self._static_ok.get(static.id)
        if vector is None:
            names = {p.name for p in static.profiles}
            vector = self._static_ok[static.id] = tuple(static_admits(static, names, s) for s in self._shapes)
        return vector

    def _vectors(self, gpu: InternedGpu, count: int) -> tuple[tuple[int, ...], tuple[int, ...]]:
        """For `count` GPUs in this state, per shape j: how many can take j's per-GPU part, and their
        free share where they cannot."""
        vectors = self._gpu_vectors.get((gpu.id, count))
        if vectors is None:
            ok = tuple(count * gpu_takes(gpu, s) for s in self._shapes)
            vectors = self._gpu_vectors[gpu.id, count] = (ok, tuple(0 if k else count * gpu.free for k in ok))
        return vectors


def static_admits(static: StaticInfo, profile_names: set[str], shape: Request) -> bool:
    """Can a node of this static part ever take `shape` (model, mode, MIG profile; not its size)?"""
    return (
        static.schedulable
        and not static.preflight_failure
        and (not shape.allowed_models or static.gpu_model in shape.allowed_models)
        and static.mode in MODES_FOR_KIND[shape.kind]
        and isolation_allowed(shape, static.mode)
        and (shape.kind != MIG_SLICE or shape.mig_profile in profile_names)
    )


def reserved_shares(
    pairs: list[tuple[Request, float]], node_types: frozenset[tuple[StaticInfo, int]] = frozenset()
) -> dict[str, float]:
    """Per GPU model: the share of the workload's GPU demand that may run only on it (a claim allowed
    k models counts 1/k on each). A shape that fits whole only on nodes of some models (`node_types`:
    too many GPUs, CPU or memory for the others, e.g. 8 GPUs and 120 cores) is as bound to them as one
    that names them: other claims filling those nodes strand it (bench/README.md, multigpu)."""
    total = sum(p * s.gpu_demand for s, p in pairs)
    everywhere = {static.gpu_model for static, _ in node_types}
    reserved: Counter[str] = Counter()
    for s, p in pairs if total else ():
        models = s.allowed_models
        if not models and node_types:
            fits = {
                static.gpu_model
                for static, count in node_types
                if count >= s.gpus
                and static.cpu_total >= s.cpu_milli
                and static.memory_total >= s.host_memory_mib
                and static_admits(static, {p.name for p in static.profiles}, s)
            }
            models = tuple(fits) if fits != everywhere else ()
        for model in models:
            reserved[model] += p * s.gpu_demand / len(models) / total
    return dict(reserved)


def gpu_takes(gpu: InternedGpu, shape: Request) -> bool:
    """Can this GPU hold the per-GPU part of `shape` (ignoring the node's other resources)?"""
    if shape.kind == WHOLE:
        return gpu.idle
    if not gpu.healthy or gpu.exclusive:
        return False
    if shape.kind == FRACTION:
        return not gpu.profiles and gpu.takes_fraction(
            shape.memory_mib, gpu.guarantee(shape), shape.compute_milli
        )
    profiles = list(gpu.profiles)
    profile = next((p for p in profiles if p.name == shape.mig_profile), None)
    return profile is not None and any(
        mig_start_fits(gpu.mig, profile, s, profiles) for s in profile.placements
    )
