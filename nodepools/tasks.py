from celery import shared_task

from clusters.models import Cluster
from clusters.tasks import provision_cluster, teardown_cluster

from . import allocator, autoscaler, services
from .models import Claim, NodePool


@shared_task(acks_late=True)
def reconcile_pool(pool_id: int) -> None:
    services.reconcile(pool_id)


@shared_task
def reconcile_all_pools() -> None:
    """Beat's resync: anything not settled gets another step (capacity may have freed up)."""
    for cluster_id, status in Cluster.objects.exclude(status__in=["running", "failed"]).values_list(
        "pk", "status"
    ):
        (provision_cluster if status == "provisioning" else teardown_cluster).delay(cluster_id)
    for pool_id in NodePool.objects.exclude(status__in=["ready", "failed"]).values_list("pk", flat=True):
        reconcile_pool.delay(pool_id)


@shared_task(acks_late=True)
def place_pending_claims(cluster_id: int) -> None:
    """Capacity changed or claims were queued: place the cluster's pending claims in one pass; what is
    left pending may grow an autoscaling pool."""
    allocator.pass_started(cluster_id)
    allocator.place_pending(cluster_id)
    if Claim.objects.filter(cluster_id=cluster_id, status=Claim.Status.PENDING).exists():
        autoscaler.request(cluster_id)


@shared_task(acks_late=True)
def autoscale_cluster(cluster_id: int) -> None:
    """One step of the pool autoscaler for the cluster (idempotent: it reads what is, decides, records)."""
    autoscaler.autoscale(cluster_id)
    autoscaler.keep_stepping(cluster_id)  # the embedded default's stand-in for beat


@shared_task
def autoscale_all() -> None:
    """Beat's round: every cluster with an autoscaling pool gets a step (idle nodes ripen with time)."""
    for cluster_id in autoscaler.clusters():
        autoscale_cluster.delay(cluster_id)


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
