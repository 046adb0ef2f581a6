"""The autoscaler's control loop: one level-triggered step per cluster (`autoscale`; the task runs it
when a claim is left pending or a placement pass leaves some, and beat every NVKE_AUTOSCALER_INTERVAL_S).

One step, in three parts, as an upgrade tick:

1. outside any transaction, read the provider: how far the drain of each node being taken out is;
2. in one transaction holding the row locks of the cluster's autoscaling pools (in pk order, the lock a
   reconcile takes): carry each scale-down one step on (drained: node_count goes down by one and the
   pool's reconcile has the provider remove that node first; gone: done; not drained within
   NVKE_AUTOSCALER_DRAIN_TIMEOUT_S: back in service), note which nodes hold no claim, ask `decide` and
   carry out its decisions — node_count up and a reconcile; a node cordoned and its claims evicted, the
   way an upgrade drains one; a removal called off — recording each decision that differs from the
   pool's last (they are in the audit log, as the changes they make, under the actor `autoscaler`);
3. after commit, the provider calls recorded on the pools: drain the node being taken out, uncordon a
   node put back. A call lost in a crash is made again by the next step.

Quotas need no check here: a pool's quota counts its max_nodes, which the autoscaler never passes; the
region's inventory and fair share bound what it adds (`capacity.pool_room`)."""

import logging
from collections.abc import Callable

from django.conf import settings
from django.db import transaction
from django.db.models import Count, Prefetch, Q, QuerySet
from django.utils import timezone

from audit.context import acting_as
from catalog.models import MigProfile
from claims import allocator
from claims.models import Claim
from clusters.models import Cluster
from clusters.services import cluster_infrastructure, cluster_operations
from nodepools import capacity, nodes
from nodepools.autoscaler.decide import Action, IdleNode, Pending, PoolView, ScaleDecision, decide
from nodepools.events import publish_pool
from nodepools.models import AutoscalerDecision, Node, NodePool, ScaleDown
from nvke import jobs
from nvke.providers.base import DrainStatus, ProviderError

log = logging.getLogger(__name__)

DECISIONS_KEPT = 50  # per pool
PENDING_CONSIDERED = 1000  # per step: the highest priority and oldest first
# Apps that hold a pool's nodes for a while (upgrades: a node leaving a run fails it), by hold_scale_down.
HOLDS: list[Callable[[list[int]], dict[int, str]]] = []


def _pools(cluster_id: int) -> QuerySet[NodePool]:
    """The cluster's autoscaling pools, and any other still taking a node out (autoscaling turned off
    meanwhile): that node goes back into service."""
    profiles = Prefetch("gpu_model__mig_profiles", queryset=MigProfile.objects.all())
    return (
        NodePool.objects.filter(Q(autoscaling=True) | ~Q(scale_down_node=""), cluster_id=cluster_id)
        .exclude(status=NodePool.Status.DELETING)
        .select_related("gpu_model", "cluster__region")
        .prefetch_related(profiles)
    )


def clusters() -> list[int]:
    """Running clusters with a pool the autoscaler looks after, or one still taking a node out."""
    pools = NodePool.objects.filter(
        Q(autoscaling=True) | ~Q(scale_down_node=""), cluster__status=Cluster.Status.RUNNING
    )
    return sorted(set(pools.values_list("cluster_id", flat=True)))


def autoscale(cluster_id: int) -> dict[int, ScaleDecision]:
    """One step for the cluster's autoscaling pools; pool pk -> what was decided."""
    cluster = Cluster.objects.filter(pk=cluster_id, status=Cluster.Status.RUNNING).first()
    if cluster is None or not _pools(cluster_id).exists():
        return {}
    ops = cluster_operations(cluster)
    drains = {}
    for pool in _pools(cluster_id).filter(scale_down_phase=ScaleDown.DRAINING):
        try:
            drains[pool.pk] = ops.drain_status(pool.scale_down_node)
        except ProviderError as error:
            drains[pool.pk] = DrainStatus(done=False, reason=error.reason, message=error.message)
    can_remove = cluster_infrastructure(cluster).removes_chosen_nodes
    with transaction.atomic(), acting_as("autoscaler"):
        pools = list(_pools(cluster_id).select_for_update(of=("self",)).order_by("pk"))
        now = timezone.now()
        rows = _nodes(pools)
        moved = {
            pool.pk for pool in pools if _follow_scale_down(pool, rows[pool.pk], drains.get(pool.pk), now)
        }
        idle = {n.pk for pool_rows in rows.values() for n in pool_rows if n.claims == 0 and _in_service(n)}
        nodes.record_idle([pool.pk for pool in pools], idle, now)
        pools = [pool for pool in pools if pool.autoscaling]
        held = {pk: why for holds in HOLDS for pk, why in holds([pool.pk for pool in pools]).items()}
        views = [_view(pool, rows[pool.pk], idle, now, can_remove, held.get(pool.pk, "")) for pool in pools]
        decisions = decide(views, _pending(cluster_id))
        for pool in pools:
            if pool.pk not in moved:  # one move per pool and step
                _carry_out(pool, decisions[pool.pk], rows[pool.pk], now)
    _call_provider(ops, cluster_id)
    return decisions


