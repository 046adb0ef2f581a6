"""Plain inventory and claim structures of the GPU-sharing allocator, and the mutations on them.

Pure: no Django. A service loads nodes and GPUs from the database into `NodeState`/`GpuState`, asks
`place()` (fleet.py) where a `Request` goes, and records the `Placement`; `apply`/`release` keep the
in-memory state in step so that a caller can place a sequence of claims."""

from __future__ import annotations

from collections.abc import Hashable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import NamedTuple

from catalog.mig import Profile, gpu_geometry

# Sharing modes of a node pool (nodepools.models.SharingMode).
EXCLUSIVE = "exclusive"
TIME_SLICING = "time-slicing"
MPS = "mps"
FRACTIONAL = "fractional"
MIG = "mig"
SHARING_MODES = (EXCLUSIVE, TIME_SLICING, MPS, FRACTIONAL, MIG)

# Claim kinds. "cpu" is a claim without GPUs (the trace's CPU-only pods); the API only creates the others.
WHOLE = "whole"
FRACTION = "fraction"
MIG_SLICE = "mig"
CPU_ONLY = "cpu"
KINDS = (WHOLE, FRACTION, MIG_SLICE, CPU_ONLY)

# Modes each kind may land on. Whole GPUs also go to idle GPUs of time-slicing/MPS/fractional nodes
# (the GPU is then held exclusively, so no one shares it); a MIG-mode GPU is never handed out whole.
MODES_FOR_KIND = {
    WHOLE: frozenset({EXCLUSIVE, TIME_SLICING, MPS, FRACTIONAL}),
    FRACTION: frozenset({TIME_SLICING, MPS, FRACTIONAL}),
    MIG_SLICE: frozenset({MIG}),
    CPU_ONLY: frozenset(SHARING_MODES),
}

# Isolation of a fraction by the node's sharing mode.
FRACTION_ISOLATION = {MPS: "memory-capped", TIME_SLICING: "none", FRACTIONAL: "none"}
# Isolation levels, weakest first: what a claim may ask for at least (`Request.min_isolation`).
ISOLATION_LEVELS = ("none", "memory-capped", "hard", "exclusive")
ISOLATION_RANK = {level: rank for rank, level in enumerate(ISOLATION_LEVELS)}


def isolation_on(kind: str, mode: str) -> str:
    """The isolation a claim of `kind` gets on a node of sharing `mode` (the mode fits the kind)."""
    if kind == WHOLE:
        return "exclusive"
    if kind == MIG_SLICE:
        return "hard"
    return FRACTION_ISOLATION.get(mode, "none")


def isolation_allowed(request: Request, mode: str) -> bool:
    """Whether a node of sharing `mode` gives the claim at least the isolation it asks for."""
    return ISOLATION_RANK[isolation_on(request.kind, mode)] >= ISOLATION_RANK[request.min_isolation]


MILLI = 1000  # compute share of one whole GPU

# Compute requests and limits, like Kubernetes CPU. A fraction's `compute_milli` is its ceiling (the
# limit: MPS's active-thread percentage, time-slicing's share of slices); its guaranteed share (the
# request) is what it may always have. Guaranteed shares on one GPU add up to at most MILLI; ceilings up
# to the node's `ceiling_budget` (its pool's oversubscription policy). Memory is never oversubscribed.


class MigSlice(NamedTuple):
    """A MIG GPU instance in use: `size` memory slots from `start`, created from `profile`."""

    start: int
    size: int
    profile: str


@dataclass
class GpuState:
    """One GPU and what is on it. `memory_used_mib`/`compute_used` add up every share on the GPU: a
    fraction's (its guaranteed compute), a MIG slice's (its memory and compute-slice share, besides its
    span in `mig_used`), or all of it for a whole-GPU claim (`exclusive`). `ceiling_used` adds up the
    fractions' ceilings (all of the node's budget for a whole-GPU claim)."""

    index: int
    memory_mib: int  # total; 0 = unknown (then only claims without a memory figure fit)
    memory_used_mib: int = 0
    compute_used: int = 0  # guaranteed, milli, 0..1000
    ceiling_used: int = 0  # milli, 0..the node's ceiling_budget
    nvlink_domain: str = ""  # GPUs with the same non-empty value are NVLink-connected
    healthy: bool = True
    exclusive: bool = False  # held whole by one claim
    mig_used: list[MigSlice] = field(default_factory=list)  # MIG pools only: (start, size, profile)

    def __post_init__(self) -> None:
        self.mig_used = [MigSlice(*s) for s in self.mig_used]

    def idle(self) -> bool:
        """Nothing on it and usable: the only kind of GPU a whole-GPU claim takes."""
        return (
            self.healthy
            and not self.exclusive
            and self.memory_used_mib == 0
            and self.compute_used == 0
            and self.ceiling_used == 0
            and not self.mig_used
        )


