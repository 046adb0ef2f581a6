"""Writes of rolling upgrades (a pool's driver, or its Kubernetes version): start a run (compatibility-
or skew-checked), the controls an operator has over it
(each a row of run_lifecycle.LIFECYCLE, looked up by control_move), and returning a node the run keeps
cordoned to service. Each runs in one transaction under the run's row lock; the next tick starts after
commit."""

from django.db import IntegrityError, transaction
from django.db.models import Count, Q
from django.utils import timezone

from audit.recorder import record
from catalog.models import DriverRelease, NodeImage
from clusters.services import cluster_operations
from nodepools import nodes as node_rows
from nodepools.models import Node, NodePool
from nvke.errors import Conflict, DomainError, Incompatible, NotFound, ProviderFailed
from nvke.node_counts import parse_nodes
from nvke.providers.base import ProviderError
from nvke.tenancy.context import TenantContext

from . import events, maintenance
from .compatibility import image_options, kubernetes_refusal, upgrade_refusals
from .controller import enter, schedule_tick, strategy_of
from .models import UpgradeCondition, UpgradeNode, UpgradeRun
from .node_machine import (
    BEFORE_INSTALL,
    ENDED_REASONS,
    NodeView,
    State,
    ended_message,
    return_refusal,
    returned_to_service,
)
from .run_lifecycle import FINISHED, LIVE, Control, ControlRefusal, Phase, RunFacts, control_move
from .strategy import STRATEGY_FIELDS, FailedNodes, strategy_error
from .targets import DriverTarget, target_of

STRATEGY_NAMES = tuple(spec.name for spec in STRATEGY_FIELDS)


def validate_strategy(strategy: dict, nodes: int) -> None:
    """Refuse a bad strategy value naming its field (strategy.strategy_error)."""
    if error := strategy_error(strategy, nodes):
        raise DomainError(error[1], field=error[0])


def _refuse(pool: NodePool, target: DriverRelease, cuda: str, rollback: bool) -> None:
    if refusals := upgrade_refusals(pool, target, cuda, rollback=rollback):
        raise Incompatible(
            refusals[0].message,
            field="target_release",
            code=refusals[0].rule,
            rules=[{"rule": r.rule, "message": r.message} for r in refusals],
        )


def _left_touched(pool: NodePool) -> dict[int, UpgradeNode]:
    """The pool's last run's rows of nodes whose driver it touched and never validated (by node id),
    those returned to service as they were included: a new run must reinstall them whatever version
    they report, and takes over the cordon of those the last run kept cordoned."""
    last = UpgradeRun.objects.filter(pool=pool).order_by("-created_at", "-pk").first()
    if last is None:
        return {}
    unvalidated = Q(driver_touched=True) | Q(returned_at__isnull=False)
    return {row.node_id: row for row in last.nodes.filter(unvalidated, node__isnull=False)}


