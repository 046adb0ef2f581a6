"""The one way sync code reaches websockets: after the transaction commits, to tenant groups.

Groups: `tenant-<id>` (fleet views) and `tenant-<id>.cluster-<id>` (a cluster's pages)."""

from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer
from django.db import transaction


def tenant_group(tenant_id: int) -> str:
    return f"tenant-{tenant_id}"


def cluster_group(tenant_id: int, cluster_id: int) -> str:
    return f"tenant-{tenant_id}.cluster-{cluster_id}"


def broadcast(tenant_id: int, event: dict, cluster_id: int | None = None) -> None:
    """Send `event` to the tenant's group (and the cluster's) once the current transaction commits."""
    groups = [tenant_group(tenant_id)]
    if cluster_id is not None:
        groups.append(cluster_group(tenant_id, cluster_id))

    def send() -> None:
        layer = get_channel_layer()
        for group in groups:
            async_to_sync(layer.group_send)(group, {"type": "nvke.event", "event": event})

    transaction.on_commit(send)
