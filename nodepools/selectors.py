"""Reads that more than one entry point needs."""

import functools
from collections.abc import Callable, Iterable

from django.db import DEFAULT_DB_ALIAS, connections
from django.db.models import F, QuerySet, Sum
from django.db.models.functions import Coalesce
from django.db.models.sql.compiler import SQLCompiler

from nvke.lookups import ids_parameter

from .compatibility import Refusal, cuda_refusal, driver_refusals
from .models import Allocation, Claim, DriverRelease, Gpu, GpuModel, GpuShare, Node, NodePool

DECISIONS_SHOWN = 20


def autoscaling(pool: NodePool) -> dict:
    """A pool's autoscaler as its page and the API show it (newest decisions first)."""
    removing = pool.scale_down_node and {
        "node": pool.scale_down_node,
        "phase": pool.scale_down_phase,
        "since": pool.scale_down_started_at,
    }
    return {
        "autoscaling": pool.autoscaling,
        "node_count": pool.node_count,
        "min_nodes": pool.min_nodes,
        "max_nodes": pool.max_nodes,
        "scale_down_delay_s": pool.scale_down_delay_s,
        "removing": removing or None,
        "decisions": list(pool.autoscaler_decisions.all()[:DECISIONS_SHOWN]),
    }


def attach_gpu_snapshots(nodes: list[Node]) -> None:
    """Give each node `gpu_list`: its GPUs in index order as plain dicts, each with `shares` (who holds
    what on it, its claim's namespace and name read with the share), in two queries however many nodes.
    Plain rows, not model instances: a page of 50 nodes is 400 GPUs and thousands of shares, and
    building and prefetching instances for them cost most of the request."""
    by_node: dict[int, list[dict]] = {}
    for node in nodes:
        node.gpu_list = by_node.setdefault(node.pk, [])
    by_gpu: dict[int, list[dict]] = {}
    # Ordered by the columns themselves: the models' orderings name related models, which made
    # PostgreSQL join and sort through node, pool and cluster.
    gpus = Gpu.objects.filter(node_id__in=by_node).order_by("node_id", "index")
    for gpu in gpus.values("id", "node_id", "index", "uuid", "memory_mib", "nvlink_domain", "healthy"):
        gpu["shares"] = by_gpu[gpu["id"]] = []
        by_node[gpu["node_id"]].append(gpu)
    shares = GpuShare.objects.filter(gpu_id__in=by_gpu).order_by("gpu_id", "mig_start", "id")
    for share in shares.values(
        "gpu_id",
        "memory_mib",
        "compute_milli",
        "guaranteed_milli",
        "exclusive",
        "mig_profile",
        "mig_start",
        "mig_size",
        claim=F("allocation__claim_id"),
        namespace=F("allocation__claim__namespace"),
        name=F("allocation__claim__name"),
    ):
        by_gpu[share["gpu_id"]].append(share)


# What a node's document shows of its GPUs and of their shares (`node_gpus`, `gpu_shares`).
GPU_COLUMNS = ("node_id", "id", "index", "uuid", "memory_mib", "nvlink_domain", "healthy")
SHARE_COLUMNS = (
    *("gpu_id", "memory_mib", "compute_milli", "guaranteed_milli", "exclusive"),
    *("mig_profile", "mig_start", "mig_size", "allocation_id"),
)


def node_gpus(node_ids: list[int]) -> list[tuple]:
    """The nodes' GPUs as tuples of GPU_COLUMNS, by node in index order."""
    return _rows(_node_gpus, node_ids)


def gpu_shares(gpu_ids: list[int]) -> list[tuple]:
    """The GPUs' shares as tuples of SHARE_COLUMNS, each GPU's in `attach_gpu_snapshots`' order (MIG
    start, nulls last, then id). Read by the GPUs' ids rather than joined to the nodes' GPUs: PostgreSQL
    hashed every share of the fleet for that join (1.3 ms at 10,000 shares, against 0.5)."""
    return _rows(_gpu_shares, gpu_ids)


def allocation_claims(allocation_ids: Iterable[int]) -> list[tuple[int, int, str, str]]:
    """(allocation, its claim, the claim's namespace and name) of each allocation still there."""
    allocations = Allocation.objects.filter(pk__in=allocation_ids)
    return list(allocations.values_list("pk", "claim_id", "claim__namespace", "claim__name"))


def _node_gpus(node_ids: list[int]) -> QuerySet:
    # Ordered by the columns themselves: the model's ordering names related models.
    gpus = Gpu.objects.filter(node_id__among=node_ids).order_by("node_id", "index")
    return gpus.values_list(*GPU_COLUMNS)


def _gpu_shares(gpu_ids: list[int]) -> QuerySet:
    shares = GpuShare.objects.filter(gpu_id__among=gpu_ids).order_by("gpu_id", "mig_start", "id")
    return shares.values_list(*SHARE_COLUMNS)


def _rows(query: Callable[[list[int]], QuerySet], ids: list[int]) -> list[tuple]:
    """`query(ids)`'s rows, its SQL compiled once per process (`_compiled`)."""
    if not ids:
        return []
    connection = connections[DEFAULT_DB_ALIAS]
    sql, compiler = _compiled(query)
    with connection.cursor() as cursor:
        cursor.execute(sql, [ids_parameter(connection, ids)])
        rows = cursor.fetchall()
    return list(compiler.results_iter([rows]))  # the backend's converters, as values_list applies them


@functools.cache
def _compiled(query: Callable[[list[int]], QuerySet]) -> tuple[str, SQLCompiler]:
    """The SQL of `query`, whose one parameter is its ids (`__among`): building and compiling it took
    the ORM ~0.45 ms a page of nodes."""
    compiler = query([]).query.get_compiler(DEFAULT_DB_ALIAS)
    sql, params = compiler.as_sql()
    assert len(params) == 1, params
    return sql, compiler


CLAIM_COLUMNS = (
    "id",
    "cluster_id",
    "pool_id",
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
    "priority",
    "training",
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
}


def claim_rows(claims: QuerySet[Claim]) -> QuerySet:
    """The claims as plain rows, each with its allocation's node, pool and GPU model columns (one query
    with the joins). Plain rows, not model instances: a page of claims with their allocations, nodes,
    pools and GPU models was hundreds of instances, most of the request's time."""
    return claims.values(*CLAIM_COLUMNS, **ALLOCATION_COLUMNS)


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
    for share in _rows(_allocation_shares, list(by_allocation)):
        by_allocation[share[0]].append(dict(zip(_CLAIM_SHARE_KEYS, share, strict=True)))


def _allocation_shares(allocation_ids: list[int]) -> QuerySet:
    # Ordered by the columns themselves: GpuShare's ordering sorts through node, pool and cluster names.
    shares = GpuShare.objects.filter(allocation_id__among=allocation_ids)
    return shares.order_by("allocation_id", "gpu__index", "mig_start").values_list(*CLAIM_SHARE_COLUMNS)


def driver_compatibility(
    gpu_model: GpuModel, sharing_mode: str, cuda: str = ""
) -> list[tuple[DriverRelease, list[Refusal]]]:
    """Every driver release with why it cannot run this GPU (empty list: it can), newest first; with
    `cuda`, also why it cannot run that CUDA version (the rule a pool's driver-options apply)."""
    drivers = list(DriverRelease.objects.prefetch_related("architectures").select_related())
    rows = []
    for driver in drivers:
        refusals = driver_refusals(driver, gpu_model, sharing_mode)
        if refusal := cuda_refusal(driver, cuda, drivers):
            refusals.append(refusal)
        rows.append((driver, refusals))
    return rows


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
