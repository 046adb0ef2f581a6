"""Where a claim goes: feasibility, placement policies, and the per-state cache that keeps them fast.

`place(request, nodes, policy, workload)` is the one-shot entry point (the service loads inventory and
calls it). `Fleet` keeps an index of the nodes by interned state (keys.py) so a sequence of placements
(the benchmark, the retry queue, the defragmenter) evaluates each distinct node state once per claim
shape instead of every node: nodes in the same state get the same answer.

Policies (all prefer an NVLink-connected set for multi-GPU claims, even when not required):
- "fgd" (default): least growth of expected fragmentation against the workload (fgd.py), plus what
  taking GPU from a model costs the claims that may run only there; ties (equal states, or claims that
  strand nothing either way) go to the best-fit node, then the tightest GPU;
- "binpack": most-allocated node first, then the fullest GPU that fits;
- "spread": least-allocated node first, then the emptiest GPU;
- "best-fit": the node left with the least free CPU + GPU after placement (the paper's baseline:
  0.5 * CPU left / 128 cores + 0.5 * GPU left / 8 GPUs), then the fullest GPU.
"""

from __future__ import annotations

import copy
import dataclasses
import heapq
from collections import Counter
from collections.abc import Hashable, Iterable

from catalog.mig import gpu_geometry
from claims.allocation import fgd
from claims.allocation.keys import PCIE, InternedNode, Interner, StaticInfo, gpu_id
from claims.allocation.state import (
    CPU_ONLY,
    EXCLUSIVE,
    FRACTION,
    FRACTION_ISOLATION,
    MIG_SLICE,
    MILLI,
    MODES_FOR_KIND,
    WHOLE,
    GpuState,
    MigSlice,
    NodeState,
    Placement,
    Request,
    Unplaceable,
    apply_to_node,
    isolation_allowed,
    mig_start_fits,
    release_from_node,
    unplaceable,
)

FGD, BINPACK, SPREAD, BEST_FIT = "fgd", "binpack", "spread", "best-fit"
POLICIES = (FGD, BINPACK, SPREAD, BEST_FIT)

# Per-node reasons, in the order they are checked (a node is counted under the first that fails).
NOT_SCHEDULABLE = "node not schedulable"
FAILED_PREFLIGHT = "node failed its sharing preflight"
MODEL_NOT_ALLOWED = "GPU model not allowed"
WRONG_MODE = "wrong sharing mode"
ISOLATION_BELOW_ASKED = "isolation below the claim's"
NO_PROFILE = "MIG profile not offered"
INSUFFICIENT_CPU = "insufficient CPU"
INSUFFICIENT_HOST_MEMORY = "insufficient host memory"
GPU_UNHEALTHY = "GPU unhealthy"
NOT_ENOUGH_GPUS = "not enough free GPUs"
NO_NVLINK = "no NVLink-connected set"
INSUFFICIENT_GPU_MEMORY = "insufficient GPU memory"
INSUFFICIENT_GPU_COMPUTE = "insufficient GPU compute"
NO_MIG_PLACEMENT = "no free MIG placement"
REASONS = (
    NOT_SCHEDULABLE,
    FAILED_PREFLIGHT,
    MODEL_NOT_ALLOWED,
    WRONG_MODE,
    ISOLATION_BELOW_ASKED,
    NO_PROFILE,
    INSUFFICIENT_CPU,
    INSUFFICIENT_HOST_MEMORY,
    GPU_UNHEALTHY,
    NOT_ENOUGH_GPUS,
    NO_NVLINK,
    INSUFFICIENT_GPU_MEMORY,
    INSUFFICIENT_GPU_COMPUTE,
    NO_MIG_PLACEMENT,
)
_REASON = {reason: i for i, reason in enumerate(REASONS)}

# best-fit normalisation, as in the paper's simulator (largest node spec).
BEST_FIT_CPU_MILLI = 128_000
BEST_FIT_GPU_MILLI = 8 * MILLI


