"""The per-node upgrade state machine and the tick's plan, pure: inputs are what the control plane
observed, output is at most one step per node plus the run's next phase. No ORM, no clock, no provider:
the Celery tick (upgrades/controller.py), the tests and the benchmark all drive this one function,
`plan`. It holds each node's steps (_advance, _fail, _abort), the rules for the cordon a failed node
keeps, returning such a node to service (return_refusal), and what the run as a whole decides each tick:
the canary gate, the failure and unavailability budgets, and the phase it ends in. The phases
themselves and their changes are the run's lifecycle (run_lifecycle); what the plan follows is the
strategy (strategy).

Node states are the NVIDIA GPU Operator's; each names what is required next:

    upgrade-required → cordon-required → wait-for-jobs-required → pod-deletion-required →
    drain-required → pod-restart-required → validation-required → uncordon-required → upgrade-done
    (or upgrade-failed from any active state)

Invariants the plan keeps (tests/upgrades check them at every tick):
- never more nodes unavailable than `max_unavailable`, counting nodes that were unavailable anyway (a
  failed node kept cordoned is unavailable too);
- a node is told to install the new driver only once it holds no claims (drained);
- a node the run cordoned is uncordoned when it finishes, or when it fails or the run is aborted before
  its driver was touched; a node cordoned before the run stays cordoned;
- a node that fails after its driver was touched (an install started and not validated since) stays
  cordoned in upgrade-failed under `failed_nodes=keep-cordoned` (the default): no claim is placed on an
  unvalidated driver. Retry takes it through the machine again; a rollback reinstalls the old driver;
  a person may return it to service as it is (`return_refusal`, `returned_to_service`): from then on
  the run leaves it alone (never cordons or uncordons it again) and it no longer holds the budget;
- a run never waits forever on its own failed nodes: when those kept cordoned hold the whole budget and
  nodes still wait, it ends failed and says so."""

from dataclasses import dataclass, field, replace
from enum import StrEnum

from .run_lifecycle import LIVE, Phase
from .strategy import FailedNodes, Strategy


class State(StrEnum):
    UPGRADE_REQUIRED = "upgrade-required"
    CORDON_REQUIRED = "cordon-required"
    WAIT_FOR_JOBS_REQUIRED = "wait-for-jobs-required"
    POD_DELETION_REQUIRED = "pod-deletion-required"
    DRAIN_REQUIRED = "drain-required"
    POD_RESTART_REQUIRED = "pod-restart-required"
    VALIDATION_REQUIRED = "validation-required"
    UNCORDON_REQUIRED = "uncordon-required"
    DONE = "upgrade-done"
    FAILED = "upgrade-failed"


ORDER = list(State)[:9]  # the happy path
ACTIVE = frozenset(ORDER[1:8])  # between leaving the queue and finishing: the node is out of service
BEFORE_INSTALL = frozenset(ORDER[1:6])  # an abort can still hand these back untouched


class Effect(StrEnum):
    """What the shell must do to the node (through the provider) before recording the new state."""

    NONE = ""
    CORDON = "cordon"
    EVICT = "evict"  # evict the node's claims; the allocator re-places them elsewhere
    INSTALL = "install"  # start the new driver (the driver pod's restart)
    UNCORDON = "uncordon"


@dataclass(frozen=True)
class NodeView:
    """One node as observed at the start of a tick."""

    name: str
    state: State
    entered_at: float  # when it entered `state`
    canary: bool = False
    pre_cordoned: bool = False  # cordoned before the run: it stays cordoned
    cordoned: bool = False
    ready: bool = True
    claims: int = 0  # claims still allocated on it
    busy: bool = False  # the provider is still carrying out the last operation
    driver_version: str = ""
    gpus_healthy: bool = True
    install_failure: str = ""  # the provider's reason when the driver install failed
    driver_touched: bool = False  # the run started a driver install here that has not validated since
    returned: bool = False  # failed, then returned to service by a person, its driver as it is
    deferred_by: str = ""  # what the pool's deferral policy waits for before draining, in words
    retire: bool = False  # a surge node the run drains and has removed at its end (not upgraded)
    gone: bool = False  # a retiring node's machine was removed

    @property
    def unavailable(self) -> bool:
        return self.state in ACTIVE or self.cordoned or not self.ready

    @property
    def touched(self) -> bool:
        """Its driver may be broken: an install was started (validation-required implies one)."""
        return self.driver_touched or self.state == State.VALIDATION_REQUIRED