def _nodes(pools: list[NodePool]) -> dict[int, list[Node]]:
    by_pool: dict[int, list[Node]] = {pool.pk: [] for pool in pools}
    for node in Node.objects.filter(pool__in=pools).annotate(claims=Count("allocations")).order_by("name"):
        by_pool[node.pool_id].append(node)
    return by_pool


def _in_service(node: Node) -> bool:
    return node.status == Node.Status.READY and not node.cordoned


def _view(pool: NodePool, rows: list[Node], idle: set[int], now, can_remove: bool, held: str) -> PoolView:
    room = capacity.pool_room(pool)
    return PoolView(
        id=pool.pk,
        shape=allocator.pool_shape(pool),
        node_count=pool.node_count,
        nodes=len(rows),
        min_nodes=pool.min_nodes,
        max_nodes=pool.max_nodes,
        scale_down_delay_s=pool.scale_down_delay_s,
        room=pool.max_nodes if room is None else room,
        exclusive=pool.sharing_mode == "exclusive",
        idle=tuple(
            IdleNode(n.name, (now - (n.idle_since or now)).total_seconds()) for n in rows if n.pk in idle
        ),
        removing=pool.scale_down_node,
        draining=pool.scale_down_phase == ScaleDown.DRAINING,
        can_remove_chosen=can_remove,
        held=held,
    )


def _pending(cluster_id: int) -> list[Pending]:
    """Claims the allocator tried and could not place (a claim queued but not yet tried is left to it)."""
    claims = (
        Claim.objects.filter(cluster_id=cluster_id, status=Claim.Status.PENDING)
        .exclude(pending_reason="")
        .order_by("-priority", "created_at")[:PENDING_CONSIDERED]
    )
    return [Pending(claim.pk, allocator.request_of(claim), claim.pool_id) for claim in claims]


def _follow_scale_down(pool: NodePool, rows: list[Node], drain: DrainStatus | None, now) -> bool:
    """Carry the pool's scale-down one step on, by what the provider and the rows say now; True when
    that was a move of its own (the step decides nothing else for the pool)."""
    phase, n = pool.scale_down_phase, pool.node_count
    node = next((row for row in rows if row.name == pool.scale_down_node), None)
    if not pool.scale_down_node or phase == ScaleDown.UNCORDONING:
        return False  # nothing, or the provider's uncordon is still to be made
    if node is None:  # removed: done
        pool.scale_down_node, pool.scale_down_phase, pool.scale_down_started_at = "", "", None
        pool.save()
        return False
    if phase == ScaleDown.REMOVING:
        if n < len(rows):
            return False  # the reconcile removes it
        _put_back(
            pool, node, "ScaleDownCancelled", f"The pool wants {n} nodes again: node {node.name} stays."
        )
    elif not pool.autoscaling:
        _put_back(pool, node, "AutoscalingOff", f"Autoscaling is off: node {node.name} stays.")
    elif drain is not None and drain.done and n > pool.min_nodes:
        pool.node_count, pool.scale_down_phase = n - 1, ScaleDown.REMOVING
        pool.status = NodePool.Status.SCALING
        pool.set_condition("Ready", False, "Scaling", f"Removing node {node.name}: {n - 1} nodes.")
        message = f"Node {node.name} is drained: {n} → {n - 1} nodes."
        _record(pool, Action.SCALE_DOWN, "NodeDrained", message, n, node=node.name)
        jobs.enqueue("nodepools.tasks.reconcile_pool", pool.pk)
    elif drain is not None and drain.done:
        _put_back(
            pool, node, "AtMinNodes", f"The pool is at min_nodes {pool.min_nodes}: node {node.name} stays."
        )
    elif (now - pool.scale_down_started_at).total_seconds() > settings.NVKE_AUTOSCALER_DRAIN_TIMEOUT_S:
        blocked = f" ({drain.reason}: {drain.message})" if drain is not None and drain.reason else ""
        limit = settings.NVKE_AUTOSCALER_DRAIN_TIMEOUT_S
        _put_back(
            pool,
            node,
            "DrainTimedOut",
            f"Node {node.name} did not drain within {limit:g} s{blocked}: it stays.",
        )
    else:
        return False  # still draining
    pool.save()
    publish_pool(pool)
    return True


