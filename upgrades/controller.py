"""The controller of upgrade runs: how a run's next tick gets going, what one tick does, and the
provider calls it makes after commit. Celery's entry points (tasks.py) call it; it never imports
them: it queues its own ticks and tells rollouts by task name (nvke.jobs).

Scheduling. With a broker, the next tick is the Celery task re-queued with a countdown; in the
embedded default (eager tasks, no broker, no beat) a self-requeueing task would recurse, so a daemon
timer thread in this process runs the ticks instead. Beat's resync (tasks.resync_runs) restarts a
chain that was lost.

One tick, in three parts:

1. read the provider (driver, or kubelet, and drain status of the nodes in flight: what the run moves
   is its targets.Target), outside any transaction;
2. in one transaction holding the run's row lock: observe the rows, ask the pure machine for at most one
   step per node, carry the steps out in the control plane (cordon flags, the allocator's evictions) and
   record on each node's row what the provider must do (`cordon_wanted`, `drain_wanted`,
   `driver_wanted`), with the node states and history: the tick's TickWrites collects these and writes
   them in a few statements at its end;
3. after commit, `call_provider` makes the recorded calls; each call accepted clears its intent, a
   refused one is recorded on the row for the next tick (a refused cordon or install fails the node, a
   refused uncordon or drain is retried).

Every phase change of a run, a tick's or an operator's control (services.control), is a row of
run_lifecycle.LIFECYCLE, recorded by `enter`.

Crash safety: the transaction commits the decision and the intent together or not at all; a crash after
the commit leaves the intent, and the next tick (the chain's or beat's resync) makes the call again. Calls
are idempotent. A run does not end while an intent is outstanding. The run's row lock and `tick_seq`
make sure two workers never advance a run twice."""

import datetime
import logging
import threading
from collections import Counter
from dataclasses import dataclass, replace

from django.conf import settings
from django.db import close_old_connections, connection, transaction
from django.db.models import Q
from django.utils import timezone

from claims import allocator
from claims.models import Allocation
from clusters.services import cluster_operations
from nodepools import nodes as node_rows
from nodepools.models import Gpu, Node, NodePool
from nvke import jobs
from nvke.celery import app as celery_app
from nvke.providers.base import ClusterOperations, DrainStatus, DriverStatus, ProviderError

from . import deferral, events, maintenance
from .models import UpgradeCondition, UpgradeNode, UpgradeRun
from .node_machine import (
    ACTIVE,
    Effect,
    NodeView,
    RunView,
    State,
    keeps_cordoned,
    kept_message,
    nodes_text,
    plan,
)
from .run_lifecycle import FINISHED, LIVE, LifecycleMove, Phase, tick_move
from .strategy import STRATEGY_FIELDS, FailedNodes, Strategy
from .targets import DriverTarget, target_of

log = logging.getLogger(__name__)
PROGRESS_REASONS = ("", "Blocked", "OutsideWindow")  # a running run's progress, not a phase change


# --- scheduling ------------------------------------------------------------------------------------


def schedule_tick(run_id: int, seq: int, countdown: float | None = None) -> None:
    """Run tick `seq` of the run after `countdown` seconds (default NVKE_UPGRADE_TICK_S)."""
    delay = settings.NVKE_UPGRADE_TICK_S if countdown is None else countdown
    if celery_app.conf.task_always_eager:
        timer = threading.Timer(delay, _tick_in_thread, args=(run_id, seq))
        timer.daemon = True
        timer.name = f"nvke-upgrade-{run_id}"
        timer.start()
        return
    jobs.task("upgrades.tasks.tick_run").apply_async((run_id, seq), countdown=delay)


def stale_before() -> datetime.datetime:
    """A live run not ticked since then has lost its chain of ticks."""
    return timezone.now() - datetime.timedelta(seconds=max(5 * settings.NVKE_UPGRADE_TICK_S, 5))


def kick_if_stale(run) -> None:
    """Embedded default only (no beat): a live run whose ticks stopped, because the process restarted,
    gets a ticker again when someone looks at it."""
    if celery_app.conf.task_always_eager and run.status in LIVE:
        if run.ticked_at is None or run.ticked_at < stale_before():
            schedule_tick(run.pk, run.tick_seq, 0)


