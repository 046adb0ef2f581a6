"""Claims as the placement core sees them: validation by kind, a claim's `Request`, and the empty nodes
(a pool's, or any the catalog could give) that "can this ever fit?" is answered against."""

from catalog.models import GpuModel, SharingMode
from claims import allocation as core
from claims.allocation import fleet
from claims.models import Claim
from nodepools import sharing
from nodepools.models import NodePool
from nvke.errors import DomainError
from nvke.models import check_dns_label


def request_of(claim: Claim) -> core.Request:
    """The pure core's view of a claim."""
    common = {
        "cpu_milli": claim.cpu_milli,
        "host_memory_mib": claim.host_memory_mib,
        "allowed_models": frozenset(claim.allowed_models),
        "min_isolation": claim.min_isolation,
    }
    if claim.kind == Claim.Kind.WHOLE:
        return core.Request("whole", gpus=claim.gpus, nvlink_required=claim.nvlink_required, **common)
    if claim.kind == Claim.Kind.MIG:
        return core.Request("mig", mig_profile=claim.mig_profile, **common)
    guaranteed = claim.guaranteed_percent
    return core.Request(
        "fraction",
        memory_mib=claim.gpu_memory_mib or 0,
        compute_milli=(claim.compute_percent or 0) * 10,
        guaranteed_milli=None if guaranteed is None else guaranteed * 10,
        **common,
    )


def validate_claim(claim: Claim) -> None:
    """Fields that belong together by kind; raises a DomainError naming the field."""
    check_dns_label(claim.name)
    check_dns_label(claim.namespace, field="namespace")
    fraction_fields = claim.gpu_memory_mib is not None or claim.compute_percent is not None
    if claim.kind == Claim.Kind.WHOLE:
        if fraction_fields or claim.mig_profile:
            raise DomainError(
                "A whole-GPU claim takes no mig_profile, gpu_memory or compute_percent.", field="kind"
            )
    elif claim.gpus != 1:
        raise DomainError(f"A {claim.kind} claim takes exactly one GPU.", field="gpus")
    elif claim.nvlink_required:
        raise DomainError("nvlink_required applies to whole-GPU claims.", field="nvlink_required")
    if claim.kind == Claim.Kind.MIG and (not claim.mig_profile or fraction_fields):
        raise DomainError("A MIG claim names a mig_profile and nothing else.", field="mig_profile")
    if claim.kind == Claim.Kind.FRACTION:
        if claim.mig_profile:
            raise DomainError("A fraction takes no mig_profile.", field="mig_profile")
        if not claim.gpu_memory_mib and not claim.compute_percent:
            raise DomainError("A fraction asks for gpu_memory and/or compute_percent.", field="gpu_memory")
        if claim.guaranteed_percent is not None and claim.guaranteed_percent > (claim.compute_percent or 0):
            raise DomainError(
                f"guaranteed_percent {claim.guaranteed_percent} is above the claim's ceiling, "
                f"compute_percent {claim.compute_percent or 0}: it is guaranteed at most what it may use.",
                field="guaranteed_percent",
            )
    elif claim.guaranteed_percent is not None:
        raise DomainError("guaranteed_percent applies to fractions.", field="guaranteed_percent")
    _validate_isolation(claim)
    unknown = claim.allowed_models and sorted(
        set(claim.allowed_models) - set(GpuModel.objects.values_list("name", flat=True))
    )
    if unknown:
        raise DomainError(f"Unknown GPU model {unknown[0]!r}.", field="allowed_models")
    if claim.pool_id and claim.pool.cluster_id != claim.cluster_id:
        raise DomainError("The pool belongs to another cluster.", field="pool")


# The most a claim of each kind can be given: asking for more could never be met.
_MOST_ISOLATION = {
    Claim.Kind.WHOLE: "exclusive",
    Claim.Kind.MIG: "hard",
    Claim.Kind.FRACTION: "memory-capped",
}


