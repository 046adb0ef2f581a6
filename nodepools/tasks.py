from celery import shared_task

from clusters.models import Cluster

from . import services
from .models import NodePool


@shared_task(acks_late=True)
def reconcile_pool(pool_id: int) -> None:
    services.reconcile(pool_id)


@shared_task
def reconcile_all_pools() -> None:
    """Beat's resync: anything not settled gets another step (capacity may have freed up)."""
    from clusters.tasks import provision_cluster, teardown_cluster

    for cluster_id, status in Cluster.objects.exclude(status__in=["running", "failed"]).values_list(
        "pk", "status"
    ):
        (provision_cluster if status == "provisioning" else teardown_cluster).delay(cluster_id)
    for pool_id in NodePool.objects.exclude(status__in=["ready", "failed"]).values_list("pk", flat=True):
        reconcile_pool.delay(pool_id)
