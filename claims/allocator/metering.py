"""Metering at the source: a usage interval opens in the transaction that writes an allocation (or
resizes one in place) and closes in the one that deletes it, so metering is exactly as durable as the
placements themselves. A move closes one interval and opens the next: nothing is counted twice."""

import datetime
from dataclasses import dataclass

from django.db.models.signals import post_delete
from django.dispatch import receiver
from django.utils import timezone

from claims import allocation as core
from claims.allocation.state import MILLI
from claims.allocator.inventory import Snapshot
from claims.models import Allocation, Claim, UsageInterval


@dataclass(frozen=True)
class UsageRow:
    """An interval to open for a claim's new allocation (its id is known only once it is written)."""

    claim_id: int
    tenant_id: int
    claim_name: str
    namespace: str
    kind: str
    cluster_id: int
    cluster_name: str
    pool_id: int
    pool_name: str
    gpu_model: str
    gpus: int
    memory_mib: int
    guaranteed_milli: int
    ceiling_milli: int
    gpu_equivalent_milli: int


def usage_row(snap: Snapshot, claim: Claim, p: core.Placement) -> UsageRow:
    """What the claim holds under placement `p`, with the names it is reported under."""
    pool = next(pool for pool in snap.inventory.pools if pool.pk == snap.pool_of[p.node_id])
    node = snap.node(p.node_id)
    equivalent = 0
    for index in p.gpu_indexes:
        card = node.gpus[index].memory_mib
        memory_share = p.memory_mib * MILLI // card if card else 0
        equivalent += MILLI if claim.kind == Claim.Kind.WHOLE else max(memory_share, p.guaranteed_milli)
    gpus = len(p.gpu_indexes)
    return UsageRow(
        claim_id=claim.pk,
        tenant_id=claim.tenant_id,
        claim_name=claim.name,
        namespace=claim.namespace,
        kind=claim.kind,
        cluster_id=claim.cluster_id,
        cluster_name=pool.cluster.name,
        pool_id=pool.pk,
        pool_name=pool.name,
        gpu_model=pool.gpu_model.name,
        gpus=gpus,
        memory_mib=p.memory_mib * gpus,
        guaranteed_milli=p.guaranteed_milli * gpus,
        ceiling_milli=p.compute_milli * gpus,
        gpu_equivalent_milli=min(equivalent, MILLI * gpus),
    )


def reopen(allocation_id: int, row: UsageRow, at: datetime.datetime) -> None:
    """The allocation changed in place (a resize): close its interval and open one as it holds now."""
    close([allocation_id], at)
    UsageInterval.objects.create(allocation_id=allocation_id, started_at=at, **vars(row))


def close(allocation_ids: list[int], at: datetime.datetime) -> None:
    UsageInterval.objects.filter(allocation_id__in=allocation_ids, ended_at__isnull=True).update(ended_at=at)


@receiver(post_delete, sender=Allocation, dispatch_uid="nodepools.metering.close")
def _allocation_deleted(sender, instance: Allocation, **kwargs) -> None:
    """However an allocation goes (a release, an eviction, a move, its node or cluster deleted), its
    interval ends in the same transaction."""
    close([instance.pk], timezone.now())