class Candidate:
    """One way to put a claim on a node state: canonical GPU positions (+ MIG start), whether they are
    NVLink-connected, and a GPU-level tie-breaker (`fit`, smaller is tighter)."""

    __slots__ = ("node", "positions", "part", "mig_start", "linked", "fit", "_interner", "_request")

    def __init__(
        self,
        interner: Interner,
        node: InternedNode,
        request: Request,
        positions: tuple[int, ...],
        part: tuple,
        linked: bool = True,
        fit: tuple = (),
        mig_start: int = -1,
    ) -> None:
        self._interner = interner
        self._request = request
        self.node = node
        self.positions = positions
        self.part = part
        self.mig_start = mig_start
        self.linked = linked
        self.fit = fit

    def frag_after(self, frag: fgd.FragModel) -> float:
        """Fragmentation of the state the placement leads to."""
        node, after = self.node, self._interner.after
        gpus = list(node.gpus)
        total = node.total_free
        for pos in self.positions:
            new = after(gpus[pos], self.part)
            total += new.free - gpus[pos].free
            gpus[pos] = new
        gpus.sort(key=gpu_id)
        r = self._request
        return frag.frag_of(
            node.static, node.cpu_free - r.cpu_milli, node.memory_free - r.host_memory_mib, tuple(gpus), total
        )

    def leftover(self) -> float:
        """best-fit's measure of what the node has left after the placement."""
        gpus = self.node.gpus
        taken = sum(gpus[p].free - self._interner.after(gpus[p], self.part).free for p in self.positions)
        return (
            0.5 * (self.node.cpu_free - self._request.cpu_milli) / BEST_FIT_CPU_MILLI
            + 0.5 * (self.node.total_free - taken) / BEST_FIT_GPU_MILLI
        )


def candidates(interner: Interner, node: InternedNode, request: Request) -> int | list[Candidate]:
    """Every distinct way `request` fits `node`, or the index in REASONS of the first check that fails."""
    static = node.static
    if not static.schedulable:
        return _REASON[NOT_SCHEDULABLE]
    if static.preflight_failure:
        return _REASON[FAILED_PREFLIGHT]
    if request.allowed_models and static.gpu_model not in request.allowed_models:
        return _REASON[MODEL_NOT_ALLOWED]
    if static.mode not in MODES_FOR_KIND[request.kind]:
        return _REASON[WRONG_MODE]
    if not isolation_allowed(request, static.mode):
        return _REASON[ISOLATION_BELOW_ASKED]
    if request.kind == MIG_SLICE and not any(p.name == request.mig_profile for p in static.profiles):
        return _REASON[NO_PROFILE]
    if request.cpu_milli > node.cpu_free:
        return _REASON[INSUFFICIENT_CPU]
    if request.host_memory_mib > node.memory_free:
        return _REASON[INSUFFICIENT_HOST_MEMORY]
    if request.kind == CPU_ONLY:
        return [Candidate(interner, node, request, (), (CPU_ONLY,))]
    if request.kind == WHOLE:
        return _whole(interner, node, request)
    result: list[Candidate] = []
    healthy = usable = with_memory = False  # which GPU check fails, for the reason
    if request.kind == FRACTION:
        for g, _, pos in node.distinct:  # equal GPU states are interchangeable: try one of each
            if not g.healthy:
                continue
            healthy = True
            if g.exclusive:
                continue
            usable = True
            if g.memory_used + request.memory_mib > g.memory:
                continue
            with_memory = True
            guaranteed = g.guarantee(request)
            if g.takes_fraction(request.memory_mib, guaranteed, request.compute_milli):
                part = (FRACTION, request.memory_mib, guaranteed, request.compute_milli)
                result.append(Candidate(interner, node, request, (pos,), part, fit=(g.free,)))
        if result:
            return result
        if not healthy:
            return _REASON[GPU_UNHEALTHY]
        if not usable:
            return _REASON[NOT_ENOUGH_GPUS]
        return _REASON[INSUFFICIENT_GPU_COMPUTE if with_memory else INSUFFICIENT_GPU_MEMORY]
    profiles = list(static.profiles)
    profile = next(p for p in profiles if p.name == request.mig_profile)
    for g, _, pos in node.distinct:
        if not g.healthy:
            continue
        healthy = True
        for start in profile.placements:
            if mig_start_fits(g.mig, profile, start, profiles):
                part = (MIG_SLICE, MigSlice(start, profile.memory_slices, profile.name))
                # Tightest GPU first; on it, the start that leaves the most other slices possible.
                fit = (g.free, -interner.after(g, part).mig_options, -start)
                result.append(Candidate(interner, node, request, (pos,), part, fit=fit, mig_start=start))
    if result:
        return result
    return _REASON[NO_MIG_PLACEMENT if healthy else GPU_UNHEALTHY]