@dataclass
class NodeState:
    id: Hashable
    gpu_model: str
    sharing_mode: str
    gpus: list[GpuState]
    cpu_milli_total: int
    memory_mib_total: int
    cpu_milli_used: int = 0
    memory_mib_used: int = 0
    schedulable: bool = True
    mig_profiles: list[Profile] = field(default_factory=list)  # MIG pools: what the GPUs can be cut into
    preflight_failure: str = ""  # why the node is unfit for its pool's sharing mode (nvke.agent.preflight)
    ceiling_budget: int = MILLI  # how far the fractions' ceilings on one GPU may add up, milli
    default_guarantee: int | None = None  # guaranteed share of a fraction that names none; None = its ceiling

    def __post_init__(self) -> None:
        if self.sharing_mode not in SHARING_MODES:
            raise ValueError(f"unknown sharing mode {self.sharing_mode!r}")
        if self.sharing_mode == MIG and not self.mig_profiles:
            raise ValueError("a MIG node needs its mig_profiles")
        if self.ceiling_budget < MILLI:
            raise ValueError("the ceiling budget is at least one whole GPU")

    def profile(self, name: str) -> Profile | None:
        return next((p for p in self.mig_profiles if p.name == name), None)

    def guarantee(self, request: Request) -> int:
        """The guaranteed share `request` gets here (milli): its own, else this node's default."""
        return guarantee_of(request, self.default_guarantee)


def guarantee_of(request: Request, default_guarantee: int | None) -> int:
    """A fraction's guaranteed share: its own when it names one, else the pool's default (never above its
    ceiling), else its ceiling."""
    if request.guaranteed_milli is not None:
        return request.guaranteed_milli
    if default_guarantee is None:
        return request.compute_milli
    return min(request.compute_milli, default_guarantee)


@dataclass(frozen=True)
class Request:
    """A claim's shape. Frozen and hashable: the workload model counts shapes.

    kind "whole": `gpus` idle GPUs on one node (NVLink-connected when `nvlink_required`);
    kind "mig": one slice of profile `mig_profile`; kind "fraction": `memory_mib` and/or a compute
    ceiling `compute_milli` of ONE GPU, with `guaranteed_milli` of it guaranteed (None: the node's
    pool decides); kind "cpu": host resources only."""

    kind: str
    gpus: int = 1
    nvlink_required: bool = False
    mig_profile: str = ""
    memory_mib: int = 0  # fraction: GPU memory on the one GPU
    compute_milli: int = 0  # fraction: compute ceiling, 1..1000
    guaranteed_milli: int | None = None  # fraction: guaranteed share, 0..compute_milli
    cpu_milli: int = 0
    host_memory_mib: int = 0
    allowed_models: frozenset[str] = frozenset()  # empty = any
    min_isolation: str = "none"  # the least isolation it may be placed with (ISOLATION_LEVELS)

    def __post_init__(self) -> None:
        object.__setattr__(self, "allowed_models", frozenset(self.allowed_models))
        if self.kind not in KINDS:
            raise ValueError(f"unknown claim kind {self.kind!r}")
        if self.min_isolation not in ISOLATION_RANK:
            raise ValueError(f"unknown isolation {self.min_isolation!r}")
        if self.cpu_milli < 0 or self.host_memory_mib < 0 or self.memory_mib < 0:
            raise ValueError("negative resources")
        if self.kind == WHOLE and not 1 <= self.gpus <= 8:
            raise ValueError("a whole-GPU claim takes 1..8 GPUs")
        if self.kind in (FRACTION, MIG_SLICE) and self.gpus != 1:
            raise ValueError(f"a {self.kind} claim takes one GPU")
        if self.kind == FRACTION and (
            not 0 <= self.compute_milli <= MILLI or (self.memory_mib == 0 and self.compute_milli == 0)
        ):
            raise ValueError("a fraction needs memory_mib and/or compute_milli in 1..1000")
        if self.guaranteed_milli is not None and (
            self.kind != FRACTION or not 0 <= self.guaranteed_milli <= self.compute_milli
        ):
            raise ValueError("a guaranteed share belongs to a fraction, within its ceiling")
        if self.kind == MIG_SLICE and not self.mig_profile:
            raise ValueError("a MIG claim names its profile")

    @property
    def gpu_demand(self) -> float:
        """GPUs this claim takes, in whole-GPU units: a fraction counts its compute share, a MIG slice
        its compute slices out of 7 (read from the `<C>g.<M>gb` name), a CPU-only claim nothing."""
        if self.kind == WHOLE:
            return float(self.gpus)
        if self.kind == FRACTION:
            return self.compute_milli / MILLI
        if self.kind == MIG_SLICE:
            slices = self.mig_profile.split("g.", 1)[0]
            return int(slices) / 7 if slices.isdigit() else 1.0
        return 0.0


