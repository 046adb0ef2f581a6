"""Websocket events of node pools, sent after commit through nvke.realtime to the tenant's and
the cluster's groups (the ws/events/ consumer forwards them)."""

from nodepools.models import Node, NodePool
from nvke.realtime import broadcast


def pool_event(pool: NodePool, type_: str = "pool.status") -> dict:
    return {
        "type": type_,
        "pool": pool.pk,
        "cluster": pool.cluster_id,
        "name": pool.name,
        "status": pool.status,
        "reason": pool.status_reason,
        "message": pool.status_message,
        "nodes": pool.nodes.filter(status=Node.Status.READY).count() if pool.pk else 0,  # ready nodes
        "node_count": pool.node_count,
    }


def publish_pool(pool: NodePool, type_: str = "pool.status") -> None:
    broadcast(pool.tenant_id, pool_event(pool, type_), cluster_id=pool.cluster_id)
