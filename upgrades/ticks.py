"""One tick of an upgrade run: lock the run, observe its nodes, ask the pure machine for at most one
step per node, carry the steps out through the provider and the allocator, record them, and hand back
the number of the next tick (None when the run has settled).

Crash safety: everything a tick writes, the simulator's effects included, commits together or not at
all. Provider operations are idempotent, so a tick that died after an operation and before its commit
simply repeats it. The run's row lock and `tick_seq` make sure two workers never advance a run twice."""

import datetime
import threading
from collections import Counter
from dataclasses import replace

from django.db import transaction
from django.utils import timezone

from clusters.services import cluster_key
from nodepools import claims as allocator
from nodepools.models import Allocation, Claim, Gpu, Node, NodePool
from nodepools.tasks import request_placement
from nvke import jobs
from nvke.providers import get_provider
from nvke.providers.base import Provider, ProviderError

from . import events
from .machine import (
    ACTIVE,
    LIVE,
    Effect,
    FailedNodes,
    NodeView,
    Phase,
    RunView,
    State,
    Strategy,
    keeps_cordoned,
    kept_message,
    plan,
)
from .models import UpgradeCondition, UpgradeNode, UpgradeRun


def _ts(value: datetime.datetime | None) -> float | None:
    return value.timestamp() if value else None


def strategy_of(run: UpgradeRun, nodes: int) -> Strategy:
    return Strategy(
        max_unavailable=run.max_unavailable_of(nodes),
        canary=run.canary_nodes,
        canary_bake_s=run.canary_bake_s,
        canary_approval=run.canary_approval,
        drain_timeout_s=run.drain_timeout_s,
        validation_timeout_s=run.validation_timeout_s,
        failure_budget=run.failure_budget,
        failed_nodes=FailedNodes(run.failed_nodes),
    )


class _Writes(threading.local):
    """A tick's node-row updates and history rows, written in two statements instead of two per step.
    Per thread: the embedded default ticks several runs on their own timer threads."""

    def __init__(self) -> None:
        self.reset()

    def reset(self) -> None:
        self.rows: dict[int, UpgradeNode] = {}
        self.conditions: list[UpgradeCondition] = []

    def flush(self) -> None:
        UpgradeNode.objects.bulk_update(
            self.rows.values(), ["state", "entered_at", "reason", "message", "driver_touched"]
        )
        UpgradeCondition.objects.bulk_create(self.conditions)
        self.reset()


_writes = _Writes()


def _observe(
    row: UpgradeNode, node: Node | None, claims: int, unhealthy: set[str], provider: Provider, key: str
) -> NodeView:
    view = NodeView(
        name=row.name,
        state=State(row.state),
        entered_at=row.entered_at.timestamp(),
        canary=row.canary,
        pre_cordoned=row.pre_cordoned,
        cordoned=node.cordoned if node else False,
        ready=node.status == Node.Status.READY if node else False,
        claims=claims,
        driver_version=node.driver_version if node else "",
        gpus_healthy=node is not None and node.name not in unhealthy,
        driver_touched=row.driver_touched,
        returned=row.returned_at is not None,
    )
    if node is None or view.state not in ACTIVE:
        return view  # only nodes in flight cost a provider call
    status = provider.driver_status(key, node.name)
    return replace(
        view,
        busy=status.busy,
        driver_version=status.version,
        gpus_healthy=status.gpus_healthy,
        ready=status.ready and view.ready,
        install_failure=status.failure if view.state == State.VALIDATION_REQUIRED else "",
    )


def _mirror(node: Node, provider: Provider, key: str) -> bool:
    """Copy the provider's driver version and GPU health onto the rows; True when health changed."""
    status = provider.driver_status(key, node.name)
    if node.driver_version != status.version:
        Node.objects.filter(pk=node.pk).update(driver_version=status.version)
    changed = False
    if not status.gpus_healthy and all(gpu.healthy for gpu in node.gpus.all()):
        Gpu.objects.filter(node=node).update(healthy=False)  # the simulator cannot tell which one
        changed = True
    return changed