@dataclass(frozen=True)
class Placement:
    """Where a claim goes. `memory_mib`/`compute_milli` (the ceiling)/`guaranteed_milli` are per chosen
    GPU (a whole GPU: all of it); `guaranteed_milli` defaults to the ceiling."""

    node_id: Hashable
    gpu_indexes: tuple[int, ...]
    memory_mib: int
    compute_milli: int
    isolation: str  # "exclusive" | "hard" (MIG) | "memory-capped" (MPS) | "none"
    request: Request
    mig_start: int | None = None
    mig_size: int = 0  # memory slots of the MIG slice
    guaranteed_milli: int = -1

    def __post_init__(self) -> None:
        if self.guaranteed_milli < 0:
            object.__setattr__(self, "guaranteed_milli", self.compute_milli)

    @property
    def mig_slice(self) -> MigSlice | None:
        if self.mig_start is None:
            return None
        return MigSlice(self.mig_start, self.mig_size, self.request.mig_profile)


@dataclass(frozen=True)
class Unplaceable:
    """No node fits. `reason` reads like Kubernetes: "0/12 nodes: 8 insufficient GPU memory, 4 GPU model
    not allowed" (each node counted once, under its first failing check). Falsy, unlike a Placement."""

    reason: str
    counts: Mapping[str, int]

    def __bool__(self) -> bool:
        return False

    def __str__(self) -> str:
        return self.reason


def unplaceable(counts: Mapping[str, int], total: int) -> Unplaceable:
    """Aggregate per-node reasons: most frequent first, then by name."""
    parts = sorted(counts.items(), key=lambda item: (-item[1], item[0]))
    text = ", ".join(f"{n} {reason}" for reason, n in parts) if parts else "no nodes"
    return Unplaceable(f"0/{total} nodes: {text}", dict(counts))


# --- checks shared by the allocator and by apply() ------------------------------------------------


def mig_start_fits(used: Iterable[MigSlice], profile: Profile, start: int, profiles: list[Profile]) -> bool:
    """Can a `profile` slice start at `start` next to the slices in `used` (§4.9 rules)?"""
    compute, slots = gpu_geometry(profiles)
    if start not in profile.placements or start + profile.memory_slices > slots:
        return False
    end = start + profile.memory_slices
    used_compute = same_profile = 0
    by_name = {p.name: p for p in profiles}
    for s in used:
        if s.start < end and start < s.start + s.size:
            return False  # overlapping memory slots
        used_compute += by_name[s.profile].compute_slices
        same_profile += s.profile == profile.name
    return used_compute + profile.compute_slices <= compute and same_profile < profile.max_instances


def fraction_fits(gpu: GpuState, node: NodeState, memory_mib: int, guaranteed: int, ceiling: int) -> bool:
    """Memory, guaranteed compute and ceiling all fit `gpu` of `node`."""
    return (
        gpu.healthy
        and not gpu.exclusive
        and not gpu.mig_used
        and gpu.memory_used_mib + memory_mib <= gpu.memory_mib
        and gpu.compute_used + guaranteed <= MILLI
        and gpu.ceiling_used + ceiling <= node.ceiling_budget
    )


# --- mutations ---------------------------------------------------------------------------------------


def find_node(nodes: Iterable[NodeState] | Mapping[Hashable, NodeState], node_id: Hashable) -> NodeState:
    if isinstance(nodes, Mapping):
        return nodes[node_id]
    for node in nodes:
        if node.id == node_id:
            return node
    raise KeyError(node_id)


def apply_to_node(placement: Placement, node: NodeState) -> None:
    """Take the placement's resources on `node`; ValueError (and no change) when they are not free."""
    request = placement.request
    if node.id != placement.node_id:
        raise ValueError("placement is for another node")
    if node.cpu_milli_used + request.cpu_milli > node.cpu_milli_total:
        raise ValueError("insufficient CPU")
    if node.memory_mib_used + request.host_memory_mib > node.memory_mib_total:
        raise ValueError("insufficient host memory")
    gpus = [node.gpus[i] for i in placement.gpu_indexes]
    if len(set(placement.gpu_indexes)) != len(gpus):
        raise ValueError("a GPU is listed twice")
    if request.kind == WHOLE:
        if len(gpus) != request.gpus or not all(g.idle() for g in gpus):
            raise ValueError("whole GPUs must be idle")
        for g in gpus:  # all of it, so nothing else fits next to the claim
            g.exclusive = True
            g.memory_used_mib = g.memory_mib
            g.compute_used = MILLI
            g.ceiling_used = node.ceiling_budget
    elif request.kind == FRACTION:
        p = placement
        if len(gpus) != 1 or not fraction_fits(
            gpus[0], node, p.memory_mib, p.guaranteed_milli, p.compute_milli
        ):
            raise ValueError("the fraction does not fit the GPU")
        gpus[0].memory_used_mib += p.memory_mib
        gpus[0].compute_used += p.guaranteed_milli
        gpus[0].ceiling_used += p.compute_milli
    elif request.kind == MIG_SLICE:
        profile = node.profile(request.mig_profile)
        mig = placement.mig_slice
        if len(gpus) != 1 or profile is None or mig is None or not gpus[0].healthy:
            raise ValueError("not a MIG placement for this node")
        if not mig_start_fits(gpus[0].mig_used, profile, mig.start, node.mig_profiles):
            raise ValueError("the MIG slice does not fit the GPU")
        gpus[0].mig_used.append(mig)
        # The slice's memory and compute count as used too, like any share of the GPU.
        gpus[0].memory_used_mib += placement.memory_mib
        gpus[0].compute_used += placement.compute_milli
    node.cpu_milli_used += request.cpu_milli
    node.memory_mib_used += request.host_memory_mib


