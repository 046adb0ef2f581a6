"""Fair shares of a region's GPUs of one model, when the pools drawing on them want more than there is.
Pure: no Django (nodepools/capacity.py gathers the pools and applies the answer).

Progressive filling in whole nodes (max-min fairness, as the Kubernetes and YARN schedulers share a
cluster): the tenant holding the fewest GPUs so far is given one more node, of its oldest pool that
still wants one and fits in what is left, until nothing more fits. So a tenant asking for little gets
all of it, and what is left is split evenly among those asking for more; a tenant's own pools fill in
the order they were made. Nothing here takes nodes away: a pool keeps the nodes it has (the caller
never goes below them), so fairness bounds growth and decides who gets capacity as it frees.
"""

import heapq
from collections.abc import Hashable, Iterable
from dataclasses import dataclass


@dataclass(frozen=True)
class Demand:
    pool: Hashable
    tenant: Hashable
    gpus_per_node: int
    nodes: int  # nodes it asks for (its desired count, or what it holds if that is more)
    order: tuple = ()  # its place among its tenant's pools (older first)


def shares(total_gpus: int, demands: Iterable[Demand]) -> dict[Hashable, int]:
    """Pool -> how many of the nodes it asks for it gets under fair sharing of `total_gpus`."""
    by_tenant: dict[Hashable, list[Demand]] = {}
    for demand in sorted(demands, key=lambda d: d.order):
        by_tenant.setdefault(demand.tenant, []).append(demand)
    given = {demand.pool: 0 for pools in by_tenant.values() for demand in pools}
    # (GPUs given to the tenant, its position, the tenant): ties go to the tenant listed first.
    heap = [(0, position, tenant) for position, tenant in enumerate(by_tenant)]
    left = total_gpus
    while heap:
        gpus, position, tenant = heapq.heappop(heap)
        pools = by_tenant[tenant]
        while pools and (given[pools[0].pool] >= pools[0].nodes or pools[0].gpus_per_node > left):
            pools.pop(0)  # satisfied, or its nodes no longer fit: the tenant's next pool
        if not pools:
            continue
        pool = pools[0]
        given[pool.pool] += 1
        left -= pool.gpus_per_node
        heapq.heappush(heap, (gpus + pool.gpus_per_node, position, tenant))
    return given
