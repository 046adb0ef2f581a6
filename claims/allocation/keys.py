"""Canonical, interned node states: the allocator's unit of caching.

Many nodes of a fleet are in the same state (same model, same free CPU and memory, same multiset of GPU
states). The allocator evaluates a claim once per distinct state and caches the answer, so states are
interned: equal states share one `InternedNode` with a small integer id. A node's GPUs are put in a canonical
order (sorted by interned GPU state) and `perm` maps canonical positions back to GPU indexes."""

from __future__ import annotations

import operator
from dataclasses import dataclass

from catalog.mig import Profile, gpu_geometry
from claims.allocation.state import (
    FRACTION,
    MIG_SLICE,
    MILLI,
    WHOLE,
    MigSlice,
    NodeState,
    Request,
    guarantee_of,
    mig_start_fits,
)

PCIE = -1  # link label of a GPU without NVLink


class InternedGpu:
    """One interned GPU state. `link` is the node-local NVLink domain label (PCIE when none); `budget` and
    `default_guarantee` are its node's compute-sharing policy (NodeState.ceiling_budget and
    default_guarantee), kept here so that "can this GPU take the claim" needs only the GPU."""

    __slots__ = (
        "id",
        "key",
        "healthy",
        "exclusive",
        "memory",
        "memory_used",
        "compute_used",
        "ceiling_used",
        "budget",
        "default_guarantee",
        "link",
        "mig",
        "profiles",
        "free",
        "idle",
        "mig_options",
    )

    def __init__(self, gid: int, key: tuple) -> None:
        self.id = gid
        self.key = key
        (
            self.healthy,
            self.exclusive,
            self.memory,
            self.memory_used,
            self.compute_used,
            self.ceiling_used,
            self.budget,
            self.default_guarantee,
            self.link,
            self.mig,
            self.profiles,
        ) = key
        self.idle = (
            self.healthy
            and not self.exclusive
            and not self.memory_used
            and not self.compute_used
            and not self.ceiling_used
            and not self.mig
        )
        self.free = self._free_share()
        # How many (profile, start) slices still fit: the MIG tie-breaker keeps this high.
        self.mig_options = sum(
            mig_start_fits(self.mig, p, s, list(self.profiles)) for p in self.profiles for s in p.placements
        )

    def guarantee(self, shape: Request) -> int:
        return guarantee_of(shape, self.default_guarantee)

    def takes_fraction(self, memory: int, guaranteed: int, ceiling: int) -> bool:
        """Memory, guaranteed compute and ceiling fit (health, exclusivity and MIG checked apart)."""
        return (
            self.memory_used + memory <= self.memory
            and self.compute_used + guaranteed <= MILLI
            and self.ceiling_used + ceiling <= self.budget
        )

    def _free_share(self) -> int:
        """Free part of the GPU in milli-GPUs (the unit fragmentation is counted in)."""
        if not self.healthy or self.exclusive:
            return 0
        if self.profiles:
            compute, slots = gpu_geometry(list(self.profiles))
            by_name = {p.name: p for p in self.profiles}
            used_slots = sum(s.size for s in self.mig)
            used_compute = sum(by_name[s.profile].compute_slices for s in self.mig)
            return min((slots - used_slots) * MILLI // slots, (compute - used_compute) * MILLI // compute)
        # A fraction needs guaranteed compute and room under the ceiling budget: the scarcer one counts.
        free = min(MILLI - self.compute_used, self.budget - self.ceiling_used)
        if self.memory:
            free = min(free, (self.memory - self.memory_used) * MILLI // self.memory)
        return free


@dataclass(frozen=True)
class StaticInfo:
    """The parts of a node that placements do not change."""

    id: int
    gpu_model: str
    schedulable: bool
    preflight_failure: str
    mode: str
    cpu_total: int
    memory_total: int
    profiles: tuple[Profile, ...]


class InternedNode:
    """One interned node state; `gpus` in canonical order."""

    __slots__ = (
        "id",
        "static",
        "cpu_free",
        "memory_free",
        "gpus",
        "distinct",
        "total_free",
        "gpu_used",
        "cpu_used",
        "idle_count",
        "compute_free",
    )

    def __init__(
        self, nid: int, static: StaticInfo, cpu_free: int, memory_free: int, gpus: tuple[InternedGpu, ...]
    ):
        self.id = nid
        self.static = static
        self.cpu_free = cpu_free
        self.memory_free = memory_free
        self.gpus = gpus
        # (GPU state, how many, first position): canonical order puts equal GPUs next to each other.
        distinct: list[tuple[InternedGpu, int, int]] = []
        for pos, g in enumerate(gpus):
            if distinct and distinct[-1][0] is g:
                distinct[-1] = (g, distinct[-1][1] + 1, distinct[-1][2])
            else:
                distinct.append((g, 1, pos))
        self.distinct = tuple(distinct)
        self.total_free = sum(g.free for g in gpus)
        # Quick necessary conditions for whole GPUs and fractions (see Fleet.place).
        self.idle_count = sum(g.idle for g in gpus)
        # Room under the ceiling budget: a fraction's ceiling must fit it (its guarantee is smaller).
        self.compute_free = max(
            (g.budget - g.ceiling_used for g in gpus if g.healthy and not g.exclusive and not g.profiles),
            default=-1,
        )
        # Allocated shares, for binpack/spread: unhealthy GPUs count as taken.
        self.gpu_used = 1 - self.total_free / (MILLI * len(gpus)) if gpus else 0.0
        self.cpu_used = 1 - cpu_free / static.cpu_total if static.cpu_total else 0.0


class Interner:
    """Interning tables. One per allocator cache; ids are only meaningful inside it."""

    def __init__(self) -> None:
        self._statics: dict[tuple, StaticInfo] = {}
        self._gpus: dict[tuple, InternedGpu] = {}
        self._nodes: dict[tuple, InternedNode] = {}
        self._transitions: dict[tuple, InternedGpu] = {}

    def __len__(self) -> int:
        return len(self._nodes)

    def gpu(self, key: tuple) -> InternedGpu:
        info = self._gpus.get(key)
        if info is None:
            info = self._gpus[key] = InternedGpu(len(self._gpus), key)
        return info

    def node(
        self, static: StaticInfo, cpu_free: int, memory_free: int, gpus: tuple[InternedGpu, ...]
    ) -> InternedNode:
        """`gpus` must already be in canonical order (sorted by id)."""
        key = (static.id, cpu_free, memory_free, tuple(map(gpu_id, gpus)))
        info = self._nodes.get(key)
        if info is None:
            info = self._nodes[key] = InternedNode(len(self._nodes), static, cpu_free, memory_free, gpus)
        return info

    def signature(self, node: NodeState) -> tuple[InternedNode, tuple[int, ...]]:
        """The interned state of `node` and `perm`: canonical GPU position -> GPU index."""
        profiles = tuple(node.mig_profiles)
        skey = (
            node.gpu_model,
            node.schedulable,
            node.preflight_failure,
            node.sharing_mode,
            node.cpu_milli_total,
            node.memory_mib_total,
        )
        static = self._statics.get(skey + (profiles,))
        if static is None:
            static = self._statics[skey + (profiles,)] = StaticInfo(len(self._statics), *skey, profiles)
        labels: dict[str, int] = {}  # domain names relabelled 0, 1, ... in GPU order: only equality matters
        gpus = []
        for g in node.gpus:
            link = labels.setdefault(g.nvlink_domain, len(labels)) if g.nvlink_domain else PCIE
            key = (
                g.healthy,
                g.exclusive,
                g.memory_mib,
                g.memory_used_mib,
                g.compute_used,
                g.ceiling_used,
                node.ceiling_budget,
                node.default_guarantee,
                link,
                tuple(sorted(g.mig_used)),
                profiles,
            )
            gpus.append(self.gpu(key))
        order = sorted(range(len(gpus)), key=lambda i: gpus[i].id)
        info = self.node(
            static,
            node.cpu_milli_total - node.cpu_milli_used,
            node.memory_mib_total - node.memory_mib_used,
            tuple(gpus[i] for i in order),
        )
        return info, tuple(node.gpus[i].index for i in order)

    def advance(
        self,
        node: InternedNode,
        perm: tuple[int, ...],
        positions: tuple[int, ...],
        part: tuple,
        cpu: int,
        memory: int,
    ) -> tuple[InternedNode, tuple[int, ...]]:
        """What `signature` gives for a node in state `node` (GPU indexes `perm`) once a claim has taken
        `part` of the GPUs at canonical `positions` and `cpu`/`memory` of the host, from the interned parts
        instead of the whole node (a whole-GPU or fraction part: `after` is exactly what `apply` does)."""
        gpus = list(zip(node.gpus, perm, strict=True))
        for pos in positions:
            gpus[pos] = (self.after(gpus[pos][0], part), gpus[pos][1])
        gpus.sort(key=_canonical)  # signature's order: by GPU state, then by index
        info = self.node(
            node.static, node.cpu_free - cpu, node.memory_free - memory, tuple(g for g, _ in gpus)
        )
        return info, tuple(index for _, index in gpus)

    def after(self, gpu: InternedGpu, part: tuple) -> InternedGpu:
        """The GPU state after taking `part`: (WHOLE,) | (FRACTION, memory, guaranteed, ceiling) |
        (MIG_SLICE, slice) | (MIG_SLICE, slice, memory, compute): a candidate's slice keeps its memory and
        compute apart; an applied one counts them as used, as `apply_to_node` does."""
        cache_key = (gpu.id, part)
        info = self._transitions.get(cache_key)
        if info is None:
            (
                healthy,
                exclusive,
                memory,
                memory_used,
                compute_used,
                ceiling_used,
                *policy,
                link,
                mig,
                profiles,
            ) = gpu.key
            if part[0] == WHOLE:
                key = (healthy, True, memory, memory, MILLI, gpu.budget, *policy, link, mig, profiles)
            elif part[0] == FRACTION:
                key = (
                    healthy,
                    exclusive,
                    memory,
                    memory_used + part[1],
                    compute_used + part[2],
                    ceiling_used + part[3],
                    *policy,
                    link,
                    mig,
                    profiles,
                )
            else:
                assert part[0] == MIG_SLICE
                new: MigSlice = part[1]
                memory_taken, compute_taken = part[2:] if len(part) == 4 else (0, 0)
                key = (
                    healthy,
                    exclusive,
                    memory,
                    memory_used + memory_taken,
                    compute_used + compute_taken,
                    ceiling_used,
                    *policy,
                    link,
                    tuple(sorted(mig + (new,))),
                    profiles,
                )
            info = self._transitions[cache_key] = self.gpu(key)
        return info


gpu_id = operator.attrgetter("id")  # sort key of the canonical GPU order


def _canonical(pair: tuple[InternedGpu, int]) -> tuple[int, int]:
    return pair[0].id, pair[1]
