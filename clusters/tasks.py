from celery import shared_task

from clusters import services
from clusters.models import Cluster
from nvke import tenant_slots


def tenant_of_cluster(cluster_id: int) -> int | None:
    """The tenant whose slot a task on this cluster takes (nvke/tenant_slots.py)."""
    return Cluster.objects.filter(pk=cluster_id).values_list("tenant_id", flat=True).first()


@shared_task(bind=True, acks_late=True)
@tenant_slots.limited(tenant_of_cluster)
def provision_cluster(self, cluster_id: int) -> None:
    services.provision(cluster_id)


@shared_task(bind=True, acks_late=True)
@tenant_slots.limited(tenant_of_cluster)
def teardown_cluster(self, cluster_id: int) -> None:
    services.teardown(cluster_id)
