"""GPU and node health from telemetry: a fatal XID takes a GPU out of service and moves only its
claims; a node whose heartbeats stop becomes NotReady (and Ready again when they resume); in the
simulator, a node silent past the repair timeout is replaced by a fresh one and its claims re-placed.

The provider learns each verdict after commit (`ClusterOperations.record_health`; the simulator keeps it,
since a pool's next sync copies the provider's view over the rows; a real cluster has its own agents) and
replaces silent nodes if it can (`Infrastructure.repair_node`)."""

from django.conf import settings
from django.db import transaction

from claims.allocator import evict_claims
from claims.models import Claim
from clusters.services import cluster_infrastructure, cluster_key, cluster_operations
from nodepools import nodes
from nodepools.models import Gpu, Node
from nodepools.services import reconcile

from . import events, store
from .models import TelemetryEvent


def fail_gpu(gpu_id: int, xid: int) -> list[int]:
    """Mark the GPU unhealthy (the allocator skips it from then on) and move its claims elsewhere, in
    one transaction. Returns the ids of the claims moved off it; idempotent."""
    gpu = Gpu.objects.select_related("node__pool__cluster").get(pk=gpu_id)
    cluster_id = gpu.node.pool.cluster_id
    with transaction.atomic():
        claim_ids = nodes.fail_gpu(gpu)
        if claim_ids is None:
            return []
        _tell_provider(gpu.node, failed_gpu=gpu.index)
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
    for node in Node.objects.filter(pk__in=node_ids, status=old).select_related("pool__cluster"):
        with transaction.atomic():
            if not nodes.set_ready(node, new == Node.Status.READY):
                continue
            _tell_provider(node, ready=new == Node.Status.READY)
            events.record(
                kind, tenant_id=node.tenant_id, cluster_id=node.pool.cluster_id, node=node, message=message
            )
        flipped.append(node.pk)
    return flipped


def repair_nodes(now: float) -> list[str]:
    """A NotReady node silent for TELEMETRY_NODE_REPAIR_S is replaced where the provider can (the
    simulator can): the node goes, the pool's reconcile creates a fresh one, drops the old row (its
    claims turn pending) and places the pending claims again. Returns the replaced nodes' names."""
    limit = settings.TELEMETRY_NODE_REPAIR_S
    due = [node for node, ts in store.heartbeats().items() if now - ts > limit]
    replaced = []
    for node in Node.objects.filter(pk__in=due, status=Node.Status.NOT_READY).select_related("pool__cluster"):
        infrastructure = cluster_infrastructure(node.pool.cluster)
        if not infrastructure.repair_node(cluster_key(node.pool.cluster), node.pool.name, node.name):
            continue
        with transaction.atomic():
            events.record(
                TelemetryEvent.Kind.NODE_REPLACED,
                tenant_id=node.tenant_id,
                cluster_id=node.pool.cluster_id,
                message=f"Node {node} was silent for over {limit} s: replaced; its claims are placed again.",
            )
        store.forget_node(node.pk)
        reconcile(node.pool_id)
        replaced.append(node.name)
    return replaced


def _tell_provider(node: Node, *, ready: bool | None = None, failed_gpu: int | None = None) -> None:
    """Hand the verdict to the provider once the transaction that reached it commits."""
    ops = cluster_operations(node.pool.cluster)
    transaction.on_commit(
        lambda: ops.record_health(node.name, ready=ready, failed_gpu=failed_gpu), robust=True
    )  # a refusal is logged; the verdict stays on the rows