def release_from_node(placement: Placement, node: NodeState) -> None:
    """Give back what `apply_to_node` took; exactly inverse when applied right after it."""
    request = placement.request
    gpus = [node.gpus[i] for i in placement.gpu_indexes]
    held = {
        WHOLE: lambda g: g.exclusive,
        MIG_SLICE: lambda g: placement.mig_slice in g.mig_used,
        FRACTION: lambda g: (
            g.memory_used_mib >= placement.memory_mib
            and g.compute_used >= placement.guaranteed_milli
            and g.ceiling_used >= placement.compute_milli
        ),
        CPU_ONLY: lambda g: False,
    }[request.kind]
    if node.id != placement.node_id or not all(held(g) for g in gpus):
        raise ValueError("the node does not hold this placement")
    for gpu in gpus:
        if request.kind == MIG_SLICE:
            gpu.mig_used.remove(placement.mig_slice)  # type: ignore[arg-type]
            gpu.memory_used_mib -= placement.memory_mib
            gpu.compute_used -= placement.compute_milli
        elif request.kind == WHOLE:
            gpu.exclusive, gpu.memory_used_mib, gpu.compute_used, gpu.ceiling_used = False, 0, 0, 0
        else:
            gpu.memory_used_mib -= placement.memory_mib
            gpu.compute_used -= placement.guaranteed_milli
            gpu.ceiling_used -= placement.compute_milli
    node.cpu_milli_used -= request.cpu_milli
    node.memory_mib_used -= request.host_memory_mib


def apply(placement: Placement, nodes: Iterable[NodeState] | Mapping[Hashable, NodeState]) -> None:
    """Record `placement` in the node states (raises ValueError when it does not fit any more)."""
    apply_to_node(placement, find_node(nodes, placement.node_id))


def release(placement: Placement, nodes: Iterable[NodeState] | Mapping[Hashable, NodeState]) -> None:
    """Undo `apply(placement, nodes)`."""
    release_from_node(placement, find_node(nodes, placement.node_id))


def invariant_violations(nodes: Iterable[NodeState]) -> list[str]:
    """What is over-committed or inconsistent; empty when the state is sound (tests and defrag use it)."""
    problems = []
    for node in nodes:
        if not 0 <= node.cpu_milli_used <= node.cpu_milli_total:
            problems.append(f"{node.id}: CPU {node.cpu_milli_used}/{node.cpu_milli_total}")
        if not 0 <= node.memory_mib_used <= node.memory_mib_total:
            problems.append(f"{node.id}: host memory {node.memory_mib_used}/{node.memory_mib_total}")
        for g in node.gpus:
            where = f"{node.id}/gpu{g.index}"
            if not 0 <= g.memory_used_mib <= g.memory_mib:
                problems.append(f"{where}: memory {g.memory_used_mib}/{g.memory_mib}")
            if not 0 <= g.compute_used <= MILLI:
                problems.append(f"{where}: compute {g.compute_used}")
            if not 0 <= g.ceiling_used <= node.ceiling_budget:
                problems.append(f"{where}: ceilings {g.ceiling_used}/{node.ceiling_budget}")
            if g.exclusive and (
                g.mig_used
                or g.compute_used != MILLI
                or g.memory_used_mib != g.memory_mib
                or g.ceiling_used != node.ceiling_budget
            ):
                problems.append(f"{where}: a whole-GPU claim shares its GPU")
            if g.mig_used:
                for k, s in enumerate(g.mig_used):
                    profile = node.profile(s.profile)
                    if profile is None or profile.memory_slices != s.size:
                        problems.append(f"{where}: unknown MIG slice {s}")
                    elif not mig_start_fits(g.mig_used[:k], profile, s.start, node.mig_profiles):
                        problems.append(f"{where}: MIG slice {s} overlaps or breaks a MIG rule")
    return problems