def create_run(
    *,
    context: TenantContext,
    pool: NodePool,
    target_release: DriverRelease | None = None,
    kubernetes_version: str = "",
    node_image: NodeImage | None = None,
    user=None,
    start: bool = True,
    cuda: str = "",
    rollback_of: UpgradeRun | None = None,
    rollout=None,
    wave: int = 0,
    override_window: bool = False,
    **strategy,
) -> UpgradeRun:
    """A run of `pool` to `target_release`, or to Kubernetes `kubernetes_version` or to `node_image` (its
    driver kept); refused (400, naming the rule) when the pool cannot run it, 409 when the pool already
    has a live run or is being deleted, or when started by hand outside the cluster's maintenance windows
    without `override_window` (the run then ignores them; a rollout's runs and runs created pending wait
    for a window instead)."""
    if pool.status == NodePool.Status.DELETING:
        raise Conflict(f"Pool {pool.name} is being deleted.", field="pool", code="deleting")
    if kubernetes_version:
        if refusal := kubernetes_refusal(pool, kubernetes_version):
            raise Incompatible(refusal.message, field="kubernetes_version", code=refusal.rule)
        kind, upgrade, target_release = (
            UpgradeRun.Kind.KUBERNETES,
            maintenance.POOL_KUBERNETES,
            pool.driver_release,
        )
    elif node_image is not None:
        if refusals := dict(image_options(pool)).get(node_image):
            raise Incompatible(refusals[0].message, field="node_image", code=refusals[0].rule)
        kind, upgrade, target_release = UpgradeRun.Kind.IMAGE, maintenance.DRIVER, pool.driver_release
    elif target_release is None:
        raise DomainError(
            "Name a target_release, a kubernetes_version or a node_image.", field="target_release"
        )
    else:
        _refuse(pool, target_release, cuda, rollback=rollback_of is not None)
        kind, upgrade = UpgradeRun.Kind.DRIVER, maintenance.DRIVER
    overridden = (
        start
        and rollout is None
        and maintenance.started_outside_window(pool.cluster, override_window, upgrade)
    )
    unknown = set(strategy) - set(STRATEGY_NAMES)
    if unknown:
        raise DomainError(f"Unknown strategy field {sorted(unknown)[0]}.", field=sorted(unknown)[0])
    nodes = list(Node.objects.filter(pool=pool).order_by("name"))
    strategy = {**_pool_defaults(pool, kind), **strategy}
    validate_strategy(strategy, len(nodes))
    if kind == UpgradeRun.Kind.DRIVER and parse_nodes(strategy.get("max_surge", "0"))[0]:
        raise DomainError(
            "max_surge applies to Kubernetes and node image upgrades: a driver is installed in place.",
            field="max_surge",
            code="not_supported",
        )
    busy = Conflict(
        f"Pool {pool.name} already has an upgrade in progress.", field="pool", code="upgrade_in_progress"
    )
    if UpgradeRun.objects.filter(pool=pool, status__in=list(LIVE)).exists():
        raise busy
    now = timezone.now()
    touched = _left_touched(pool)
    try:
        with transaction.atomic():
            run = UpgradeRun.objects.create(
                tenant_id=pool.tenant_id,
                pool=pool,
                target_release=target_release,
                previous_release_id=pool.driver_release_id,
                kind=kind,
                kubernetes_version=kubernetes_version,
                previous_kubernetes_version=pool.kubernetes_version if kubernetes_version else "",
                node_image=node_image,
                previous_node_image=pool.node_image if node_image else None,
                rollback_of=rollback_of,
                rollout=rollout,
                wave=wave,
                status=Phase.RUNNING if start else Phase.PENDING,
                window_override=overridden,
                created_by=user,
                **strategy,
            )
            canaries = run.canary_nodes
            rows = []
            target = target_of(run)
            for node in nodes:
                row = _new_row(run, target, node, touched.get(node.pk), now)
                row.canary = row.state != State.DONE and canaries > 0
                canaries -= row.canary
                rows.append(row)
            UpgradeNode.objects.bulk_create(rows)
            UpgradeCondition.objects.bulk_create(
                UpgradeCondition(run=run, node=r.name, type="NodeState", reason=r.reason, message=r.message)
                for r in rows
                if r.reason == "CordonedByEarlierRun"
            )
            what = "Rollback" if rollback_of else "Upgrade"
            versions = f"from {run.previous} to {run.target}"
            UpgradeCondition.objects.create(
                run=run, type="Run", reason="Created", message=f"{what} of {len(nodes)} nodes {versions}."
            )
            if overridden:
                UpgradeCondition.objects.create(
                    run=run,
                    type="Run",
                    reason="WindowOverride",
                    message="Started outside the cluster's maintenance windows on purpose; it ignores them.",
                )
            if start:  # created running: the start's history, its reason and message left to the ticks
                started = control_move(Control.START, RunFacts(Phase.PENDING))
                UpgradeCondition.objects.create(
                    run=run, type="Run", reason=started.reason, message=started.message
                )
                transaction.on_commit(lambda: schedule_tick(run.pk, run.tick_seq, 0))
            events.publish_run(run)
    except IntegrityError:  # a concurrent start won the pool
        raise busy from None
    return run


