from celery import shared_task

from clusters import services


@shared_task(acks_late=True)
def provision_cluster(cluster_id: int) -> None:
    services.provision(cluster_id)


@shared_task(acks_late=True)
def teardown_cluster(cluster_id: int) -> None:
    services.teardown(cluster_id)
