"""A pool's compute-sharing policy: how far its fractions' compute ceilings on one GPU may add up, and the
guaranteed share a fraction gets when it names none.

Like Kubernetes CPU, a fraction's `compute_percent` is a ceiling (its limit: MPS's active-thread
percentage, time-slicing's share of slices) and `guaranteed_percent` is what it may always have (its
request). On one GPU the guarantees add up to at most 100%, the ceilings to at most the pool's
`compute_oversubscription_percent`. Memory is never oversubscribed. Exclusive and MIG pools never
oversubscribe: a whole GPU or a MIG slice is all of what it holds."""

from catalog.models import SharingMode
from claims.allocation.state import MILLI
from nodepools.models import NodePool
from nodepools.preflight import enforced_isolation
from nvke.errors import DomainError

MAX_OVERSUBSCRIPTION_PERCENT = 400

# Per mode: (compute_oversubscription_percent, default_guaranteed_percent; None = the claim's ceiling).
# Time-slicing and MPS ceilings need not add up to 100% (NVIDIA's MPS documentation says as much); a
# fractional pool's caps are enforced shares, so by default a claim is guaranteed what it is capped at.
MODE_DEFAULTS: dict[str, tuple[int, int | None]] = {
    SharingMode.EXCLUSIVE: (100, None),
    SharingMode.MIG: (100, None),
    SharingMode.FRACTIONAL: (100, None),
    SharingMode.TIME_SLICING: (200, 10),
    SharingMode.MPS: (200, 10),
}
NEVER_OVERSUBSCRIBED = (SharingMode.EXCLUSIVE, SharingMode.MIG)


def apply_mode_defaults(pool: NodePool, given: set[str]) -> None:
    """Fill the policy fields the caller did not give with the defaults of the pool's sharing mode."""
    percent, guaranteed = MODE_DEFAULTS[pool.sharing_mode]
    if "compute_oversubscription_percent" not in given:
        pool.compute_oversubscription_percent = percent
    if "default_guaranteed_percent" not in given:
        pool.default_guaranteed_percent = guaranteed


def validate_policy(pool: NodePool) -> None:
    """Raises a DomainError naming the field when the policy does not suit the pool's mode."""
    percent, guaranteed = pool.compute_oversubscription_percent, pool.default_guaranteed_percent
    if pool.sharing_mode in NEVER_OVERSUBSCRIBED:
        if percent != 100:
            raise DomainError(
                f"A {pool.sharing_mode} pool never oversubscribes compute: compute_oversubscription_percent "
                "must be 100.",
                field="compute_oversubscription_percent",
                code="out_of_bounds",
            )
        if guaranteed is not None:
            raise DomainError(
                f"A {pool.sharing_mode} pool takes no fractions, so no default_guaranteed_percent.",
                field="default_guaranteed_percent",
            )
        return
    if not 100 <= percent <= MAX_OVERSUBSCRIPTION_PERCENT:
        raise DomainError(
            f"compute_oversubscription_percent: {percent} is out of bounds; use 100 to "
            f"{MAX_OVERSUBSCRIPTION_PERCENT} (ceilings on one GPU may add up to that %).",
            field="compute_oversubscription_percent",
            code="out_of_bounds",
        )
    if guaranteed is not None and not 0 <= guaranteed <= 100:
        raise DomainError(
            f"default_guaranteed_percent: {guaranteed} is out of bounds; use 0 to 100.",
            field="default_guaranteed_percent",
            code="out_of_bounds",
        )


def node_policy(pool: NodePool) -> dict[str, int | None]:
    """The pool's policy as the placement core's NodeState takes it (milli-GPUs)."""
    guaranteed = pool.default_guaranteed_percent
    return {
        "ceiling_budget": pool.compute_oversubscription_percent * MILLI // 100,
        "default_guarantee": None if guaranteed is None else guaranteed * MILLI // 100,
    }


# What holds a fraction's memory and compute, by the pool's mode; whole GPUs and MIG slices need no more.
_FRACTION_ISOLATION = {
    SharingMode.MPS: (
        "MPS: a pinned device-memory limit (CUDA_MPS_PINNED_DEVICE_MEM_LIMIT) holds its memory; the "
        "active-thread percentage (CUDA_MPS_ACTIVE_THREAD_PERCENTAGE) caps its compute at the ceiling. Its "
        "guaranteed share is kept by NVKE's rescaler throttling the others, not by the GPU, and a fatal "
        "fault in one MPS client stops every client of the GPU."
    ),
    SharingMode.TIME_SLICING: (
        "Time-slicing: nothing holds its memory (a workload that allocates past its share takes it from the "
        "others, and someone runs out of memory); the GPU switches between the workloads' contexts, and its "
        "ceiling and guaranteed share are kept only by NVKE's rescaler."
    ),
    SharingMode.FRACTIONAL: (
        "Fractional: memory and compute caps are enforced in software by the node's sharing library (an "
        "interposed CUDA library, not a hardware boundary); its guaranteed share is kept by NVKE's "
        "rescaler."
    ),
}
_ISOLATION = {
    "exclusive": "Exclusive: its GPUs run nothing else.",
    "hard": "MIG: its own memory and compute slices, partitioned by the GPU; no other slice can touch them.",
}


def isolation_detail(isolation: str, sharing_mode: str) -> str:
    """In plain words, what holds a placed claim's memory and compute on a pool of `sharing_mode`."""
    return _ISOLATION.get(isolation) or _FRACTION_ISOLATION.get(sharing_mode, "")


NOT_ENFORCED = (
    "None enforced: a pod's share of a GPU reaches its container only through NVKE's device plugin (and, on "
    "an MPS pool, the node's MPS daemons), which this node's nvke-agent does not report up; until it does, "
    "the container runs with no GPU memory or compute limit."
)


def held_isolation(
    isolation: str, *, kind: str, source: str, sharing_mode: str, facts: dict
) -> tuple[str, str]:
    """A placed claim's isolation as its node enforces it (preflight.enforced_isolation) and what holds
    it, in plain words. `isolation`: as the allocator recorded it; `facts`: the node's preflight."""
    enforced = enforced_isolation(isolation, kind=kind, source=source, sharing_mode=sharing_mode, facts=facts)
    if enforced != isolation:
        return enforced, NOT_ENFORCED
    return isolation, isolation_detail(isolation, sharing_mode)
