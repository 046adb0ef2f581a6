"""GPU and node health from telemetry: a fatal XID takes a GPU out of service and moves only its
claims; a node whose heartbeats stop becomes NotReady (and Ready again when they resume)."""

from django.conf import settings
from django.db import transaction

from nodepools.claims import evict_claims, topology_changed
from nodepools.models import Claim, Gpu, Node

from . import events, store
from .models import TelemetryEvent


def fail_gpu(gpu_id: int, xid: int) -> list[int]:
    """Mark the GPU unhealthy (the allocator skips it from then on) and move its claims elsewhere, in
    one transaction. Returns the ids of the claims moved off it; idempotent."""
    gpu = Gpu.objects.select_related("node__pool").get(pk=gpu_id)
    cluster_id = gpu.node.pool.cluster_id
    with transaction.atomic():
        if not Gpu.objects.filter(pk=gpu_id, healthy=True).update(healthy=False):
            return []
        topology_changed(cluster_id)
        claim_ids = list(
            Claim.objects.filter(allocation__shares__gpu_id=gpu_id).values_list("pk", flat=True).distinct()
        )
        events.record(
            TelemetryEvent.Kind.GPU_UNHEALTHY,
            tenant_id=gpu.tenant_id,
            cluster_id=cluster_id,
            gpu=gpu,
            node_id=gpu.node_id,
            message=f"XID {xid} on {gpu}: marked unhealthy; moving {len(claim_ids)} claim(s).",
        )
        if claim_ids:
            evict_claims(cluster_id, claim_ids)
        for claim in Claim.objects.filter(pk__in=claim_ids).select_related("allocation__node"):
            where = (
                f"to {claim.allocation.node}"
                if claim.status == Claim.Status.ALLOCATED
                else f"to pending: {claim.pending_reason}"
            )
            events.record(
                TelemetryEvent.Kind.MOVED,
                tenant_id=claim.tenant_id,
                cluster_id=cluster_id,
                claim=claim,
                gpu=gpu,
                message=f"Claim {claim} moved off failed {gpu} {where}",
            )
    return claim_ids


def check_heartbeats(now: float) -> tuple[list[int], list[int]]:
    """Nodes that have reported before and went quiet past the limit become NotReady; those that report
    again become Ready. Returns (not ready, ready again) node ids."""
    beats = store.heartbeats()
    limit = settings.TELEMETRY_NODE_NOT_READY_S
    stale = [node for node, ts in beats.items() if now - ts > limit]
    fresh = [node for node, ts in beats.items() if now - ts <= limit]
    lost = _flip(stale, Node.Status.READY, Node.Status.NOT_READY, f"No heartbeat for over {limit} s.")
    back = _flip(fresh, Node.Status.NOT_READY, Node.Status.READY, "Heartbeats resumed.")
    return lost, back


def _flip(node_ids: list[int], old: str, new: str, message: str) -> list[int]:
    flipped = []
    kind = (
        TelemetryEvent.Kind.NODE_NOT_READY if new == Node.Status.NOT_READY else TelemetryEvent.Kind.NODE_READY
    )
    for node in Node.objects.filter(pk__in=node_ids, status=old).select_related("pool"):
        with transaction.atomic():
            if not Node.objects.filter(pk=node.pk, status=old).update(status=new):
                continue
            topology_changed(node.pool.cluster_id)
            events.record(
                kind, tenant_id=node.tenant_id, cluster_id=node.pool.cluster_id, node=node, message=message
            )
        flipped.append(node.pk)
    return flipped