@dataclass(frozen=True)
class RunView:
    phase: Phase
    target_version: str
    what: str = "driver"  # what the run moves, in messages: "driver" or "Kubernetes" (upgrades.targets)
    canary_done_at: float | None = None  # when the last canary node finished (upgraded or failed)
    approved: bool = False
    failed_accepted: int = 0  # failed nodes an operator resumed past; the budget counts new ones
    window_open: bool = True  # inside the cluster's maintenance window (or started with an override)
    window_message: str = ""  # when it is not: what the run waits for
    deferral_deadline_s: float = 0.0  # how long a node waits for the claims its pool defers for
    deferral_stops: bool = False  # past the deadline the node fails instead of being drained
    surge: int = 0  # extra nodes (maxSurge) the pool is to have while the run replaces machines ...
    surge_ready: int = 0  # ... and those in service now: each lets one more node be out at once


@dataclass(frozen=True)
class NodeStep:
    """One node's move this tick: the state it goes to, and what the shell must do to it first."""

    node: str
    to: State
    effect: Effect = Effect.NONE
    reason: str = ""
    message: str = ""


@dataclass
class Plan:
    phase: Phase
    steps: list[NodeStep] = field(default_factory=list)
    reason: str = ""  # why the phase changed, for the run's condition history
    message: str = ""
    canary_done_at: float | None = None

    def for_node(self, name: str) -> NodeStep | None:
        return next((s for s in self.steps if s.node == name), None)


def unavailable_count(nodes: list[NodeView]) -> int:
    return sum(n.unavailable for n in nodes)


def keeps_cordoned(policy: FailedNodes, driver_touched: bool) -> bool:
    """Does a failure keep the node cordoned? Only one whose driver was touched, and only by policy."""
    return policy == FailedNodes.KEEP_CORDONED and driver_touched


KEPT_MESSAGE = "Kept cordoned: its driver is not validated; retry or roll back."


def kept_message(message: str) -> str:
    """A failed node's message with the note that it stays out of service."""
    return f"{message.rstrip('. ')}. {KEPT_MESSAGE}" if message else KEPT_MESSAGE


def nodes_text(count: int) -> str:
    """ "1 node", "3 nodes"."""
    return f"{count} node" + ("" if count == 1 else "s")


def _kept(node: NodeView, strategy: Strategy) -> bool:
    """A failed node the run keeps out of service."""
    return (
        node.state == State.FAILED
        and not node.returned
        and keeps_cordoned(strategy.failed_nodes, node.touched)
    )


def return_refusal(node: NodeView, phase: Phase, strategy: Strategy) -> tuple[str, str] | None:
    """Why a person may not return `node` to service now, as (code, message); None when they may.
    Only a failed node the run keeps cordoned (its driver touched, under keep-cordoned) goes back, and
    never one the run is still moving or whose cordon is not the run's."""
    name = node.name
    if node.state in ACTIVE or (node.state == State.UPGRADE_REQUIRED and phase in LIVE | {Phase.PENDING}):
        what = "upgrading it" if node.state in ACTIVE else "yet to upgrade it"
        return "node_in_flight", f"Node {name} is {node.state}: the run is {what}."
    if node.pre_cordoned and node.state == State.FAILED:
        return (
            "cordoned_before_run",
            f"Node {name} was cordoned before the run; the run does not hold its cordon.",
        )
    if not _kept(node, strategy):
        if node.returned:
            why = "it was returned to service already"
        elif node.state == State.FAILED:
            why = "it failed before its driver was touched, or under failed_nodes=uncordon: it is in service"
        else:
            why = f"it is {node.state}"
        return "not_kept_cordoned", f"Node {name} is not kept cordoned by this run: {why}."
    return None


def returned_to_service(node: NodeView) -> NodeView:
    """The node once a person returned it to service: uncordoned, its driver accepted as it is (no longer
    `driver_touched`, though the run never validated it), and left alone by the run from then on."""
    return replace(node, cordoned=False, driver_touched=False, returned=True)


def _fail(node: NodeView, strategy: Strategy, reason: str, message: str) -> NodeStep:
    """A failed node goes back into service at once (unless it was cordoned before the run), except
    one whose driver was touched, which stays cordoned under keep-cordoned."""
    if keeps_cordoned(strategy.failed_nodes, node.touched):
        return NodeStep(node.name, State.FAILED, Effect.NONE, reason, kept_message(message))
    effect = Effect.UNCORDON if node.cordoned and not node.pre_cordoned else Effect.NONE
    return NodeStep(node.name, State.FAILED, effect, reason, message)


