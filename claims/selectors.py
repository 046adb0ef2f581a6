"""Reads of claims that more than one entry point needs (the claims API, the UI, the benchmarks)."""

import datetime

from django.conf import settings
from django.db.models import F, QuerySet, Sum
from django.db.models.functions import Coalesce

from claims.models import Claim, GpuShare
from nodepools.models import Node
from nvke.lookups import rows_among

CLAIM_COLUMNS = (
    "id",
    "cluster_id",
    "pool_id",
    "queue_id",
    "namespace",
    "name",
    "kind",
    "gpus",
    "nvlink_required",
    "mig_profile",
    "gpu_memory_mib",
    "compute_percent",
    "guaranteed_percent",
    "cpu_milli",
    "host_memory_mib",
    "allowed_models",
    "min_isolation",
    "priority",
    "training",
    "preemptible",
    "preempted_at",
    "status",
    "pending_reason",
    "source",
    "workload",
    "created_at",
    "allocated_at",
)
# Where a claim is placed (null columns when it is not), read in the claim's row.
ALLOCATION_COLUMNS = {
    "allocation_id": F("allocation__id"),
    "node_id": F("allocation__node_id"),
    "node_name": F("allocation__node__name"),
    "pool_name": F("allocation__node__pool__name"),
    "sharing_mode": F("allocation__node__pool__sharing_mode"),
    "card_mib": F("allocation__node__pool__gpu_model__memory_mib"),
    "isolation": F("allocation__isolation"),
    "node_preflight": F("allocation__node__preflight"),  # what the node enforces (nodepools.preflight)
}
# Who took its GPUs last (null if none, or deleted since).
PREEMPTED_BY = F("preempted_by__namespace"), F("preempted_by__name")


def claim_rows(claims: QuerySet[Claim]) -> QuerySet:
    """The claims as plain rows, each with its allocation's node, pool and GPU model columns (one query
    with the joins). Plain rows, not model instances: a page of claims with their allocations, nodes,
    pools and GPU models was hundreds of instances, most of the request's time."""
    return claims.values(
        *CLAIM_COLUMNS,
        **ALLOCATION_COLUMNS,
        preempted_by_namespace=PREEMPTED_BY[0],
        preempted_by_name=PREEMPTED_BY[1],
    )


# What a claim's document shows of each of its shares, and the keys `attach_claim_shares` gives them.
CLAIM_SHARE_COLUMNS = (
    *("allocation_id", "memory_mib", "compute_milli", "guaranteed_milli", "exclusive"),
    *("mig_profile", "mig_start", "gpu__index", "gpu__uuid"),
)
_CLAIM_SHARE_KEYS = tuple(column.replace("gpu__", "gpu_") for column in CLAIM_SHARE_COLUMNS)


def attach_claim_shares(rows: list[dict]) -> None:
    """Give each claim row (`claim_rows`) `shares`: its allocation's GPU shares as plain dicts, in GPU
    index order, each with its GPU's index and UUID; one query however many claims."""
    by_allocation: dict[int, list[dict]] = {}
    for row in rows:
        row["shares"] = by_allocation.setdefault(row["allocation_id"], []) if row["allocation_id"] else []
    for share in rows_among(_allocation_shares, list(by_allocation)):
        by_allocation[share[0]].append(dict(zip(_CLAIM_SHARE_KEYS, share, strict=True)))


def _allocation_shares(allocation_ids: list[int]) -> QuerySet:
    # Ordered by the columns themselves: GpuShare's ordering sorts through node, pool and cluster names.
    shares = GpuShare.objects.filter(allocation_id__among=allocation_ids)
    return shares.order_by("allocation_id", "gpu__index", "mig_start").values_list(*CLAIM_SHARE_COLUMNS)


def allocation_violations(cluster_id: int) -> list[str]:
    """Over-commits in the cluster's stored allocations, recomputed from the rows (the race test and
    the service benchmark use it). Empty when every invariant holds."""
    problems = []
    shares = GpuShare.objects.filter(gpu__node__pool__cluster_id=cluster_id).select_related("gpu__node__pool")
    by_gpu: dict[int, list] = {}
    for share in shares:
        by_gpu.setdefault(share.gpu_id, []).append(share)
    for gpu_shares in by_gpu.values():
        gpu = gpu_shares[0].gpu
        memory = sum(s.memory_mib for s in gpu_shares)
        guaranteed = sum(s.guaranteed_milli for s in gpu_shares)
        ceilings = sum(s.compute_milli for s in gpu_shares)
        budget = gpu.node.pool.compute_oversubscription_percent
        if memory > gpu.memory_mib:
            problems.append(f"{gpu}: memory {memory}/{gpu.memory_mib} MiB")
        if guaranteed > 1000:
            problems.append(f"{gpu}: guaranteed compute {guaranteed / 10:g}%")
        if ceilings > budget * 10:
            problems.append(f"{gpu}: compute ceilings {ceilings / 10:g}% over the pool's {budget}%")
        if any(s.guaranteed_milli > s.compute_milli for s in gpu_shares):
            problems.append(f"{gpu}: a share is guaranteed more than its ceiling")
        if any(s.exclusive for s in gpu_shares) and len(gpu_shares) > 1:
            problems.append(f"{gpu}: an exclusive GPU is shared by {len(gpu_shares)} claims")
        spans = sorted((s.mig_start, s.mig_start + s.mig_size) for s in gpu_shares if s.mig_start is not None)
        if any(a[1] > b[0] for a, b in zip(spans, spans[1:], strict=False)):
            problems.append(f"{gpu}: MIG slices overlap {spans}")
    nodes = Node.objects.filter(pool__cluster_id=cluster_id).annotate(
        cpu=Coalesce(Sum("allocations__cpu_milli"), 0),
        memory=Coalesce(Sum("allocations__host_memory_mib"), 0),
    )
    for node in nodes:
        if node.cpu > node.cpu_millicores or node.memory > node.memory_mib:
            problems.append(f"{node}: host CPU {node.cpu}/{node.cpu_millicores}, memory {node.memory}")
    return problems


def preemption_notice(claim: Claim) -> datetime.datetime | None:
    """When a placed claim told it is preempted loses its GPUs (its grace period's end), while its
    preemptor still waits; None otherwise (claims.allocator.preemption). Select `preempted_by`."""
    by = claim.preempted_by
    if claim.status != Claim.Status.ALLOCATED or by is None or by.status != Claim.Status.PENDING:
        return None
    if claim.preempted_at < claim.allocated_at:  # told in an earlier placement
        return None
    return claim.preempted_at + datetime.timedelta(seconds=settings.NVKE_PREEMPTION_GRACE_S)