def _put_back(pool: NodePool, node: Node, reason: str, message: str) -> None:
    nodes.set_cordons(pool.cluster_id, {node.pk: False})
    pool.scale_down_phase = ScaleDown.UNCORDONING
    _record(pool, Action.CANCEL_SCALE_DOWN, reason, message, pool.node_count, node=node.name)


def _carry_out(pool: NodePool, decision: ScaleDecision, rows: list[Node], now) -> None:
    if decision.action == Action.SCALE_UP:
        before = pool.node_count
        pool.node_count, pool.status = decision.to_nodes, NodePool.Status.SCALING
        pool.set_condition("Ready", False, "Scaling", f"Scaling to {pool.node_count} nodes.")
        _record(pool, decision.action, decision.reason, decision.message, before)
        jobs.enqueue("nodepools.tasks.reconcile_pool", pool.pk)
    elif decision.action == Action.SCALE_DOWN:
        node = next(n for n in rows if n.name == decision.node)
        nodes.set_cordons(pool.cluster_id, {node.pk: True})
        allocator.evict_node(pool.cluster_id, node.pk)  # none, normally: it held no claim
        pool.scale_down_node, pool.scale_down_phase = node.name, ScaleDown.DRAINING
        pool.scale_down_started_at = now
        _record(
            pool,
            decision.action,
            decision.reason,
            decision.message,
            pool.node_count,
            node.name,
            decision.to_nodes,
        )
    elif decision.action == Action.CANCEL_SCALE_DOWN:
        node = next(n for n in rows if n.name == decision.node)
        _put_back(pool, node, decision.reason, decision.message)
    elif not _same_as_last(pool, decision):
        _record(pool, decision.action, decision.reason, decision.message, pool.node_count, node=decision.node)
    else:
        return
    pool.save()
    publish_pool(pool)


def _same_as_last(pool: NodePool, decision: ScaleDecision) -> bool:
    last = pool.autoscaler_decisions.values_list("action", "reason", "to_nodes", "node").first()
    return last == (decision.action, decision.reason, decision.to_nodes, decision.node)


def _record(
    pool: NodePool, action: str, reason: str, message: str, before: int, node: str = "", to: int | None = None
) -> None:
    """A decision for the pool's page, the API and the audit log (`to`: the node count it leads to, by
    default the pool's now); the pool's Autoscaling condition says the newest (True while it acts)."""
    AutoscalerDecision.objects.create(
        tenant_id=pool.tenant_id,
        pool=pool,
        action=action,
        reason=reason,
        message=message,
        from_nodes=before,
        to_nodes=pool.node_count if to is None else to,
        node=node,
    )
    pool.set_condition("Autoscaling", action != Action.NONE, reason, message)
    stale = pool.autoscaler_decisions.values_list("pk", flat=True)[DECISIONS_KEPT:]
    AutoscalerDecision.objects.filter(pk__in=list(stale)).delete()


def _call_provider(ops, cluster_id: int) -> None:
    """After commit: drain the node each pool is taking out; uncordon one put back (then done)."""
    pools = NodePool.objects.filter(cluster_id=cluster_id).exclude(scale_down_node="")
    for pk, node, phase in pools.values_list("pk", "scale_down_node", "scale_down_phase"):
        try:
            if phase == ScaleDown.DRAINING:
                ops.drain(node)
            elif phase == ScaleDown.UNCORDONING:
                ops.uncordon(node)
                NodePool.objects.filter(pk=pk, scale_down_node=node, scale_down_phase=phase).update(
                    scale_down_node="", scale_down_phase="", scale_down_started_at=None
                )
                jobs.enqueue("nodepools.tasks.reconcile_pool", pk)  # the rows follow the provider's node
        except ProviderError as error:  # the next step calls again
            log.warning("autoscaler: %s of %s refused: %s %s", phase, node, error.reason, error.message)