def _advance(node: NodeView, run: RunView, strategy: Strategy, now: float) -> NodeStep | None:
    """The one step an in-flight node takes now, or None while it waits."""
    waited = now - node.entered_at
    match node.state:
        case State.CORDON_REQUIRED:
            return NodeStep(node.name, State.WAIT_FOR_JOBS_REQUIRED, Effect.CORDON, "Cordoned")
        case State.WAIT_FOR_JOBS_REQUIRED if not node.busy:
            if node.deferred_by:
                if waited < run.deferral_deadline_s:
                    return NodeStep(
                        node.name,
                        node.state,
                        reason="Deferred",
                        message=f"Waiting for {node.deferred_by} before draining "
                        f"(at most {run.deferral_deadline_s - waited:.0f}s more).",
                    )
                if run.deferral_stops:
                    return _fail(
                        node,
                        strategy,
                        "DeferralDeadline",
                        f"Still waiting for {node.deferred_by} after {run.deferral_deadline_s:g}s; "
                        "the pool's deferral policy stops the upgrade of this node.",
                    )
            return NodeStep(node.name, State.POD_DELETION_REQUIRED, reason="NoBlockingJobs")
        case State.POD_DELETION_REQUIRED if not node.busy:
            return NodeStep(node.name, State.DRAIN_REQUIRED, Effect.EVICT, "ClaimsEvicted")
        case State.DRAIN_REQUIRED if not node.busy:
            if node.claims == 0:
                return NodeStep(node.name, State.POD_RESTART_REQUIRED, reason="Drained")
            if waited >= strategy.drain_timeout_s:
                return _fail(
                    node,
                    strategy,
                    "DrainTimeout",
                    f"{node.claims} claims still on the node after {strategy.drain_timeout_s:g}s.",
                )
            return NodeStep(node.name, State.DRAIN_REQUIRED, Effect.EVICT, "ClaimsEvicted")
        case State.POD_RESTART_REQUIRED if not node.busy:
            if node.claims:  # something landed since the drain: drain again, never install under it
                return NodeStep(node.name, State.DRAIN_REQUIRED, Effect.EVICT, "ClaimsReturned")
            if node.retire:
                removing = "Removing its machine."
                return NodeStep(node.name, State.VALIDATION_REQUIRED, Effect.INSTALL, "Removing", removing)
            return NodeStep(
                node.name,
                State.VALIDATION_REQUIRED,
                Effect.INSTALL,
                "DriverInstalling" if run.what == "driver" else "Replacing",
                f"Installing driver {run.target_version}."
                if run.what == "driver"
                else f"Replacing its machine with one on {run.what} {run.target_version}.",
            )
        case State.VALIDATION_REQUIRED if node.retire:
            if node.gone:
                return NodeStep(
                    node.name, State.DONE, reason="Removed", message="The surge node was removed."
                )
            if waited >= strategy.validation_timeout_s:
                return _fail(node, strategy, "NotRemoved", "The surge node's machine was not removed.")
        case State.VALIDATION_REQUIRED:
            if node.install_failure:
                return _fail(node, strategy, "DriverInstallFailed", node.install_failure)
            if node.busy:
                return None
            if node.driver_version == run.target_version and node.gpus_healthy and node.ready:
                return NodeStep(
                    node.name,
                    State.UNCORDON_REQUIRED,
                    reason="Validated",
                    message=f"{run.what[0].upper()}{run.what[1:]} {run.target_version}.",
                )
            if waited >= strategy.validation_timeout_s:
                found = f"{run.what} {node.driver_version or 'unknown'}"
                if not node.gpus_healthy:
                    found += ", a GPU unhealthy"
                return _fail(node, strategy, "ValidationFailed", f"Found {found}.")
            return None
        case State.UNCORDON_REQUIRED:
            effect = Effect.NONE if node.pre_cordoned else Effect.UNCORDON
            return NodeStep(node.name, State.DONE, effect, "Upgraded")
        case State.FAILED if (
            node.cordoned and not node.pre_cordoned and not node.returned and not _kept(node, strategy)
        ):  # a returned node was uncordoned by the person: a cordon since is someone else's
            return NodeStep(node.name, State.FAILED, Effect.UNCORDON, "UncordonedAfterFailure")
    return None