def _whole(interner: Interner, node: InternedNode, request: Request) -> int | list[Candidate]:
    gpus, k = node.gpus, request.gpus
    if node.idle_count < k:  # (idle GPUs are healthy ones)
        if sum(g.healthy for g in gpus) < k:
            return _REASON[GPU_UNHEALTHY] if len(gpus) >= k else _REASON[NOT_ENOUGH_GPUS]
        return _REASON[NOT_ENOUGH_GPUS]
    idle = [pos for pos, g in enumerate(gpus) if g.idle]
    domains: dict[int, list[int]] = {}
    for pos in idle:
        domains.setdefault(gpus[pos].link, []).append(pos)
    # (positions, NVLink-connected, fit): the domain with the fewest idle GPUs first, to keep big
    # NVLink sets for big claims; a single GPU comes from PCIe-only GPUs first for the same reason.
    sets = [
        (tuple(members[:k]), True, (1, len(members)))
        for link, members in domains.items()
        if link != PCIE and len(members) >= k
    ]
    if request.nvlink_required:
        if not sets:
            return _REASON[NO_NVLINK]
    elif k == 1 and PCIE in domains:
        sets.append(((domains[PCIE][0],), True, (0, len(domains[PCIE]))))
    elif not sets:
        # No connected set: PCIe GPUs first, then from the smallest domains.
        order = sorted(idle, key=lambda pos: (gpus[pos].link != PCIE, len(domains[gpus[pos].link])))
        sets.append((tuple(sorted(order[:k])), False, (2, 0)))
    return [
        Candidate(interner, node, request, positions, (WHOLE,), linked, fit)
        for positions, linked, fit in sets
    ]


def _score(policy: str, node: InternedNode, c: Candidate, frag: fgd.FragModel | None, base: float) -> tuple:
    """Smaller is better. The first item puts NVLink-connected sets first. `base`: frag of `node`."""
    unlinked = not c.linked
    if policy == FGD:
        assert frag is not None
        grow = round(c.frag_after(frag) - base, 6)
        # Ties (common: equal states, or claims that strand nothing): pack, tightest GPU first.
        return (unlinked, grow, c.leftover(), c.fit)
    if policy == BINPACK:
        return (unlinked, -node.gpu_used, -node.cpu_used, c.fit)
    if policy == SPREAD:
        return (unlinked, node.gpu_used, node.cpu_used, -c.fit[0] if c.fit else 0, c.fit)
    if policy == BEST_FIT:
        return (unlinked, c.leftover(), c.fit)
    raise ValueError(f"unknown placement policy {policy!r}")


class PlacementCache:
    """Interned states, fragmentation models and claim-shape ids. Share one between fleets over the
    same kind of nodes (the benchmark does, across seeds); drop it to free memory."""

    MODELS = 8  # fragmentation models kept (one per workload distribution)

    def __init__(self) -> None:
        self.interner = Interner()
        self._request_ids: dict[tuple, int] = {}
        self._models: dict[tuple[int, bool], fgd.FragModel] = {}
        self._solo: dict[Request, fgd.Distribution] = {}

    def request_id(self, policy: str, request: Request, version: Hashable) -> int:
        key = (policy, request, version)
        rid = self._request_ids.get(key)
        if rid is None:
            rid = self._request_ids[key] = len(self._request_ids)
        return rid

    def distribution(self, request: Request, workload: fgd.Workload | None) -> fgd.Distribution:
        """The workload's distribution; without one, the claim's own shape (kept, so it is reused)."""
        if workload is not None:
            return workload.distribution()
        found = self._solo.get(request)
        if found is None:
            found = self._solo[request] = fgd.solo(request)
        return found

    def frag_model(
        self,
        distribution: fgd.Distribution,
        cpu_bound: bool = False,
        node_types: frozenset[tuple[StaticInfo, int]] = frozenset(),
    ) -> fgd.FragModel:
        key = (distribution.version, cpu_bound, node_types)
        model = self._models.get(key)
        if model is None:
            if len(self._models) >= self.MODELS:
                del self._models[next(iter(self._models))]  # the oldest
            model = self._models[key] = fgd.FragModel(distribution, cpu_bound, node_types)
        return model


class _Group:
    """Nodes in one interned state, and the cached answer for each claim shape seen."""

    __slots__ = ("info", "members", "outcomes")

    def __init__(self, info: InternedNode, outcomes: dict[int, int | tuple] | None = None) -> None:
        self.info = info
        self.members: dict[int, None] = {}  # node positions, insertion-ordered
        # request id -> reason index | (score, candidate)
        self.outcomes: dict[int, int | tuple] = {} if outcomes is None else outcomes