def _tick_in_thread(run_id: int, seq: int) -> None:
    close_old_connections()
    try:
        next_seq = tick(run_id, seq)
    except Exception:
        log.exception("upgrade run %s: tick %s failed; retrying", run_id, seq)
        next_seq = seq
    finally:
        connection.close()
    if next_seq is not None:
        schedule_tick(run_id, next_seq)


# --- one tick -------------------------------------------------------------------------------------


def _ts(value: datetime.datetime | None) -> float | None:
    return value.timestamp() if value else None


def strategy_of(run: UpgradeRun, nodes: int) -> Strategy:
    return Strategy.of({spec.name: getattr(run, spec.name) for spec in STRATEGY_FIELDS}, nodes)


class TickWrites:
    """One tick's node-row updates and history rows, written in two statements instead of two per step.
    The tick's transaction (_decide) makes one and hands it to every function that records something;
    nothing is shared between ticks, so runs ticking on their own timer threads cannot mix their writes."""

    def __init__(self) -> None:
        self.rows: dict[int, UpgradeNode] = {}
        self.intents: dict[int, UpgradeNode] = {}  # rows whose provider intent changed (fewer: cheaper)
        self.conditions: list[UpgradeCondition] = []

    def flush(self) -> dict[str, str]:
        """Write it all; the state of every row written, by node name (what the provider mirrors)."""
        states = {row.name: row.state for row in self.rows.values()}
        UpgradeNode.objects.bulk_update(
            self.rows.values(), ["name", "node", "state", "entered_at", "reason", "message", "driver_touched"]
        )
        UpgradeNode.objects.bulk_update(
            self.intents.values(), ["cordon_wanted", "drain_wanted", "driver_wanted", "call_error"]
        )
        UpgradeCondition.objects.bulk_create(self.conditions)
        return states


@dataclass(frozen=True)
class Seen:
    """What the provider said about one node in flight, read before the tick's transaction."""

    driver: DriverStatus
    drain: DrainStatus | None = None  # read only while a drain is wanted


DRAINING = frozenset({State.POD_DELETION_REQUIRED, State.DRAIN_REQUIRED})
RETRIED = frozenset({"uncordon", "drain"})  # refused, these are called again; a cordon or install fails
# Refusals no retry can get past: a pod covered by several PodDisruptionBudgets is never evicted.
HOPELESS = frozenset({"EvictionMisconfigured"})


def _outstanding(row: UpgradeNode) -> bool:
    return row.cordon_wanted is not None or row.drain_wanted or bool(row.driver_wanted)


def read_provider(ops: ClusterOperations, run: UpgradeRun) -> dict[str, Seen]:
    """The driver or kubelet (and, while wanted, drain) status of the run's nodes in flight. A node the
    provider cannot report on is left out: the tick treats it as busy."""
    seen, target = {}, target_of(run)
    rows = UpgradeNode.objects.filter(run_id=run.pk, state__in=list(ACTIVE))
    for name, drain_wanted in rows.values_list("name", "drain_wanted"):
        try:
            seen[name] = Seen(target.status(ops, name), ops.drain_status(name) if drain_wanted else None)
        except ProviderError:
            continue
    return seen


def _observe(
    writes: TickWrites,
    row: UpgradeNode,
    node: Node | None,
    claims: int,
    unhealthy: set[str],
    seen: Seen | None,
    deferred: dict[str, str],
    target: DriverTarget,
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
        driver_version=target.node_version(node) if node else "",
        gpus_healthy=node is not None and node.name not in unhealthy,
        driver_touched=row.driver_touched,
        returned=row.returned_at is not None,
        deferred_by=deferred.get(row.name, ""),
        retire=row.retire,
        gone=node is None,
    )
    if node is None and _replacing(row, seen):
        return replace(view, busy=True)
    if node is None or view.state not in ACTIVE:
        return view  # only nodes in flight cost a provider call
    if seen is None:
        return replace(view, busy=True)  # it started moving after the provider was read: next tick
    status, drain = seen.driver, seen.drain
    # A cordon or install the provider has not accepted yet keeps the node waiting, as one still running.
    busy = status.busy or row.cordon_wanted is True or bool(row.driver_wanted)
    if row.drain_wanted and drain is not None:
        if drain.done:
            row.drain_wanted = False
            writes.intents[row.pk] = row
        elif drain.blocked:  # pods a budget keeps there count as claims: the drain timeout applies
            claims += max(drain.pods_left, 1)
        else:
            busy = True
    return replace(
        view,
        busy=busy,
        claims=claims,
        driver_version=target.comparable(status.version),
        gpus_healthy=status.gpus_healthy,
        ready=status.ready and view.ready,
        install_failure=status.failure if view.state == State.VALIDATION_REQUIRED else "",
    )


