"""The run's lifecycle, pure: its phases and every phase change, an operator's control or a tick's plan,
as one table (LIFECYCLE) with the phases each starts from. control_move looks up a control's row and
says why one is refused (a ControlRefusal: the API's 409); tick_move finds the row behind a phase change
the plan made (node_machine.plan); a fleet rollout has its own, shorter table (ROLLOUT_LIFECYCLE).
The shell carries the rows out: services.control for the controls, controller.enter for both."""

from dataclasses import dataclass, replace
from enum import StrEnum


class Phase(StrEnum):
    PENDING = "pending"
    RUNNING = "running"
    PAUSED = "paused"
    ABORTING = "aborting"
    COMPLETED = "completed"
    FAILED = "failed"  # finished, some nodes visibly failed
    ABORTED = "aborted"


LIVE = frozenset({Phase.RUNNING, Phase.PAUSED, Phase.ABORTING})  # a tick has work to do
FINISHED = frozenset({Phase.COMPLETED, Phase.FAILED, Phase.ABORTED})

# --- the run's lifecycle: every phase change, by a control or by a tick, is one row of LIFECYCLE -------


class Control(StrEnum):
    """What an operator can do to a run (services.control); a fleet rollout's own controls are
    pause, resume and abort (ROLLOUT_LIFECYCLE)."""

    START = "start"
    PAUSE = "pause"
    RESUME = "resume"
    ABORT = "abort"
    RETRY = "retry"
    APPROVE = "approve"
    ROLLBACK = "rollback"


TICK = "tick"  # a phase change the plan makes (controller.tick)


@dataclass(frozen=True)
class LifecycleMove:
    """One row of the lifecycle: `by` (a Control, or TICK) takes a run in any phase of `source` to `to`,
    recorded in its history with `reason` and `message`. The flags say what else the move does to the
    run; the shell (services.control, controller) carries them out."""

    by: str
    source: frozenset[Phase]
    to: Phase | None  # None: the run keeps its phase (a rollback makes a new run)
    reason: str = ""
    message: str = ""  # a control's, formatted with its RunFacts; a tick's plan writes its own
    accepts_failed: bool = False  # the failed nodes so far no longer count against the failure budget
    retries_failed: bool = False  # the failed nodes go back to the queue, the budget counts afresh
    approves: bool = False  # the canary is approved: the rest of the pool may start
    history_only: bool = False  # the run's reason and message stay (the next tick's progress replaces them)


def _move(by: str, source: set[Phase], to: Phase | None, reason: str = "", message: str = "", **flags):
    return LifecycleMove(by, frozenset(source), to, reason, message, **flags)


P = Phase
LIFECYCLE: tuple[LifecycleMove, ...] = (
    # an operator's controls
    _move(Control.START, {P.PENDING}, P.RUNNING, "Started", "The run started."),
    _move(
        Control.PAUSE,
        {P.RUNNING},
        P.PAUSED,
        "Paused",
        "Paused; nodes in flight finish their upgrade.",
    ),
    _move(
        Control.RESUME,
        {P.PAUSED},
        P.RUNNING,
        "Resumed",
        "Resumed; {run.failed} failed nodes accepted.",
        accepts_failed=True,
    ),
    _move(Control.ABORT, {P.PENDING}, P.ABORTED, "Aborted", "Aborted before it started."),
    _move(
        Control.ABORT,
        {P.RUNNING, P.PAUSED},
        P.ABORTING,
        "Aborting",
        "Aborting: {run.in_flight} nodes not yet on the new driver go back into service; installs under "
        "way finish{run.kept_note}",
    ),
    _move(
        Control.RETRY,
        {P.RUNNING, P.PAUSED, P.FAILED},
        P.RUNNING,
        "Retry",
        "Retrying {run.failed} failed nodes.",
        retries_failed=True,
    ),
    _move(
        Control.APPROVE,
        {P.RUNNING},
        P.RUNNING,
        "CanaryApproved",
        "Canary approved; the rest of the pool follows.",
        approves=True,
        history_only=True,
    ),
    _move(  # a canary failure paused it; approving goes on regardless
        Control.APPROVE,
        {P.PAUSED},
        P.RUNNING,
        "CanaryApproved",
        "Canary approved; the rest of the pool follows.",
        approves=True,
        accepts_failed=True,
        history_only=True,
    ),
    _move(Control.ROLLBACK, set(FINISHED), None),  # a new run back to the release before
    _move(Control.ROLLBACK, {P.PENDING}, None),  # aborted first (Control.ABORT), then a new run
    # the plan's phase changes, made by a tick
    _move(TICK, {P.RUNNING}, P.PAUSED, "CanaryFailed"),
    _move(TICK, {P.RUNNING}, P.PAUSED, "FailureBudgetExhausted"),
    _move(TICK, {P.RUNNING}, P.FAILED, "FailedNodesHoldBudget"),
    _move(TICK, {P.RUNNING, P.PAUSED}, P.FAILED, "NodesFailed"),  # paused: its last nodes finished
    _move(TICK, {P.RUNNING, P.PAUSED}, P.COMPLETED, "AllNodesUpgraded"),
    _move(TICK, {P.ABORTING}, P.ABORTED, "Aborted"),
)
# A fleet rollout's own controls (rollouts.control_rollout); its waves move it on (rollouts.advance).
ROLLOUT_LIFECYCLE: tuple[LifecycleMove, ...] = (
    _move(Control.PAUSE, {P.RUNNING}, P.PAUSED),
    _move(Control.RESUME, {P.PAUSED}, P.RUNNING),
    _move(Control.ABORT, {P.RUNNING, P.PAUSED}, P.ABORTED),
)
del P