def _pool_defaults(pool: NodePool, kind: str) -> dict[str, str]:
    """The pool's own max_unavailable and max_surge, for a run that does not say. A driver run, which
    cannot surge, takes at least one node out."""
    if kind != UpgradeRun.Kind.DRIVER:
        return {"max_unavailable": pool.upgrade_max_unavailable, "max_surge": pool.upgrade_max_surge}
    none_out = parse_nodes(pool.upgrade_max_unavailable)[0] == 0
    return {"max_unavailable": "1" if none_out else pool.upgrade_max_unavailable}


def _new_row(
    run: UpgradeRun, target: DriverTarget, node: Node, earlier: UpgradeNode | None, now
) -> UpgradeNode:
    """A node's row in a new run. `earlier`: its row in the pool's last run if that touched its
    driver without validating it; the node is then upgraded even if it reports the target (its install
    failed), and a cordon that run kept is this run's to lift. A node back in service since (the
    uncordon policy, or someone outside NVKE) starts untouched: a failure before its install gives it
    back again."""
    row = UpgradeNode(
        run=run,
        node=node,
        name=node.name,
        state=State.UPGRADE_REQUIRED,
        entered_at=now,
        pre_cordoned=node.cordoned,
        from_version=target.node_version(node),
        driver_touched=earlier is not None and node.cordoned,
    )
    if earlier is None and target.node_version(node) == target.version:
        row.state, row.reason = State.DONE, "AlreadyOnTarget"
    elif earlier is not None and earlier.kept_cordoned and not earlier.pre_cordoned and node.cordoned:
        row.pre_cordoned = False
        row.reason = "CordonedByEarlierRun"
        row.message = (
            f"Kept cordoned by run #{earlier.run_id} after its driver failed; this run reinstalls it."
        )
    return row


# --- controls ----------------------------------------------------------------------------------------

CONTROLS = tuple(Control)


def control(run: UpgradeRun, action: str, *, context: TenantContext | None = None, user=None) -> UpgradeRun:
    """Apply a control: the row of run_lifecycle.LIFECYCLE it takes from the run's phase; 409 with a code when
    the run's state allows none."""
    if action not in CONTROLS:
        raise DomainError(f"Unknown control {action!r}; one of {', '.join(CONTROLS)}.", field="action")
    if action == Control.ROLLBACK:
        return rollback(run, context=context, user=user)
    with transaction.atomic():
        run = (
            UpgradeRun.objects.select_for_update(of=("self",))
            .select_related("pool__cluster", "target_release")
            .get(pk=run.pk)
        )
        facts = _facts(run)
        move = control_move(action, facts)
        if isinstance(move, ControlRefusal):
            raise _conflict(run, move)
        now = timezone.now()
        if move.accepts_failed:
            run.failed_accepted = facts.failed
        if move.retries_failed:
            if facts.failed_canary:
                run.canary_done_at = None  # the canary goes again, and so does its bake
            run.nodes.filter(state=State.FAILED).update(
                state=State.UPGRADE_REQUIRED, reason="Retry", message="", entered_at=now, returned_at=None
            )
            run.failed_accepted = 0
        if move.approves:
            run.approved_at = now
        enter(run, move, now)
        if move.to == Phase.PAUSED:  # who paused it: a tenant's member, or an operator's rollout
            who = f"by {user.get_username()}" if user is not None else "with its fleet rollout"
            run.message = f"Paused {who}; nodes in flight finish their upgrade."
        run.save()
        events.publish_run(run)
        if run.status in LIVE:
            seq = run.tick_seq
            transaction.on_commit(lambda: schedule_tick(run.pk, seq, 0))
    return run


