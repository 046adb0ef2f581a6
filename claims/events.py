"""Websocket events of claims, sent after commit through nvke.realtime to the tenant's and the cluster's
groups (the ws/events/ consumer forwards them)."""

from claims.models import Claim
from nvke.realtime import broadcast


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