@dataclass(frozen=True)
class RunFacts:
    """What the controls look at besides the run's phase, counted by the shell (services.control)."""

    phase: Phase
    failed: int = 0  # nodes in upgrade-failed
    failed_canary: bool = False  # one of them is a canary node
    canaries_settled: bool = True  # every canary node upgraded or failed
    canary_approval: bool = False  # the strategy waits for an approval after the canary
    approved: bool = False
    in_flight: int = 0  # an abort hands these back untouched ...
    kept: int = 0  # ... and leaves these cordoned (their driver touched, under keep-cordoned)
    pool_busy: bool = False  # another run of the pool is live
    taken_over: bool = False  # a later run of the pool took this run's nodes over

    @property
    def kept_note(self) -> str:
        return f"; failed nodes kept cordoned (driver not validated): {self.kept}." if self.kept else "."


@dataclass(frozen=True)
class ControlRefusal:
    """A control the run's state does not allow (a 409): `code`, `message`, and whether the answer
    names the run's status."""

    code: str
    message: str
    with_status: bool = True


# Why a control is refused in a phase no row of LIFECYCLE starts from, where more than the phase is to say.
_WRONG_PHASE = {
    Control.RETRY: "it has no failed nodes to retry",
    Control.APPROVE: "no canary is waiting for approval",
    Control.ROLLBACK: "abort it first (installs under way finish), then roll back",
}


def _guard(control: str, run: RunFacts) -> ControlRefusal | str | None:
    """What, besides the phase, refuses `control` now: a ControlRefusal, the why of a cannot_<control>,
    or None."""
    match control:
        case Control.RETRY:
            if not run.failed:
                return _WRONG_PHASE[Control.RETRY]
            if run.phase == Phase.FAILED and run.pool_busy:
                return ControlRefusal(
                    "upgrade_in_progress", "The pool has another upgrade in progress.", False
                )
            if run.taken_over:  # and with them any cordon this run kept on them
                return "a later run of the pool took its nodes over"
        case Control.APPROVE:
            if not run.canary_approval or run.approved:
                return _WRONG_PHASE[Control.APPROVE]
            if not run.canaries_settled:
                return "its canary nodes are still upgrading"
    return None


def _row(table: tuple[LifecycleMove, ...], control: str, phase: Phase) -> LifecycleMove | None:
    return next((m for m in table if m.by == control and phase in m.source), None)


def takes(control: str, phase: Phase) -> bool:
    """Whether a row of LIFECYCLE takes `control` from `phase` (its guards aside): a rollout passes its
    controls on only to the runs they apply to."""
    return _row(LIFECYCLE, control, phase) is not None


def control_move(control: str, run: RunFacts) -> LifecycleMove | ControlRefusal:
    """The row of LIFECYCLE that `control` takes from the run's phase, its message filled in; or why the
    control is refused: `cannot_<control>`, or a guard's own code."""
    move = _row(LIFECYCLE, control, run.phase)
    if move is None:
        # An aborting run may well have failed nodes: retrying it is refused without a why.
        why = "" if (control, run.phase) == (Control.RETRY, Phase.ABORTING) else _WRONG_PHASE.get(control, "")
    else:
        why = _guard(control, run)
    if isinstance(why, ControlRefusal):
        return why
    if move is None or why is not None:
        message = f"Cannot {control} a run that is {run.phase}" + (f": {why}" if why else ".")
        return ControlRefusal(f"cannot_{control}", message)
    return replace(move, message=move.message.format(run=run))


def rollout_move(control: str, phase: Phase) -> LifecycleMove | ControlRefusal:
    """The row of ROLLOUT_LIFECYCLE that `control` takes a rollout in `phase` along, or the refusal."""
    if move := _row(ROLLOUT_LIFECYCLE, control, phase):
        return move
    return ControlRefusal(
        f"cannot_{control}", f"Cannot {control} a rollout that is {phase}.", with_status=False
    )


def tick_move(phase: Phase, to: Phase, reason: str) -> LifecycleMove:
    """The row of LIFECYCLE behind a phase change the plan made; a ValueError if there is none (the plan
    and the table disagree)."""
    for move in LIFECYCLE:
        if move.by == TICK and phase in move.source and move.to == to and move.reason == reason:
            return move
    raise ValueError(f"no tick takes a {phase} run to {to} ({reason})")
