"""Websocket events of clusters, sent after commit through nvke.realtime to the tenant's and the
cluster's groups (the ws/events/ consumer in clusters.consumers forwards them)."""

from clusters.models import Cluster
from nvke.realtime import broadcast


def cluster_event(cluster: Cluster, type_: str = "cluster.status") -> dict:
    return {
        "type": type_,
        "cluster": cluster.pk,
        "name": cluster.name,
        "status": cluster.status,
        "reason": cluster.status_reason,
        "message": cluster.status_message,
    }


def publish_cluster(cluster: Cluster, type_: str = "cluster.status") -> None:
    broadcast(cluster.tenant_id, cluster_event(cluster, type_), cluster_id=cluster.pk)
