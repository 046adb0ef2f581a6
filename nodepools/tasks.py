from celery import shared_task

from clusters.models import Cluster
from clusters.tasks import provision_cluster, teardown_cluster, tenant_of_cluster
from nodepools import autoscaler, services
from nodepools.models import NodePool
from nvke import tenant_slots


def tenant_of_pool(pool_id: int) -> int | None:
    return NodePool.objects.filter(pk=pool_id).values_list("tenant_id", flat=True).first()


@shared_task(bind=True, acks_late=True)
@tenant_slots.limited(tenant_of_pool)
def reconcile_pool(self, pool_id: int) -> None:
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


@shared_task(bind=True, acks_late=True)
@tenant_slots.limited(tenant_of_cluster)
def autoscale_cluster(self, cluster_id: int) -> None:
    """One step of the pool autoscaler for the cluster (idempotent: it reads what is, decides, records)."""
    autoscaler.autoscale(cluster_id)


@shared_task
def autoscale_all() -> None:
    """Beat's round: every cluster with an autoscaling pool gets a step (idle nodes ripen with time)."""
    for cluster_id in autoscaler.clusters():
        autoscale_cluster.delay(cluster_id)
