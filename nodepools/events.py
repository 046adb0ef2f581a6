"""Websocket events of node pools and claims, sent after commit through nvke.realtime to the tenant's and
the cluster's groups (the ws/events/ consumer forwards them)."""

from nvke.realtime import broadcast

from .models import Claim, Node, NodePool


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


def publish_claim(claim: Claim, type_: str = "claim.status", *, pool: int | None, **extra) -> None:
    """`pool`: where the claim is placed (or, pending, the pool it asks for), so a pool's pages follow
    only their own claims."""
    event = {
        "type": type_,
        "claim": claim.pk,
        "cluster": claim.cluster_id,
        "pool": pool,
        "namespace": claim.namespace,
        "name": claim.name,
        "status": claim.status,
        "reason": claim.pending_reason,
        **extra,
    }
    broadcast(claim.tenant_id, event, cluster_id=claim.cluster_id)
