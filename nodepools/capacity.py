"""A region's GPUs as the tenants drawing on them may have them: how many nodes a pool may ask its
provider for (its fair share, nodepools/fair_share.py, when the region's inventory is short), how many
more the autoscaler may give it, and what
a tenant may get of each model now (`regions/`, the pool form), under its quota and fair share,
without telling it the platform's totals or other tenants' use.

Only pools of clusters NVKE provisions draw on region inventory: an attached cluster brings its own
nodes, and a model the region lists no inventory for is left to the provider to answer.
"""

from dataclasses import dataclass, replace

from django.db.models import Count

from catalog.models import RegionInventory
from claims.quotas import gpu_limits, pool_gpus_used
from nodepools.fair_share import Demand, shares
from nodepools.models import NodePool

PROBE = "probe"  # a new pool of the asking tenant, wanting all it can get


@dataclass(frozen=True)
class PoolCap:
    nodes: int  # what the pool's reconcile asks the provider for
    message: str = ""  # why that is fewer than its node_count


@dataclass(frozen=True)
class Offer:
    """What a tenant may add of one GPU model in one region, now."""

    gpu_model: str
    available_gpus: int
    limited_by: str  # "quota", "capacity" or "fair_share": which of the three bounds it is
    quota_left_gpus: int | None  # what the tenant's quota leaves it (None: unlimited)


def _drawing(region_id: int):
    """Pools that draw on the region's inventory, with the nodes each has."""
    return (
        NodePool.objects.filter(cluster__region_id=region_id, cluster__attached=False)
        .exclude(status=NodePool.Status.DELETING)
        .annotate(held=Count("nodes"))
        .values_list("pk", "tenant_id", "gpu_model_id", "gpus_per_node", "node_count", "held")
    )


def _demands(rows) -> list[Demand]:
    return [Demand(pk, tenant, gpus, max(count, held), (pk,)) for pk, tenant, _, gpus, count, held in rows]


def _region_total(pool: NodePool) -> int | None:
    """The region's GPUs of the pool's model; None where region inventory does not apply."""
    if pool.cluster.attached:
        return None
    inventory = RegionInventory.objects.filter(
        region_id=pool.cluster.region_id, gpu_model_id=pool.gpu_model_id
    )
    return inventory.values_list("total_gpus", flat=True).first()


def pool_room(pool: NodePool) -> int | None:
    """How many nodes beyond its node_count the pool may be given now (what the autoscaler may add): its
    fair share were it to ask for max_nodes, and the region's free GPUs, less its nodes still to come.
    None where region inventory does not apply (the provider answers)."""
    total = _region_total(pool)
    if total is None:
        return None
    rows = [row for row in _drawing(pool.cluster.region_id) if row[2] == pool.gpu_model_id]
    demands = [
        replace(d, nodes=max(d.nodes, pool.max_nodes)) if d.pool == pool.pk else d for d in _demands(rows)
    ]
    fair = shares(total, demands).get(pool.pk, 0)
    held = next((row[5] for row in rows if row[0] == pool.pk), 0)
    free = total - sum(r[3] * r[5] for r in rows) - max(pool.node_count - held, 0) * pool.gpus_per_node
    return max(min(fair - pool.node_count, free // pool.gpus_per_node), 0)


def pool_cap(pool: NodePool) -> PoolCap:
    """How many nodes the pool may have now: its node_count, unless the region's GPUs of its model are
    short and its fair share is less (never less than the nodes it has)."""
    cluster = pool.cluster
    total = _region_total(pool)
    if total is None:
        return PoolCap(pool.node_count)
    rows = [row for row in _drawing(cluster.region_id) if row[2] == pool.gpu_model_id]
    held = next((row[5] for row in rows if row[0] == pool.pk), 0)
    fair = shares(total, _demands(rows)).get(pool.pk, 0)
    alone = shares(total, _demands(row for row in rows if row[1] == pool.tenant_id)).get(pool.pk, 0)
    nodes = min(pool.node_count, max(held, fair))
    if nodes == pool.node_count or fair >= alone:  # no other tenant stands in its way: the region's
        return PoolCap(pool.node_count)  # size is the provider's to report
    return PoolCap(
        nodes,
        f"Region {cluster.region.name}'s {pool.gpu_model.name} GPUs are short and shared fairly among the "
        f"tenants asking for them: this pool may have {nodes} of its {pool.node_count} nodes now; the "
        "rest wait until GPUs free up.",
    )


def offers(region_id: int, tenant_id: int | None) -> list[Offer]:
    """Per GPU model the region has: what the tenant may add now, the least of what its quota leaves,
    its fair share beyond what its pools ask for already, and what no pool holds. `tenant_id` None:
    what a tenant with nothing yet and the default quotas may get."""
    limits = gpu_limits(tenant_id)
    used = pool_gpus_used(tenant_id) if tenant_id else {}
    rows = list(_drawing(region_id))
    result = []
    for row in RegionInventory.objects.filter(region_id=region_id).select_related("gpu_model"):
        mine = [r for r in rows if r[2] == row.gpu_model_id]
        limit = limits.get(row.gpu_model_id)
        quota_left = None if limit is None else max(limit.max_gpus - used.get(row.gpu_model_id, 0), 0)
        probe = Demand(PROBE, tenant_id or PROBE, 1, row.total_gpus, (float("inf"),))
        bounds = {  # on a tie, the first names it: a quota no freed GPU lifts, then a full region
            "quota": row.total_gpus if quota_left is None else quota_left,
            "capacity": max(row.total_gpus - sum(r[3] * r[5] for r in mine), 0),
            "fair_share": shares(row.total_gpus, [*_demands(mine), probe])[PROBE],
        }
        limited_by = min(bounds, key=bounds.get)
        result.append(Offer(row.gpu_model.name, bounds[limited_by], limited_by, quota_left))
    return sorted(result, key=lambda offer: offer.gpu_model)