def _canary_gate(run: RunView, nodes: list[NodeView], strategy: Strategy, now: float) -> tuple[bool, str]:
    """May non-canary nodes start? And if not, why (for the run's message)."""
    canaries = [n for n in nodes if n.canary]
    if not canaries:
        return True, ""
    if any(n.state not in (State.DONE, State.FAILED) for n in canaries):
        return False, "Canary nodes are upgrading."
    if run.approved:
        return True, ""
    if strategy.canary_approval:
        return False, "Canary nodes are done; waiting for approval."
    done_at = run.canary_done_at if run.canary_done_at is not None else now
    if now - done_at < strategy.canary_bake_s:
        return False, f"Canary nodes are baking until +{strategy.canary_bake_s - (now - done_at):.0f}s."
    return True, ""


def plan(run: RunView, nodes: list[NodeView], strategy: Strategy, now: float) -> Plan:
    """One tick: every node moves at most one step; new nodes start within the unavailability budget."""
    result = Plan(phase=run.phase, canary_done_at=run.canary_done_at)
    if run.phase not in LIVE:
        return result
    for node in nodes:
        aborted = _abort(node, strategy) if run.phase == Phase.ABORTING else None
        if step := aborted or _advance(node, run, strategy, now):
            result.steps.append(step)

    after = {n.name: n for n in nodes}
    for step in result.steps:  # what the nodes look like once this tick's steps are done
        after[step.node] = _after(after[step.node], step)
    settled = list(after.values())

    canaries = [n for n in settled if n.canary]
    settled_states = (State.DONE, State.FAILED)  # a failed canary pauses the run; resumed, it bakes too
    if canaries and result.canary_done_at is None and all(n.state in settled_states for n in canaries):
        result.canary_done_at = now
    failed = [n for n in settled if n.state == State.FAILED]
    kept = [n for n in failed if _kept(n, strategy)]

    if run.phase == Phase.RUNNING and len(failed) > run.failed_accepted:
        undo = "roll back" if run.what == "driver" else "abort"  # Kubernetes has no downgrades
        if any(n.state == State.FAILED for n in canaries) and not run.approved:
            return _pause(result, "CanaryFailed", f"Canary node {failed[0].name} failed; retry or {undo}.")
        if len(failed) - run.failed_accepted >= strategy.failure_budget:
            return _pause(
                result,
                "FailureBudgetExhausted",
                f"{len(failed)} nodes failed (budget {strategy.failure_budget}); retry or {undo}.",
            )
    if run.phase == Phase.RUNNING:
        gate_open, gate_message = _canary_gate(
            replace(run, canary_done_at=result.canary_done_at), settled, strategy, now
        )
        result.message = gate_message
        if not run.window_open:
            # Outside the window no node starts and those in flight finish: it goes on in the next one.
            if any(n.state == State.UPGRADE_REQUIRED for n in settled):
                result.reason, result.message = "OutsideWindow", run.window_message
        else:
            budget = strategy.max_unavailable + min(run.surge_ready, run.surge)
            _start_nodes(result, settled, budget, gate_open)
            startable = [n for n in settled if n.state == State.UPGRADE_REQUIRED and (gate_open or n.canary)]
            in_flight = any(n.state in ACTIVE for n in settled) or any(s.to in ACTIVE for s in result.steps)
            held = sum(n.unavailable for n in kept if not n.pre_cordoned)
            if startable and not in_flight and not budget:
                result.reason = "WaitingForSurge"
                result.message = (
                    f"Waiting for the pool's {nodes_text(run.surge)} of surge on {run.what} "
                    f"{run.target_version} (maxUnavailable 0): {run.surge_ready} ready."
                )
            elif startable and not in_flight and held >= budget:
                # Only a retry or a rollback frees these nodes: waiting would be waiting forever.
                result.phase, result.reason = Phase.FAILED, "FailedNodesHoldBudget"
                result.message = (
                    f"Failed nodes kept cordoned ({held}) hold the whole maxUnavailable budget "
                    f"({budget}); {nodes_text(len(startable))} not upgraded. "
                    "Retry or roll back."
                )
                return result
            elif startable and not in_flight:
                result.reason = "Blocked"
                result.message = (
                    f"{unavailable_count(settled)} nodes are unavailable (maxUnavailable "
                    f"{strategy.max_unavailable}"
                    + (f", surge {min(run.surge_ready, run.surge)}" if run.surge else "")
                    + (f"; {held} of them failed and kept cordoned" if held else "")
                    + "); it carries on when those outside the run are back."
                )

    if not any(n.state in ACTIVE for n in after.values()) and not any(s.to in ACTIVE for s in result.steps):
        waiting = any(n.state == State.UPGRADE_REQUIRED for n in after.values())
        counts = (len(failed), len(nodes), len(kept), sum(n.returned for n in failed))
        if run.phase == Phase.ABORTING:
            result.phase, result.reason = Phase.ABORTED, "Aborted"
            result.message = ended_message("Aborted", *counts)
        elif not waiting:  # running, or paused with nothing left to do
            if failed:
                result.phase, result.reason = Phase.FAILED, "NodesFailed"
                result.message = ended_message("NodesFailed", *counts)
            else:
                result.phase, result.reason = Phase.COMPLETED, "AllNodesUpgraded"
                upgraded = sum(not n.retire for n in nodes)
                result.message = f"All {upgraded} nodes run {run.what} {run.target_version}."
    return result


