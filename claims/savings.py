"""What sharing saves, now: per pool and per cluster, the GPUs whole-card allocation would need for the
same placed claims (a whole card per fraction or MIG slice, its GPUs per whole-GPU claim) against the
GPUs actually in use, and the memory claims hold against the memory on the cards in use. Over time, the
same comparison comes from metering (claims.usage: whole-card GPU-hours against GPU-hours held)."""

from collections import defaultdict
from dataclasses import dataclass, field

from claims.models import Claim, GpuShare
from nvke.tenancy.models import Tenant


@dataclass
class Savings:
    name: str  # "cluster" or "cluster/pool"
    claims: set[int] = field(default_factory=set)
    whole_card_gpus: int = 0
    gpus: dict[int, int] = field(default_factory=dict)  # GPU pk → its memory, for the GPUs in use
    memory_held_mib: int = 0

    @property
    def gpus_used(self) -> int:
        return len(self.gpus)

    @property
    def gpus_saved(self) -> int:
        return self.whole_card_gpus - self.gpus_used

    @property
    def saved_percent(self) -> float:
        return 100 * self.gpus_saved / self.whole_card_gpus if self.whole_card_gpus else 0.0

    @property
    def memory_on_cards_mib(self) -> int:
        return sum(self.gpus.values())

    @property
    def memory_use_percent(self) -> float:
        """Memory held of the memory on the cards in use."""
        return 100 * self.memory_held_mib / self.memory_on_cards_mib if self.memory_on_cards_mib else 0.0


def savings(tenant: Tenant) -> tuple[list[Savings], list[Savings]]:
    """(per cluster, per pool) for the tenant's placed claims, in name order; one query."""
    shares = GpuShare.objects.filter(
        allocation__claim__tenant=tenant, allocation__claim__status=Claim.Status.ALLOCATED
    ).values_list(
        "allocation__claim_id",
        "gpu_id",
        "gpu__memory_mib",
        "memory_mib",
        "gpu__node__pool__name",
        "gpu__node__pool__cluster__name",
    )
    clusters: dict[str, Savings] = defaultdict(lambda: Savings(""))
    pools: dict[str, Savings] = defaultdict(lambda: Savings(""))
    for claim_id, gpu_id, card_mib, memory_mib, pool, cluster in shares:
        for key, groups in ((cluster, clusters), (f"{cluster}/{pool}", pools)):
            row = groups[key]
            row.name = key
            row.claims.add(claim_id)
            row.whole_card_gpus += 1  # a whole card per GPU share: each of a whole claim's, one per fraction
            row.gpus[gpu_id] = card_mib
            row.memory_held_mib += memory_mib  # a whole-GPU claim's share is the whole card's memory
    return sorted(clusters.values(), key=lambda s: s.name), sorted(pools.values(), key=lambda s: s.name)