class _View:
    """One claim shape's heaps (one per GPU model) over the node states it fits; `seen` = births already
    evaluated."""

    __slots__ = ("heaps", "seen", "counts", "moved")

    def __init__(self) -> None:
        self.heaps: dict[str, list[tuple]] = {}  # by GPU model where FGD weighs models, else one ("")
        self.seen = 0
        self.counts: Counter[int] | None = None  # nodes per reason at the last failure
        self.moved = 0  # state changes already counted in `counts`


class Fleet:
    """Nodes plus an index by state. Mutate them through `apply`/`release` (or call `refresh` after
    changing a node by hand), otherwise the index goes stale; `lift`/`put_back` change the index alone,
    for weighing victims."""

    LIFTS_KEPT = 1 << 17  # states `lift` and `put_back` lead to, kept (some 30 MB at most)

    def __init__(self, nodes: Iterable[NodeState], cache: PlacementCache | None = None) -> None:
        self.nodes = list(nodes)
        self.cache = cache or PlacementCache()
        self._position = {node.id: i for i, node in enumerate(self.nodes)}
        if len(self._position) != len(self.nodes):
            raise ValueError("node ids must be unique")
        self._state: list[tuple[InternedNode, tuple[int, ...]]] = []
        self._groups: dict[int, _Group] = {}
        self._births: list[int] = []  # state ids, each time a state gains its first node
        # Cached answers of states that lost their last node, for when one comes back: an answer never
        # changes, and at 10x fleet a quarter of the evaluations were of reborn states (bench/README.md).
        self._dormant: dict[int, dict[int, int | tuple]] = {}
        self._views: dict[int, _View] = {}
        self._moves: list[tuple[InternedNode, InternedNode]] = []  # (old state, new state) of each change
        self._lifted: dict[int, list[Placement]] = {}  # by node position: lifted, not yet put back
        # (state, perm, placement[, put back]) -> the state lifting (putting back) leads to
        self._lifts: dict[tuple, tuple[InternedNode, tuple[int, ...]]] = {}
        self._free_by_model: Counter[str] = Counter()  # free milli-GPUs
        self._free_total = 0
        # milli-CPU per milli-GPU of the whole fleet (fgd.FragModel's `cpu_bound`)
        gpus = sum(len(node.gpus) for node in self.nodes) * MILLI
        self._cpu_per_gpu = sum(node.cpu_milli_total for node in self.nodes) / gpus if gpus else 0.0
        for i, node in enumerate(self.nodes):
            self._state.append(self.cache.interner.signature(node))
            self._join(i)
        # The node kinds at creation, for the models each claim shape fits at all (fgd.reserved_shares);
        # a frozenset hashes once, and it keys the fragmentation models.
        self._node_types = frozenset((info.static, len(info.gpus)) for info, _ in self._state)

    @property
    def distinct_states(self) -> int:
        return len(self._groups)

    @property
    def version(self) -> int:
        """Changes whenever a node's state does (a placement, a release, a refresh)."""
        return len(self._moves)

    def node(self, node_id: Hashable) -> NodeState:
        return self.nodes[self._position[node_id]]

    def place_on(self, node_id: Hashable, request: Request) -> Placement | None:
        """A placement of `request` on this one node as it stands, or None: preemption weighs its
        victims one node at a time, where only that node has changed. Does not change state."""
        position = self._position[node_id]
        found = candidates(self.cache.interner, self._state[position][0], request)
        return None if isinstance(found, int) else self._placement(position, request, found[0])

    def state_of(self, node_id: Hashable) -> int:
        """The node's interned state: nodes in one state take the same claims (gang placement counts
        what fits once per state)."""
        return self._state[self._position[node_id]][0].id

    def place(
        self, request: Request, policy: str = FGD, workload: fgd.Workload | None = None
    ) -> Placement | Unplaceable:
        """The best placement of `request` under `policy`, or why there is none. Does not change state."""
        if policy not in POLICIES:
            raise ValueError(f"unknown placement policy {policy!r}")
        frag = None
        version: tuple[int, bool] | None = None  # which fragmentation model the cached answers are for
        if policy == FGD:
            distribution = self.cache.distribution(request, workload)
            cpu_bound = distribution.cpu_per_gpu > self._cpu_per_gpu
            frag = self.cache.frag_model(distribution, cpu_bound, self._node_types)
            version = (distribution.version, cpu_bound)
        rid = self.cache.request_id(policy, request, version)
        interner = self.cache.interner
        groups = self._groups
        # Each claim shape keeps a heap of (score, birth, state) per GPU model over the states it fits.
        # Only states born since the shape was last placed need evaluating; states that died are
        # dropped lazily (a state's answer never changes, so a reborn state's old entry is still right).
        # Where the workload reserves GPU models (fgd.py), the heads of the models' heaps are compared
        # with the reserve added.
        view = self._views.get(rid)
        if view is None:
            view = self._views[rid] = _View()
        heaps = view.heaps
        by_model = frag is not None and bool(frag.reserved)  # else one heap does
        births = self._births
        cpu, memory, kind, gpus, compute = (
            request.cpu_milli,
            request.host_memory_mib,
            request.kind,
            request.gpus,
            request.compute_milli,
        )
        for birth, state in enumerate(births[view.seen :], view.seen):
            group = groups.get(state)  # most states born since the shape's last claim are gone again
            if group is None:
                continue
            info = group.info
            # Cheap necessary conditions first: most new states are too full for most claims. States
            # skipped here are evaluated only if the claim fails (for the reasons).
            if (
                info.cpu_free < cpu
                or info.memory_free < memory
                or (kind == WHOLE and info.idle_count < gpus)
                or (kind == FRACTION and info.compute_free < compute)
            ):
                continue
            outcome = group.outcomes.get(rid)
            if outcome is None:
                outcome = group.outcomes[rid] = self._evaluate(interner, info, request, policy, frag)
            if outcome.__class__ is not int:
                model = info.static.gpu_model if by_model else ""
                heap = heaps.get(model)
                if heap is None:
                    heap = heaps[model] = []
                heapq.heappush(heap, (outcome[0], birth, info.id, outcome[1]))  # type: ignore[index]
        view.seen = len(births)
        best = None
        for model, heap in heaps.items():
            while heap and heap[0][2] not in groups:
                heapq.heappop(heap)
            if len(heap) > 2 * len(groups) + 64:  # too many dead (or repeated, after a rebirth) entries
                live: dict[int, tuple] = {}
                for entry in heap:
                    if entry[2] in groups and entry[2] not in live:
                        live[entry[2]] = entry
                heap[:] = live.values()
                heapq.heapify(heap)
            if heap:
                score, birth = heap[0][0], heap[0][1]
                if by_model:
                    score = (score[0], score[1] + self._reserve_cost(frag, model, request), *score[2:])
                if best is None or (score, birth) < best[0]:
                    best = ((score, birth), heap[0])
        if best is None:
            return self._unplaceable(view, rid, request)
        _, _, state, candidate = best[1]
        position = next(iter(groups[state].members))
        return self._placement(position, request, candidate)

    def _reserve_cost(self, frag: fgd.FragModel, model: str, request: Request) -> float:
        """What taking `request`'s GPU from `model` costs the claims that may only run there: the share
        of it they will need, when the rest of the free capacity arrives as the workload."""
        reserved = frag.reserved.get(model)
        if not reserved:
            return 0.0
        free = self._free_by_model[model]
        need = reserved * self._free_total / free if free > 0 else 1.0
        return round(request.gpu_demand * MILLI * min(1.0, need), 6)

    def _unplaceable(self, view: _View, rid: int, request: Request) -> Unplaceable:
        """Per-reason node counts. Kept per claim shape and brought up to date from the log of state
        changes, so that a fleet where many claims fail does not rescan every state each time."""
        if view.counts is None:
            view.counts = Counter()
            for group in self._groups.values():
                view.counts[self._reason(group.info, rid, request)] += len(group.members)
        elif request.kind == MIG_SLICE:  # asking a state may intern GPU states (ids order the GPUs)
            for old, new in self._moves[view.moved :]:
                view.counts[self._reason(old, rid, request)] -= 1
                view.counts[self._reason(new, rid, request)] += 1
        else:
            # Only the net change per state: weighing victims takes and gives back thousands of claims
            # between two failures, and those moves cancel out; the counts add up the same.
            net: dict[InternedNode, int] = {}
            for old, new in self._moves[view.moved :]:
                net[old] = net.get(old, 0) - 1
                net[new] = net.get(new, 0) + 1
            for info, n in net.items():
                if n:
                    view.counts[self._reason(info, rid, request)] += n
        view.moved = len(self._moves)
        return unplaceable({REASONS[r]: n for r, n in view.counts.items() if n}, len(self.nodes))

    def _reason(self, info: InternedNode, rid: int, request: Request) -> int:
        """The index of why `request` does not fit `info`, or -1. Only a state that is gone can fit here
        (the claim just failed), so a fit is not scored."""
        group = self._groups.get(info.id)
        outcomes = group.outcomes if group is not None else self._dormant.setdefault(info.id, {})
        outcome = outcomes.get(rid)
        if outcome is None:
            found = candidates(self.cache.interner, info, request)
            if found.__class__ is not int:
                return -1
            outcome = outcomes[rid] = found
        return outcome if outcome.__class__ is int else -1  # type: ignore[return-value]

    @staticmethod
    def _evaluate(
        interner: Interner, info: InternedNode, request: Request, policy: str, frag: fgd.FragModel | None
    ) -> int | tuple:
        found = candidates(interner, info, request)
        if isinstance(found, int):
            return found
        base = frag.frag(info) if frag is not None else 0.0
        if len(found) == 1:
            return (_score(policy, info, found[0], frag, base), found[0])
        return min(((_score(policy, info, c, frag, base), c) for c in found), key=_first)

    def _placement(self, position: int, request: Request, c: Candidate) -> Placement:
        node = self.nodes[position]
        perm = self._state[position][1]
        indexes = tuple(sorted(perm[pos] for pos in c.positions))
        mode = node.sharing_mode
        if request.kind == WHOLE:
            gpu = node.gpus[indexes[0]]
            return Placement(node.id, indexes, gpu.memory_mib, MILLI, EXCLUSIVE, request)
        if request.kind == FRACTION:
            return Placement(
                node.id,
                indexes,
                request.memory_mib,
                request.compute_milli,
                FRACTION_ISOLATION[mode],
                request,
                guaranteed_milli=node.guarantee(request),
            )
        if request.kind == MIG_SLICE:
            profile = node.profile(request.mig_profile)
            assert profile is not None
            compute, slots = gpu_geometry(node.mig_profiles)
            gpu = node.gpus[indexes[0]]
            return Placement(
                node.id,
                indexes,
                gpu.memory_mib * profile.memory_slices // slots,
                MILLI * profile.compute_slices // compute,
                "hard",
                request,
                mig_start=c.mig_start,
                mig_size=profile.memory_slices,
            )
        return Placement(node.id, (), 0, 0, "none", request)

    def apply(self, placement: Placement) -> None:
        position = self._position[placement.node_id]
        apply_to_node(placement, self.nodes[position])
        self._reindex(position, self._advanced(position, placement))

    def _advanced(self, position: int, placement: Placement) -> tuple[InternedNode, tuple[int, ...]]:
        """The node's new interned state from its old one and what the placement took, not by reading
        the whole node again: a process applies every other process's placements too (the allocation
        log)."""
        p, request = placement, placement.request
        info, perm = self._state[position]
        positions = tuple(perm.index(index) for index in p.gpu_indexes)
        if request.kind == WHOLE:
            part: tuple = (WHOLE,)
        elif request.kind == MIG_SLICE:
            part = (MIG_SLICE, p.mig_slice, p.memory_mib, p.compute_milli)
        else:  # a fraction (a CPU-only claim takes no GPU: no positions, and the part is not read)
            part = (FRACTION, p.memory_mib, p.guaranteed_milli, p.compute_milli)
        return self.cache.interner.advance(
            info, perm, positions, part, request.cpu_milli, request.host_memory_mib
        )

    def release(self, placement: Placement) -> None:
        position = self._position[placement.node_id]
        release_from_node(placement, self.nodes[position])
        self._reindex(position)

    def lift(self, placement: Placement) -> None:
        """`release` as the index sees it, for weighing victims: the node's record (`node()`) keeps the
        placement until `put_back`, which must come before any other change to the node. The fleet
        then decides exactly as after `release` and `apply` (the same states, in the same order), but a
        node lifted from again in the same state is not read afresh: preemption lifts and puts back
        thousands of claims a decision, mostly the same ones on the same nodes as the last time."""
        position = self._position[placement.node_id]
        lifted = self._lifted.setdefault(position, [])
        key = (*self._state[position], placement)
        state = self._lifts.get(key)
        if state is None:
            # The node as `release` would leave it: a copy, with what is lifted from it released.
            node = self.nodes[position]
            touched = {i for p in (*lifted, placement) for i in p.gpu_indexes}
            scratch = copy.copy(node)
            scratch.gpus = [
                dataclasses.replace(g, mig_used=list(g.mig_used)) if i in touched else g
                for i, g in enumerate(node.gpus)
            ]
            for p in (*lifted, placement):
                release_from_node(p, scratch)
            state = self._keep(key, self.cache.interner.signature(scratch))
        lifted.append(placement)
        self._reindex(position, state)

    def put_back(self, placement: Placement) -> None:
        """Undo `lift(placement)`, as `apply` would."""
        position = self._position[placement.node_id]
        lifted = self._lifted[position]
        lifted.remove(placement)
        if not lifted:
            del self._lifted[position]
        key = (*self._state[position], placement, True)
        state = self._lifts.get(key)
        if state is None:
            state = self._keep(key, self._advanced(position, placement))
        self._reindex(position, state)

    def _keep(
        self, key: tuple, state: tuple[InternedNode, tuple[int, ...]]
    ) -> tuple[InternedNode, tuple[int, ...]]:
        """Keep where lifting or putting back leads: the answer never changes, and a state it leads to
        is interned already, so an answer kept interns nothing that the way without it would have."""
        if len(self._lifts) >= self.LIFTS_KEPT:
            self._lifts.clear()
        self._lifts[key] = state
        return state

    def refresh(self, node_id: Hashable) -> None:
        """Re-read a node changed outside `apply`/`release` (health, cordon, usage)."""
        self._reindex(self._position[node_id])

    def _reindex(self, position: int, state: tuple[InternedNode, tuple[int, ...]] | None = None) -> None:
        old = self._state[position][0].id
        group = self._groups[old]
        del group.members[position]
        if not group.members:
            del self._groups[old]
            self._dormant[old] = group.outcomes
        self._free_by_model[group.info.static.gpu_model] -= group.info.total_free
        self._free_total -= group.info.total_free
        self._state[position] = state or self.cache.interner.signature(self.nodes[position])
        self._moves.append((group.info, self._state[position][0]))
        self._join(position)

    def _join(self, position: int) -> None:
        info = self._state[position][0]
        group = self._groups.get(info.id)
        if group is None:
            group = self._groups[info.id] = _Group(info, self._dormant.pop(info.id, None))
            self._births.append(info.id)
        group.members[position] = None
        self._free_by_model[info.static.gpu_model] += info.total_free
        self._free_total += info.total_free