def _validate_isolation(claim: Claim) -> None:
    if claim.min_isolation not in core.ISOLATION_LEVELS:
        raise DomainError(
            f"Unknown isolation {claim.min_isolation!r}; use one of {', '.join(core.ISOLATION_LEVELS)}.",
            field="min_isolation",
        )
    most = _MOST_ISOLATION[claim.kind]
    if core.ISOLATION_RANK[claim.min_isolation] > core.ISOLATION_RANK[most]:
        raise DomainError(
            f"A {claim.get_kind_display().lower()} claim is at most {most}-isolated, so it cannot ask for "
            f"{claim.min_isolation}.",
            field="min_isolation",
            code="isolation_out_of_reach",
        )


def mig_profiles(pool: NodePool) -> list[core.Profile]:
    """The MIG profiles a pool's GPUs can be cut into. A static layout pins each profile to the starts
    the layout gives it, so claims only land on the slices the layout creates."""
    profiles = [
        core.Profile(p.name, p.compute_slices, p.memory_slices, tuple(p.placements), p.max_instances)
        for p in pool.gpu_model.mig_profiles.all()
    ]
    if not pool.mig_layout:
        return profiles
    by_name = {p.name: p for p in profiles}
    starts = core.place_layout([by_name[name] for name in pool.mig_layout], profiles) or []
    pinned = []
    for p in profiles:  # a profile outside the layout keeps its geometry but no start and no instance
        mine = tuple(start for name, start in zip(pool.mig_layout, starts, strict=True) if name == p.name)
        pinned.append(core.Profile(p.name, p.compute_slices, p.memory_slices, mine, len(mine)))
    return pinned


def pool_shape(pool: NodePool) -> core.NodeState:
    """An empty node of the pool: what fits_ever compares a claim against."""
    model = pool.gpu_model
    nvlink = "board" if model.nvlink and pool.gpus_per_node > 1 else ""
    return core.NodeState(
        id=f"shape-{pool.pk}",
        gpu_model=model.name,
        sharing_mode=pool.sharing_mode,
        gpus=[core.GpuState(i, model.memory_mib, nvlink_domain=nvlink) for i in range(pool.gpus_per_node)],
        cpu_milli_total=model.host_cpus_per_gpu * pool.gpus_per_node * 1000,
        memory_mib_total=model.host_memory_gib_per_gpu * pool.gpus_per_node * 1024,
        mig_profiles=mig_profiles(pool) if pool.sharing_mode == SharingMode.MIG else [],
        **sharing.node_policy(pool),
    )


def catalog_shapes() -> list[core.NodeState]:
    """Every node the catalog could give a new pool: each GPU model, full board, each sharing mode."""
    shapes = []
    for model in GpuModel.objects.prefetch_related("mig_profiles"):
        modes = [m for m in SharingMode.values if m != SharingMode.MIG or model.supports_mig]
        for mode in modes:
            pool = NodePool(gpu_model=model, gpus_per_node=model.max_gpus_per_node, sharing_mode=mode)
            sharing.apply_mode_defaults(pool, set())
            shapes.append(pool_shape(pool))
    return shapes


# Which claim field a "never fits" reason points at; reasons about where a node is (its mode, its model)
# say nothing about the claim's size and are skipped.
_FIELD_OF_REASON = {
    fleet.ISOLATION_BELOW_ASKED: "min_isolation",
    fleet.NO_PROFILE: "mig_profile",
    fleet.NO_MIG_PLACEMENT: "mig_profile",
    fleet.INSUFFICIENT_GPU_MEMORY: "gpu_memory",
    fleet.INSUFFICIENT_GPU_COMPUTE: "compute_percent",
    fleet.NOT_ENOUGH_GPUS: "gpus",
    fleet.NO_NVLINK: "nvlink_required",
    fleet.INSUFFICIENT_CPU: "cpu_milli",
    fleet.INSUFFICIENT_HOST_MEMORY: "host_memory_mib",
}


def field_at_fault(reason: str) -> str:
    """The field to name for a never-fits reason ("0/9 nodes: 6 insufficient GPU memory, 3 wrong sharing
    mode" → gpu_memory): the most frequent reason that is about the claim's size, else `kind`. The
    figures after the counts (". It needs …") are not looked at."""
    for part in reason.partition(". ")[0].partition(": ")[2].split(", "):
        name = part.partition(" ")[2]
        if name in _FIELD_OF_REASON:
            return _FIELD_OF_REASON[name]
    return "kind"