def _facts(run: UpgradeRun) -> RunFacts:
    """What the controls look at, counted in one query (and two for the pool's other runs)."""
    keep = run.failed_nodes != FailedNodes.UNCORDON
    kept = Q(driver_touched=True) if keep else Q(pk__in=[])  # nodes whose cordon an abort keeps
    failed = Q(state=State.FAILED)
    counts = run.nodes.aggregate(
        failed=Count("pk", filter=failed),
        failed_canary=Count("pk", filter=failed & Q(canary=True)),
        unsettled_canaries=Count("pk", filter=Q(canary=True) & ~Q(state__in=[State.DONE, State.FAILED])),
        in_flight=Count("pk", filter=Q(state__in=list(BEFORE_INSTALL)) & ~kept),
        kept=Count("pk", filter=kept & Q(state__in=[State.FAILED, State.UPGRADE_REQUIRED, *BEFORE_INSTALL])),
    )
    return RunFacts(
        phase=Phase(run.status),
        failed=counts["failed"],
        failed_canary=counts["failed_canary"] > 0,
        canaries_settled=counts["unsettled_canaries"] == 0,
        canary_approval=run.canary_approval,
        approved=run.approved_at is not None,
        in_flight=counts["in_flight"],
        kept=counts["kept"],
        pool_busy=UpgradeRun.objects.filter(pool=run.pool, status__in=list(LIVE)).exists(),
        taken_over=taken_over(run),
    )


def _conflict(run: UpgradeRun, refusal: ControlRefusal) -> Conflict:
    details = {"status": run.status} if refusal.with_status else {}
    return Conflict(refusal.message, code=refusal.code, **details)


def rollback(run: UpgradeRun, *, context: TenantContext | None, user=None) -> UpgradeRun:
    """A new run, same strategy, back to the release the pool ran before `run`."""
    run = UpgradeRun.objects.select_related("pool__driver_release", "previous_release").get(pk=run.pk)
    move = control_move(Control.ROLLBACK, RunFacts(Phase(run.status)))
    if isinstance(move, ControlRefusal):
        raise _conflict(run, move)
    if run.kind == UpgradeRun.Kind.KUBERNETES:
        raise Conflict(
            "Kubernetes supports no downgrades: a Kubernetes upgrade cannot be rolled back. Abort it, "
            "or retry its failed nodes.",
            code="no_downgrade",
        )
    if run.kind == UpgradeRun.Kind.IMAGE:  # going back is another image run, to the image it came from
        raise Conflict(
            "An image upgrade is undone by another one: start a run to the image the pool ran before "
            f"({run.previous_node_image or 'the provider default'}).",
            code="cannot_rollback",
        )
    if run.status == Phase.PENDING:
        control(run, Control.ABORT)
    pool = NodePool.objects.select_related("gpu_model", "driver_release").get(pk=run.pool_id)
    strategy = {name: getattr(run, name) for name in STRATEGY_NAMES}
    strategy["canary_nodes"] = min(strategy["canary_nodes"], pool.nodes.count())
    if pool.driver_release_id == run.previous_release_id:  # it never completed: nodes may still differ
        pool.driver_release = run.target_release
    return create_run(
        context=context,
        pool=pool,
        target_release=run.previous_release,
        user=user,
        rollback_of=run,
        **strategy,
    )


def taken_over(run: UpgradeRun) -> bool:
    """Has a later run of the pool taken this run's nodes over (and any cordon this run kept)?"""
    return UpgradeRun.objects.filter(pool_id=run.pool_id, created_at__gt=run.created_at).exists()


# --- returning a kept node to service ----------------------------------------------------------------


def _view(row: UpgradeNode) -> NodeView:
    node = row.node
    return NodeView(
        name=row.name,
        state=State(row.state),
        entered_at=row.entered_at.timestamp(),
        pre_cordoned=row.pre_cordoned,
        cordoned=node is not None and node.cordoned,
        driver_touched=row.driver_touched,
        returned=row.returned_at is not None,
    )


def _return_conflict(run: UpgradeRun, row: UpgradeNode, nodes: int, later_run: bool) -> Conflict | None:
    """Why `row`'s node cannot be returned to service now (a 409 naming the node), or None."""
    details = {"field": "node", "node": row.name, "state": row.state}
    if refusal := return_refusal(_view(row), Phase(run.status), strategy_of(run, nodes)):
        return Conflict(refusal[1], code=refusal[0], **details)
    if row.node is None:
        message = f"Node {row.name} left the pool: there is nothing to return to service."
        return Conflict(message, code="node_gone", **details)
    if later_run:
        message = f"A later run of pool {run.pool.name} took node {row.name} over: act on that run."
        return Conflict(message, code="taken_over", **details)
    return None