def tick(run_id: int, seq: int) -> int | None:
    """Advance the run by one tick if `seq` is its current tick number."""
    with transaction.atomic():
        run = (
            UpgradeRun.objects.select_for_update(of=("self",))
            .select_related("pool__cluster", "target_release")
            .filter(pk=run_id)
            .first()
        )
        if run is None or run.tick_seq != seq or run.status not in LIVE:
            return None  # another chain owns the run, or it has settled
        now = timezone.now()
        _writes.reset()  # nothing left over from a tick that failed in this thread
        pool = run.pool
        key = cluster_key(pool.cluster)
        provider = get_provider()
        rows = list(run.nodes.select_for_update().order_by("pk"))
        nodes = {n.name: n for n in Node.objects.filter(pool=pool)}
        claims = Counter(Allocation.objects.filter(node__pool=pool).values_list("node__name", flat=True))
        unhealthy = set(
            Gpu.objects.filter(node__pool=pool, healthy=False).values_list("node__name", flat=True)
        )
        rows += _join_new_nodes(run, rows, nodes, now)
        for row in rows:  # a node scaled away mid-run cannot finish
            if row.name not in nodes and row.state not in (State.DONE, State.FAILED):
                _record(run, row, State.FAILED, "NodeGone", "The node left the pool during the run.", now)
        views = [
            _observe(row, nodes.get(row.name), claims[row.name], unhealthy, provider, key) for row in rows
        ]
        strategy = strategy_of(run, len(rows))
        result = plan(
            RunView(
                phase=Phase(run.status),
                target_version=run.target_release.version,
                canary_done_at=_ts(run.canary_done_at),
                approved=run.approved_at is not None,
                failed_accepted=run.failed_accepted,
            ),
            views,
            strategy,
            now.timestamp(),
        )
        by_name = {row.name: row for row in rows}
        carried_out = _carry_out(run, result.steps, by_name, nodes, provider, key, now)
        _writes.flush()

        if result.canary_done_at is not None and run.canary_done_at is None:
            run.canary_done_at = datetime.datetime.fromtimestamp(result.canary_done_at, tz=datetime.UTC)
        if result.phase != run.status and carried_out:  # else the next tick decides from what happened
            _set_status(run, result.phase, result.reason, result.message, now)
        elif (
            run.status == Phase.RUNNING and result.reason in ("", "Blocked") and result.message != run.message
        ):
            # A running run's progress; a paused run keeps saying why it paused while its last nodes finish.
            run.reason, run.message = result.reason, result.message
        observed = [nodes.get(r.name) for r in rows]
        run.max_unavailable_seen = max(
            run.max_unavailable_seen,
            sum(
                1
                for r, n in zip(rows, observed, strict=True)
                if r.state in ACTIVE or n is None or n.cordoned or n.status != Node.Status.READY
            ),
        )
        run.tick_seq += 1
        run.ticked_at = now
        run.save()
        events.publish_run(run, Counter(r.state for r in rows))
        idle = run.status == Phase.PAUSED and not any(r.state in ACTIVE for r in rows)
        return run.tick_seq if run.status in LIVE and not idle else None  # resume re-queues a paused run


def _join_new_nodes(
    run: UpgradeRun, rows: list[UpgradeNode], nodes: dict[str, Node], now
) -> list[UpgradeNode]:
    """Nodes the pool gained since the run started (a scale-up) join it, unless they already run the
    target: they came up on the release the pool had then."""
    known = {row.name for row in rows}
    joined = [
        UpgradeNode(
            run=run,
            node=node,
            name=node.name,
            state=State.UPGRADE_REQUIRED,
            reason="JoinedPool",
            entered_at=now,
            pre_cordoned=node.cordoned,
            from_version=node.driver_version,
        )
        for name, node in sorted(nodes.items())
        if name not in known
        and node.driver_version != run.target_release.version
        and run.status != Phase.ABORTING
    ]
    UpgradeNode.objects.bulk_create(joined)
    for row in joined:
        _writes.conditions.append(
            UpgradeCondition(
                run=run, node=row.name, type="NodeState", reason="JoinedPool", message="New node."
            )
        )
    return joined