def _first(item: tuple) -> tuple:
    return item[0]


def place(
    request: Request,
    nodes: Iterable[NodeState],
    policy: str = FGD,
    workload: fgd.Workload | None = None,
) -> Placement | Unplaceable:
    """Where `request` goes on `nodes` under `policy` ("fgd", "binpack", "spread", "best-fit"), or an
    `Unplaceable` with per-node reasons. Pure: `nodes` are not changed (see `apply`)."""
    return Fleet(nodes).place(request, policy, workload)


def empty_fleet(node_shapes: Iterable[NodeState]) -> Fleet:
    """Empty, healthy nodes of these shapes, for `fits_ever`; build it once to ask about many requests.
    Unschedulable nodes still count: they may come back."""
    return Fleet(
        [
            NodeState(
                id=i,
                gpu_model=n.gpu_model,
                sharing_mode=n.sharing_mode,
                gpus=[GpuState(g.index, g.memory_mib, nvlink_domain=g.nvlink_domain) for g in n.gpus],
                cpu_milli_total=n.cpu_milli_total,
                memory_mib_total=n.memory_mib_total,
                mig_profiles=list(n.mig_profiles),
                ceiling_budget=n.ceiling_budget,
                default_guarantee=n.default_guarantee,
            )
            for i, n in enumerate(node_shapes)
        ]
    )


def fits_ever(request: Request, node_shapes: Iterable[NodeState] | Fleet) -> str | None:
    """Why `request` could not fit even an empty, healthy node of these shapes (the API's 400), or None.
    `node_shapes` may be their `empty_fleet` already."""
    empty = node_shapes if isinstance(node_shapes, Fleet) else empty_fleet(node_shapes)
    result = empty.place(request, BINPACK)
    return result.reason if isinstance(result, Unplaceable) else None