def returnable_nodes(run: UpgradeRun, rows: list[UpgradeNode]) -> set[str]:
    """The names of the nodes `return_to_service` would take now (rows with their `node` loaded)."""
    later_run = taken_over(run)
    return {row.name for row in rows if _return_conflict(run, row, len(rows), later_run) is None}


def return_to_service(run: UpgradeRun, node_name: str, *, user=None) -> UpgradeRun:
    """Uncordon one failed node the run keeps cordoned, its driver as it is (someone repaired the node by
    hand, or accepts the driver it runs). The row stays `upgrade-failed` (the run did not upgrade it;
    its totals count it failed) with `returned_at` set and `driver_touched` cleared, so the run leaves
    it alone and it no longer holds the unavailability budget; a retry takes it through the machine
    again and the pool's next run reinstalls it. Under the run's row lock, like a tick; 404 for a name
    not in the run, 409 with a code when the node is not the run's to give back, 502 when the provider
    cannot uncordon it (nothing changes)."""
    with transaction.atomic():
        run = (
            UpgradeRun.objects.select_for_update(of=("self",))
            .select_related("pool__cluster", "target_release")
            .get(pk=run.pk)
        )
        row = run.nodes.select_for_update(of=("self",)).select_related("node").filter(name=node_name).first()
        if row is None:
            raise NotFound(f"Run #{run.pk} has no node {node_name!r}.", field="node", code="unknown_node")
        if conflict := _return_conflict(run, row, run.nodes.count(), taken_over(run)):
            raise conflict
        node, view = row.node, _view(row)
        try:
            cluster_operations(run.pool.cluster).uncordon(node.name)
        except ProviderError as error:
            raise ProviderFailed(
                f"Could not uncordon node {row.name}: {error.message}", field="node", reason=error.reason
            ) from None
        node_rows.set_cordons(run.pool.cluster_id, {node.pk: False})  # pending claims may fit on it now
        after = returned_to_service(view)
        changes = {"cordoned": [view.cordoned, after.cordoned], "driver_touched": [row.driver_touched, False]}
        row.driver_touched, row.returned_at = after.driver_touched, timezone.now()
        changes["returned_at"] = [None, row.returned_at]
        who = user.get_username() if user is not None else "an operator"
        row.reason = "ReturnedToService"
        target = target_of(run)
        row.message = (
            f"Returned to service by {who}, not validated: it runs {target.what} "
            f"{target.node_version(node) or 'unknown'} as it is (target {target.version})."
        )
        row.save(update_fields=["driver_touched", "returned_at", "reason", "message"])
        UpgradeCondition.objects.create(
            run=run, node=row.name, type="NodeState", reason=row.reason, message=row.message
        )
        record(row, changes, tenant_id=run.tenant_id)
        events.publish_node(run, row)
        if run.status in FINISHED and run.reason in ENDED_REASONS:  # its counts changed
            rows = list(run.nodes.all())
            failed = [r for r in rows if r.state == State.FAILED]
            run.message = ended_message(
                run.reason,
                len(failed),
                len(rows),
                sum(r.kept_cordoned for r in failed),
                sum(r.returned_at is not None for r in failed),
            )
            run.save(update_fields=["message"])
            events.publish_run(run)
        if run.status in LIVE:  # the budget it held is free: the next tick may start a node
            seq = run.tick_seq
            transaction.on_commit(lambda: schedule_tick(run.pk, seq, 0))
    return run


def runs_holding(pool_ids: list[int]) -> dict[int, str]:
    """The pools among `pool_ids` with a run not finished, and why the autoscaler leaves their nodes be."""
    runs = UpgradeRun.objects.filter(pool_id__in=pool_ids).exclude(status__in=FINISHED)
    return {
        pool: f"driver upgrade run {run} is {status}"
        for run, pool, status in runs.values_list("pk", "pool_id", "status")
    }