ENDED_REASONS = ("Aborted", "NodesFailed")  # their message counts the nodes left behind (ended_message)


def ended_message(reason: str, failed: int, total: int, kept: int, returned: int = 0) -> str:
    """The message of a run that ended `Aborted` or `NodesFailed`, from its node counts. The plan writes
    it when the run ends; returning a kept node to service writes it again."""
    head = "The run was aborted" if reason == "Aborted" else f"{failed} of {total} nodes failed"
    kept_note = ""
    if kept:
        kept_note = f"; {nodes_text(kept)} kept cordoned (driver not validated): retry or roll back"
    returned_note = f"; {nodes_text(returned)} returned to service unvalidated" if returned else ""
    return head + kept_note + returned_note + "."


def _abort(node: NodeView, strategy: Strategy) -> NodeStep | None:
    """An aborting run hands back the nodes not yet installing, except those whose driver an earlier
    attempt touched (a retry, or a node an earlier run kept cordoned): failed again, still cordoned."""
    if node.state not in BEFORE_INSTALL | {State.UPGRADE_REQUIRED}:
        return None
    if node.cordoned and keeps_cordoned(strategy.failed_nodes, node.touched):
        return NodeStep(node.name, State.FAILED, Effect.NONE, "Aborted", kept_message("The run was aborted"))
    effect = Effect.UNCORDON if node.cordoned and not node.pre_cordoned else Effect.NONE
    if node.state == State.UPGRADE_REQUIRED and effect == Effect.NONE:
        return None  # never started: nothing to hand back
    return NodeStep(node.name, State.UPGRADE_REQUIRED, effect, "Aborted")


def _after(node: NodeView, step: NodeStep) -> NodeView:
    """The node once `step` is carried out."""
    cordoned = {Effect.CORDON: True, Effect.UNCORDON: False}.get(step.effect, node.cordoned)
    touched = (node.touched or step.effect == Effect.INSTALL) and step.to != State.UNCORDON_REQUIRED
    return replace(node, state=step.to, cordoned=cordoned, driver_touched=touched)


def _pause(result: Plan, reason: str, message: str) -> Plan:
    result.phase, result.reason, result.message = Phase.PAUSED, reason, message
    return result


def _start_nodes(result: Plan, settled: list[NodeView], budget: int, gate_open: bool) -> None:
    """Start waiting nodes: those already out of service and surge nodes to retire first (they cost no
    budget: the pool keeps its size without them), canaries before the rest, nodes running claims their
    pool defers for last (they would hold the budget waiting), then by name; stop at the unavailability
    budget (maxUnavailable, and one more per surge node in service)."""
    unavailable = sum(n.unavailable and not n.retire for n in settled)
    queue = sorted(
        (n for n in settled if n.state == State.UPGRADE_REQUIRED and (gate_open or n.canary)),
        key=lambda n: (not (n.unavailable or n.retire), not n.canary, bool(n.deferred_by), n.name),
    )
    for node in queue:
        if not (node.unavailable or node.retire):
            if unavailable >= budget:
                break
            unavailable += 1
        result.steps.append(NodeStep(node.name, State.CORDON_REQUIRED, reason="Started"))