def _carry_out(run, steps, rows, nodes, provider, key, now) -> bool:
    """Cordons and uncordons first, then one topology reset (so evictions cannot land back on a
    cordoned node), then evictions and installs. False when a provider call failed: the plan's view
    of the run's phase no longer holds."""
    cluster_id = run.pool.cluster_id
    all_done = True
    first = [s for s in steps if s.effect in (Effect.CORDON, Effect.UNCORDON)]
    topology = False
    for step in first + [s for s in steps if s not in first]:
        row, node = rows[step.node], nodes.get(step.node)
        message = step.message
        try:
            if step.effect in (Effect.CORDON, Effect.UNCORDON):
                _set_cordon(node, step.effect == Effect.CORDON, provider, key)
            elif step.effect == Effect.EVICT:
                if topology:
                    allocator.topology_changed(cluster_id)
                    topology = False
                message = _evict(run, node, provider, key)
            elif step.effect == Effect.INSTALL:
                row.driver_touched = True  # even if the call fails: the old driver may be gone
                provider.install_driver(key, step.node, run.target_release.version)
        except ProviderError as error:
            if step.effect in (Effect.CORDON, Effect.INSTALL):  # cannot go on: the node fails
                _fail_after_error(run, row, node, provider, key, error, now)
            else:  # evictions retry until the drain timeout; an uncordon retries until it works
                _note(run, row, error.reason, error.message)
            topology, all_done = True, False
            continue
        if step.effect in (Effect.CORDON, Effect.UNCORDON):
            topology = True
        if step.to in (State.UNCORDON_REQUIRED, State.FAILED) and node is not None:
            topology |= _mirror(node, provider, key)
        _record(run, row, step.to, step.reason, message, now)
    if topology:
        allocator.topology_changed(cluster_id)
    if any(s.effect == Effect.UNCORDON for s in steps):  # capacity is back: one placement pass
        request_placement(cluster_id)
    return all_done


def _set_cordon(node: Node, cordon: bool, provider: Provider, key: str) -> None:
    (provider.cordon if cordon else provider.uncordon)(key, node.name)
    Node.objects.filter(pk=node.pk).update(cordoned=cordon)
    node.cordoned = cordon


def _evict(run: UpgradeRun, node: Node, provider: Provider, key: str) -> str:
    """Evict the node's claims (the eviction API on a real cluster), then let the allocator re-place
    them elsewhere or leave them pending with the reason."""
    claims = list(Claim.objects.filter(allocation__node=node).values_list("pk", "namespace", "name"))
    for _, namespace, name in claims:
        provider.evict(key, node.name, namespace, name)
    if not claims:
        return "No claims on the node."
    placed = allocator.evict_claims(run.pool.cluster_id, [pk for pk, _, _ in claims])
    return f"Evicted {len(claims)} claims: {placed} placed elsewhere, {len(claims) - placed} pending."


def _fail_after_error(run, row, node, provider, key, error: ProviderError, now) -> None:
    """A cordon or install the provider refused: the node fails, back in service unless its driver
    was touched (and the run keeps such nodes cordoned)."""
    if (
        node is not None
        and node.cordoned
        and keeps_cordoned(FailedNodes(run.failed_nodes), row.driver_touched)
    ):
        _record(run, row, State.FAILED, error.reason, kept_message(error.message), now)
        return
    if node is not None and node.cordoned and not row.pre_cordoned:
        try:
            _set_cordon(node, False, provider, key)
            request_placement(run.pool.cluster_id)
        except ProviderError:
            pass  # the failed state uncordons on every tick until it works
    _record(run, row, State.FAILED, error.reason, error.message, now)


def _note(run: UpgradeRun, row: UpgradeNode, reason: str, message: str) -> None:
    row.reason, row.message = reason, message
    _writes.rows[row.pk] = row
    _writes.conditions.append(
        UpgradeCondition(run=run, node=row.name, type="NodeRetry", reason=reason, message=message)
    )
    events.publish_node(run, row)


def _record(run, row: UpgradeNode, state: State, reason: str, message: str, now) -> None:
    changed = row.state != state
    if changed:
        row.entered_at = now
        _writes.conditions.append(
            UpgradeCondition(
                run=run,
                node=row.name,
                type="NodeState",
                reason=reason,
                message=f"{row.state} → {state}" + (f": {message}" if message else ""),
            )
        )
    row.state, row.reason, row.message = state, reason, message
    if state == State.UNCORDON_REQUIRED:
        row.driver_touched = False  # validated: its driver is trusted again
    _writes.rows[row.pk] = row
    if changed:
        events.publish_node(run, row)


def _set_status(run: UpgradeRun, status: str, reason: str, message: str, now) -> None:
    """A run-level transition, recorded in the history; a completed run moves the pool's release."""
    run.status, run.reason, run.message = status, reason, message
    UpgradeCondition.objects.create(
        run=run, type="Run", reason=reason or status.title(), message=message or status
    )
    if status in (Phase.COMPLETED, Phase.FAILED, Phase.ABORTED):
        run.finished_at = now
    if status == Phase.COMPLETED:
        NodePool.objects.filter(pk=run.pool_id).update(driver_release=run.target_release)
    if run.rollout_id and status in (Phase.COMPLETED, Phase.FAILED, Phase.PAUSED):
        jobs.enqueue("upgrades.tasks.advance_rollout", run.rollout_id)