def tick(run_id: int, seq: int) -> int | None:
    """Advance the run by one tick if `seq` is its current tick number, then make the provider calls
    its nodes' rows ask for."""
    run = UpgradeRun.objects.select_related("pool__cluster").filter(pk=run_id).first()
    if run is None or run.tick_seq != seq or run.status not in LIVE:
        return None  # another chain owns the run, or it has settled
    ops = cluster_operations(run.pool.cluster)
    ticked, next_seq, states = _decide(run_id, seq, read_provider(ops, run))
    if ticked:
        call_provider(ops, run)
        for node, state in states.items():
            try:
                ops.report_upgrade_state(node, state)
            except ProviderError as error:  # for people watching; the next step's report makes up for it
                log.warning("upgrade run %s: %s's state not mirrored: %s", run_id, node, error.message)
    return next_seq


def _decide(run_id: int, seq: int, seen: dict[str, Seen]) -> tuple[bool, int | None, dict[str, str]]:
    """The tick's transaction: (whether it ran, the next tick's number or None, the states of the node
    rows it wrote)."""
    with transaction.atomic():
        run = (
            UpgradeRun.objects.select_for_update(of=("self",))
            .select_related("pool__cluster", "target_release")
            .filter(pk=run_id)
            .first()
        )
        if run is None or run.tick_seq != seq or run.status not in LIVE:
            return False, None, {}  # another chain ticked it while the provider was read
        now = timezone.now()
        writes = TickWrites()
        pool = run.pool
        rows = list(run.nodes.select_for_update().order_by("pk"))
        nodes = {n.name: n for n in Node.objects.filter(pool=pool)}
        claims = Counter(Allocation.objects.filter(node__pool=pool).values_list("node__name", flat=True))
        unhealthy = set(
            Gpu.objects.filter(node__pool=pool, healthy=False).values_list("node__name", flat=True)
        )
        target = target_of(run)
        _follow_replacements(writes, run, rows, nodes, seen)
        rows += _join_new_nodes(writes, run, target, rows, nodes, now)
        for row in (r for r in rows if r.name not in nodes):
            if _replacing(row, seen.get(row.name)) or (row.retire and row.state == State.VALIDATION_REQUIRED):
                continue  # its machine is being replaced (or removed); a successor has not joined yet
            if row.state not in (State.DONE, State.FAILED):  # a node scaled away mid-run cannot finish
                _record(
                    writes, run, row, State.FAILED, "NodeGone", "The node left the pool during the run.", now
                )
            if _outstanding(row) or row.call_error:  # nothing left to call on
                row.cordon_wanted, row.drain_wanted, row.driver_wanted, row.call_error = None, False, "", {}
                writes.intents[row.pk] = row
        refused = _take_refusals(writes, run, rows, nodes, now)
        strategy = strategy_of(run, sum(not r.retire for r in rows))
        window_open, window_message = maintenance.run_window(run)
        surge, surge_ready = _surge(writes, run, target, strategy, rows, nodes, window_open, now)
        policy = deferral.policy_of(pool.pk)
        deferred = deferral.holding(pool.pk, policy, now)
        views = [
            _observe(
                writes,
                row,
                nodes.get(row.name),
                claims[row.name],
                unhealthy,
                seen.get(row.name),
                deferred,
                target,
            )
            for row in rows
        ]
        result = plan(
            RunView(
                phase=Phase(run.status),
                target_version=target.version,
                what=target.what,
                canary_done_at=_ts(run.canary_done_at),
                approved=run.approved_at is not None,
                failed_accepted=run.failed_accepted,
                window_open=window_open,
                window_message=window_message,
                deferral_deadline_s=policy.deadline_s if policy else 0.0,
                deferral_stops=policy is not None and policy.after_deadline == policy.AfterDeadline.STOP,
                surge=surge,
                surge_ready=surge_ready,
            ),
            views,
            strategy,
            now.timestamp(),
        )
        by_name = {row.name: row for row in rows}
        _carry_out(writes, run, target, result.steps, by_name, nodes, seen, now)
        states = writes.flush()

        if result.canary_done_at is not None and run.canary_done_at is None:
            run.canary_done_at = datetime.datetime.fromtimestamp(result.canary_done_at, tz=datetime.UTC)
        # A run ends only once the provider accepted every call it asked for (the next tick sees it).
        outstanding = any(_outstanding(r) for r in rows)
        if result.phase != run.status and not refused and not (result.phase in FINISHED and outstanding):
            _set_status(run, result.phase, result.reason, result.message, now)
        elif (
            run.status == Phase.RUNNING
            and result.reason in PROGRESS_REASONS
            and result.message != run.message
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
        idle = run.status == Phase.PAUSED and not any(r.state in ACTIVE or _outstanding(r) for r in rows)
        if run.status in LIVE and not idle:
            return True, run.tick_seq, states
        return True, None, states  # settled; resume re-queues a paused run


def call_provider(ops: ClusterOperations, run: UpgradeRun) -> None:
    """Make the calls the run's rows ask for, outside any transaction. An accepted cordon, uncordon or
    install clears its intent (a drain's is cleared by the tick that sees it finished); a refusal is
    kept on the row for the next tick. A cordon or install refused already waits for that tick."""
    target = target_of(run)
    rows = UpgradeNode.objects.filter(run_id=run.pk).filter(
        Q(cordon_wanted__isnull=False) | Q(drain_wanted=True) | ~Q(driver_wanted="")
    )
    accepted: dict[str, list[int]] = {"cordon": [], "uncordon": [], "install": []}
    for row in rows.order_by("pk"):
        if row.call_error and row.call_error["call"] not in RETRIED:
            continue
        call = ""
        try:
            if row.cordon_wanted is not None:
                call = "cordon" if row.cordon_wanted else "uncordon"
                (ops.cordon if row.cordon_wanted else ops.uncordon)(row.name)
                accepted[call].append(row.pk)
            if row.drain_wanted:
                call = "drain"
                ops.drain(row.name)
            if row.driver_wanted:
                call = "install"
                target.start(ops, row.name, row.driver_wanted)
                accepted[call].append(row.pk)
        except ProviderError as error:
            UpgradeNode.objects.filter(pk=row.pk).update(
                call_error={"call": call, "reason": error.reason, "message": error.message}
            )
    # A cordon's intent is cleared only if it is still the one called for: a tick may have flipped it.
    rows = UpgradeNode.objects
    if accepted["cordon"]:
        rows.filter(pk__in=accepted["cordon"], cordon_wanted=True).update(cordon_wanted=None)
    if accepted["uncordon"]:
        rows.filter(pk__in=accepted["uncordon"], cordon_wanted=False).update(cordon_wanted=None)
    if accepted["install"]:
        rows.filter(pk__in=accepted["install"]).update(driver_wanted="")


def _take_refusals(
    writes: TickWrites, run: UpgradeRun, rows: list[UpgradeNode], nodes: dict[str, Node], now
) -> bool:
    """Act on the calls the provider refused since the last tick: a refused cordon or install fails the
    node (as the GPU Operator fails it), a refused uncordon or drain is noted and called again. True
    when one was refused: the plan's view of the run's phase waits for the next tick."""
    refused = False
    for row in rows:
        if not row.call_error:
            continue
        error = ProviderError(row.call_error["reason"], row.call_error["message"])
        call = row.call_error["call"]
        row.call_error = {}
        writes.intents[row.pk] = row
        if call in RETRIED and error.reason not in HOPELESS:
            _note(writes, run, row, error.reason, error.message)
        else:
            _fail_after_error(writes, run, row, nodes.get(row.name), error, now)
        refused = True
    return refused


def _replacing(row: UpgradeNode, status: Seen | None) -> bool:
    """The row's node is being given a new machine and the provider still answers for it by its old
    name (`status`, read this tick): the node may be gone from the pool meanwhile."""
    return row.state == State.VALIDATION_REQUIRED and status is not None


def _follow_replacements(
    writes: TickWrites, run: UpgradeRun, rows: list[UpgradeNode], nodes: dict[str, Node], seen
) -> None:
    """A row whose node's new machine brought a node of another name (Cluster API's do) follows that
    node once the pool has it: the run validates and uncordons the successor, and the provider's answer
    read for the old name is the successor's."""
    for row in rows:
        status = seen.get(row.name)
        successor = status.driver.replaced_by if status else ""
        if not _replacing(row, status) or successor in ("", row.name) or successor not in nodes:
            continue
        message = f"Its machine was replaced: node {row.name} is now {successor}."
        writes.conditions.append(
            UpgradeCondition(run=run, node=successor, type="NodeState", reason="Replaced", message=message)
        )
        seen[successor] = seen.pop(row.name)
        row.name, row.node = successor, nodes[successor]
        row.reason, row.message = "Replaced", message
        writes.rows[row.pk] = row
        events.publish_node(run, row)


def _new_rows(run: UpgradeRun, target: DriverTarget, nodes: list[Node], now, **fields) -> list[UpgradeNode]:
    """Rows of the run for `nodes` that joined it now, waiting to start, saved; `fields` say why."""
    rows = [
        UpgradeNode(
            run=run,
            node=node,
            name=node.name,
            state=State.UPGRADE_REQUIRED,
            entered_at=now,
            pre_cordoned=node.cordoned,
            from_version=target.node_version(node),
            **fields,
        )
        for node in nodes
    ]
    UpgradeNode.objects.bulk_create(rows)
    return rows


def _join_new_nodes(
    writes: TickWrites,
    run: UpgradeRun,
    target: DriverTarget,
    rows: list[UpgradeNode],
    nodes: dict[str, Node],
    now,
) -> list[UpgradeNode]:
    """Nodes the pool gained since the run started (a scale-up) join it, unless they already run the
    target: they came up on the release (or version) the pool had then."""
    known = {row.name for row in rows}
    new = [
        node
        for name, node in sorted(nodes.items())
        if name not in known and target.node_version(node) != target.version and run.status != Phase.ABORTING
    ]
    joined = _new_rows(run, target, new, now, reason="JoinedPool")
    for row in joined:
        writes.conditions.append(
            UpgradeCondition(
                run=run, node=row.name, type="NodeState", reason="JoinedPool", message="New node."
            )
        )
    return joined


def _carry_out(
    writes: TickWrites, run, target: DriverTarget, steps, rows, nodes, seen: dict[str, Seen], now
) -> None:
    """Cordons and uncordons first, in one topology change (so evictions cannot land back on a cordoned
    node), then evictions and installs: in the control plane now, at the provider after commit
    (recorded on the rows)."""
    first = [s for s in steps if s.effect in (Effect.CORDON, Effect.UNCORDON)]
    cordons = {}
    for step in first:
        node = nodes[step.node]
        cordons[node.pk] = node.cordoned = step.effect == Effect.CORDON
        _want_cordon(writes, rows[step.node], node.cordoned)
    node_rows.set_cordons(run.pool.cluster_id, cordons)
    for step in first + [s for s in steps if s not in first]:
        row, node = rows[step.node], nodes.get(step.node)
        message = step.message
        if step.effect == Effect.EVICT:
            message = _evict(writes, run, node, row)
            drain = seen[step.node].drain if step.node in seen else None
            if drain is not None and drain.blocked:  # waiting on a disruption budget: say so, retry
                waiting = drain.message or f"{drain.pods_left} pods wait to be evicted."
                _note(writes, run, row, drain.reason, waiting)
                continue
        elif step.effect == Effect.INSTALL and row.retire:
            row.driver_touched = True  # drained, its machine going: it takes no claim again
            _remove_surge_node(run, row.name)
        elif step.effect == Effect.INSTALL:
            row.driver_touched = True  # from now on: the old driver may be gone
            row.driver_wanted = target.version
            writes.intents[row.pk] = row
        if row.retire:
            pass  # a surge node's versions are not the run's to record
        elif step.to in (State.UNCORDON_REQUIRED, State.FAILED) and step.node in seen and node is not None:
            target.record(node, seen[step.node].driver)
        _record(writes, run, row, step.to, step.reason, message, now)


def _surge(
    writes: TickWrites,
    run,
    target: DriverTarget,
    strategy: Strategy,
    rows,
    nodes: dict[str, Node],
    window_open,
    now,
):
    """maxSurge, for runs that replace machines: the first tick that may start nodes gives the pool its
    extra nodes (NodePool.surge_nodes; the pool's reconcile adds them, on the target: new_machines), and
    once every node is upgraded the extra nodes the pool has left become rows to retire (drained, then
    removed first by the reconcile). Returns (the surge the pool is to have, surge nodes in service)."""
    pool = run.pool
    if target.replaces and run.status in LIVE and pool.new_machines != target.new_machines():
        pool.new_machines = target.new_machines()
        pool.save(update_fields=["new_machines"])
    if not (target.replaces and strategy.max_surge):
        return 0, 0
    if run.surge_added_at is None:
        if run.status != Phase.RUNNING or not window_open:
            return 0, 0
        run.surge_added_at, pool.surge_nodes = now, strategy.max_surge
        pool.save(update_fields=["surge_nodes"])
        _reconcile_pool(pool)
        message = f"{nodes_text(strategy.max_surge)} added on {target.what} {target.version} for the upgrade."
        writes.conditions.append(UpgradeCondition(run=run, type="Run", reason="SurgeAdded", message=message))
    known = {row.name for row in rows}
    extra = [node for name, node in sorted(nodes.items()) if name not in known]
    settled = all(row.state in (State.DONE, State.FAILED) for row in rows)
    if run.status == Phase.RUNNING and settled and not any(row.retire for row in rows) and extra:
        claims = Counter(Allocation.objects.filter(node__in=extra).values_list("node_id", flat=True))
        going = sorted(extra, key=lambda node: claims[node.pk])[: max(pool.surge_nodes, 0)]
        message = "A surge node: drained, then removed."
        retiring = _new_rows(run, target, going, now, retire=True, reason="Surge", message=message)
        rows += retiring
        message = f"Every node upgraded: draining away the {nodes_text(len(retiring))} of surge."
        writes.conditions.append(
            UpgradeCondition(run=run, type="Run", reason="SurgeRemoving", message=message)
        )
    ready = sum(node.status == Node.Status.READY and not node.cordoned for node in extra)
    return pool.surge_nodes, ready


def _remove_surge_node(run: UpgradeRun, name: str) -> None:
    """A drained surge node goes: the pool keeps one node less beyond its count, that one removed first."""
    pool = run.pool
    pool.surge_nodes = max(pool.surge_nodes - 1, 0)
    pool.surge_remove = [*pool.surge_remove, name]
    pool.save(update_fields=["surge_nodes", "surge_remove"])
    _reconcile_pool(pool)


def _reconcile_pool(pool) -> None:
    jobs.enqueue("nodepools.tasks.reconcile_pool", pool.pk)  # after commit


def release_pool(run: UpgradeRun) -> None:
    """A run that ends gives the pool back its own version for new machines; surge nodes it did not drain
    away (it ended early) stay as the pool's own nodes, so nothing running on them is disturbed."""
    pool = NodePool.objects.select_for_update().get(pk=run.pool_id)
    if not (pool.new_machines or pool.surge_nodes or pool.surge_remove):
        return  # a driver run's, or one that never surged
    kept = pool.surge_nodes
    pool.new_machines, pool.surge_nodes, pool.surge_remove = {}, 0, []
    if kept:
        pool.node_count += kept
        pool.max_nodes = max(pool.max_nodes, pool.node_count)
        message = (
            f"The run ended before its {nodes_text(kept)} of surge were drained away: the pool keeps them "
            f"({pool.node_count} nodes); scale it down when you wish."
        )
        UpgradeCondition.objects.create(run=run, type="Run", reason="SurgeKept", message=message)
    pool.save(update_fields=["new_machines", "surge_nodes", "surge_remove", "node_count", "max_nodes"])


def _want_cordon(writes: TickWrites, row: UpgradeNode, cordon: bool) -> None:
    """The provider follows the control plane's cordon after commit."""
    row.cordon_wanted = cordon
    writes.intents[row.pk] = row


def _evict(writes: TickWrites, run: UpgradeRun, node: Node, row: UpgradeNode) -> str:
    """Ask for the node's drain (the eviction API on a real cluster, after commit), and let the
    allocator re-place its claims elsewhere or leave them pending with the reason."""
    row.drain_wanted = True
    writes.intents[row.pk] = row
    claims, placed = allocator.evict_node(run.pool.cluster_id, node.pk)
    if not claims:
        return "No claims on the node."
    return f"Evicted {claims} claims: {placed} placed elsewhere, {claims - placed} pending."


def _fail_after_error(writes: TickWrites, run, row, node, error: ProviderError, now) -> None:
    """A cordon or install the provider refused: the node fails, back in service unless its driver
    was touched (and the run keeps such nodes cordoned)."""
    if (
        node is not None
        and node.cordoned
        and keeps_cordoned(FailedNodes(run.failed_nodes), row.driver_touched)
    ):
        _record(writes, run, row, State.FAILED, error.reason, kept_message(error.message), now)
        return
    if node is not None and node.cordoned and not row.pre_cordoned:
        node.cordoned = False
        node_rows.set_cordons(run.pool.cluster_id, {node.pk: False})
        _want_cordon(writes, row, False)  # called until it works, after commit
    _record(writes, run, row, State.FAILED, error.reason, error.message, now)


def _note(writes: TickWrites, run: UpgradeRun, row: UpgradeNode, reason: str, message: str) -> None:
    row.reason, row.message = reason, message
    writes.rows[row.pk] = row
    writes.conditions.append(
        UpgradeCondition(run=run, node=row.name, type="NodeRetry", reason=reason, message=message)
    )
    events.publish_node(run, row)


def _record(writes: TickWrites, run, row: UpgradeNode, state: State, reason: str, message: str, now) -> None:
    changed = row.state != state
    if changed:
        row.entered_at = now
        writes.conditions.append(
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
    # Past the drain (or the install's wait), none of it is wanted from the provider any more.
    drain = row.drain_wanted and state in DRAINING
    driver = row.driver_wanted if state == State.VALIDATION_REQUIRED else ""
    if (drain, driver) != (row.drain_wanted, row.driver_wanted):
        row.drain_wanted, row.driver_wanted = drain, driver
        writes.intents[row.pk] = row
    writes.rows[row.pk] = row
    if changed:
        events.publish_node(run, row)


def _set_status(run: UpgradeRun, status: str, reason: str, message: str, now) -> None:
    """The plan's phase change (a row of run_lifecycle.LIFECYCLE); a completed run moves the pool's release,
    and a rollout hears of a run of its that ended or paused."""
    enter(run, tick_move(Phase(run.status), Phase(status), reason), now, message)
    if status == Phase.COMPLETED:
        target_of(run).complete()
    if run.rollout_id and status in (Phase.COMPLETED, Phase.FAILED, Phase.PAUSED):
        jobs.enqueue("upgrades.tasks.advance_rollout", run.rollout_id)


def enter(run: UpgradeRun, move: LifecycleMove, now, message: str = "") -> None:
    """Take the run along one row of run_lifecycle.LIFECYCLE, a control's (services.control) or a tick's,
    recorded in its history; the caller saves the run. `message`: a tick's, from its plan."""
    message = message or move.message
    if move.to is not None:
        run.status = move.to
        run.finished_at = now if move.to in FINISHED else None
        if move.to in FINISHED:
            release_pool(run)
    if not move.history_only:
        run.reason, run.message = move.reason, message
    UpgradeCondition.objects.create(run=run, type="Run", reason=move.reason, message=message)
