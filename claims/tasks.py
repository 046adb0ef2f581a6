from celery import shared_task

from claims import allocator
from claims.models import Claim
from nodepools import autoscaler


@shared_task(acks_late=True)
def place_pending_claims(cluster_id: int) -> None:
    """Capacity changed or claims were queued: place the cluster's pending claims in one pass; what is
    left pending may grow an autoscaling pool."""
    allocator.pass_started(cluster_id)
    allocator.place_pending(cluster_id)
    if Claim.objects.filter(cluster_id=cluster_id, status=Claim.Status.PENDING).exists():
        autoscaler.request(cluster_id)


@shared_task
def place_all_pending_claims() -> None:
    """Beat's resync of the allocator queue."""
    pending = Claim.objects.filter(status=Claim.Status.PENDING)
    for cluster_id in pending.values_list("cluster_id", flat=True).distinct():
        place_pending_claims.delay(cluster_id)


@shared_task
def prune_allocation_log() -> None:
    """Drop allocation-log entries older than any in-memory inventory can be (see
    allocator.inventory.Snapshot)."""
    allocator.prune_log()
