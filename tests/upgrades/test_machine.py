"""Table tests of the pure upgrade state machine, and invariants over simulated runs with failures."""

from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from nvke.node_counts import nodes_of, parse_nodes
from upgrades.node_machine import (
    KEPT_MESSAGE,
    Effect,
    NodeView,
    RunView,
    State,
    plan,
    return_refusal,
    returned_to_service,
)
from upgrades.run_lifecycle import (
    LIFECYCLE,
    TICK,
    Control,
    ControlRefusal,
    LifecycleMove,
    Phase,
    RunFacts,
    control_move,
    rollout_move,
    tick_move,
)
from upgrades.strategy import FailedNodes, Strategy, strategy_error
from upgrades.virtual_fleet import Durations, run_simulation

RUN = RunView(phase=Phase.RUNNING, target_version="2.0")
STRATEGY = Strategy(max_unavailable=1, drain_timeout_s=60, validation_timeout_s=100)


def node(state: State, **fields) -> NodeView:
    fields.setdefault("driver_version", "1.0")
    return NodeView(name=fields.pop("name", "a"), state=state, entered_at=0, **fields)


@pytest.mark.parametrize(
    "view, now, expected",
    [
        (node(State.CORDON_REQUIRED), 0, (State.WAIT_FOR_JOBS_REQUIRED, Effect.CORDON, "Cordoned")),
        (node(State.WAIT_FOR_JOBS_REQUIRED, busy=True), 0, None),
        (node(State.WAIT_FOR_JOBS_REQUIRED), 0, (State.POD_DELETION_REQUIRED, Effect.NONE, "NoBlockingJobs")),
        (
            node(State.POD_DELETION_REQUIRED, claims=2),
            0,
            (State.DRAIN_REQUIRED, Effect.EVICT, "ClaimsEvicted"),
        ),
        (node(State.DRAIN_REQUIRED, claims=0), 0, (State.POD_RESTART_REQUIRED, Effect.NONE, "Drained")),
        (node(State.DRAIN_REQUIRED, claims=1), 10, (State.DRAIN_REQUIRED, Effect.EVICT, "ClaimsEvicted")),
        (node(State.DRAIN_REQUIRED, claims=1), 60, (State.FAILED, Effect.NONE, "DrainTimeout")),
        (
            node(State.POD_RESTART_REQUIRED),
            0,
            (State.VALIDATION_REQUIRED, Effect.INSTALL, "DriverInstalling"),
        ),
        (
            node(State.POD_RESTART_REQUIRED, claims=1),
            0,
            (State.DRAIN_REQUIRED, Effect.EVICT, "ClaimsReturned"),
        ),
        (node(State.VALIDATION_REQUIRED, busy=True), 0, None),
        (
            node(State.VALIDATION_REQUIRED, install_failure="boom"),
            0,
            (State.FAILED, Effect.NONE, "DriverInstallFailed"),
        ),
        (
            node(State.VALIDATION_REQUIRED, driver_version="2.0"),
            0,
            (State.UNCORDON_REQUIRED, Effect.NONE, "Validated"),
        ),
        (node(State.VALIDATION_REQUIRED, driver_version="2.0", gpus_healthy=False), 10, None),
        (
            node(State.VALIDATION_REQUIRED, driver_version="2.0", gpus_healthy=False),
            100,
            (State.FAILED, Effect.NONE, "ValidationFailed"),
        ),
        (node(State.VALIDATION_REQUIRED), 100, (State.FAILED, Effect.NONE, "ValidationFailed")),
        (node(State.UNCORDON_REQUIRED, cordoned=True), 0, (State.DONE, Effect.UNCORDON, "Upgraded")),
        (
            node(State.UNCORDON_REQUIRED, cordoned=True, pre_cordoned=True),
            0,
            (State.DONE, Effect.NONE, "Upgraded"),
        ),
        (node(State.FAILED, cordoned=True), 0, (State.FAILED, Effect.UNCORDON, "UncordonedAfterFailure")),
        (node(State.FAILED, cordoned=True, pre_cordoned=True), 0, None),
        (node(State.FAILED, cordoned=True, driver_touched=True), 0, None),  # kept cordoned
        (node(State.DONE), 0, None),
    ],
)
def test_each_state_takes_one_step(view, now, expected):
    others = [node(State.DONE, name="z")]  # keeps the run from finishing or starting anything
    step = plan(RUN, [view, *others], replace(STRATEGY, failure_budget=5), now).for_node("a")
    assert (step and (step.to, step.effect, step.reason)) == (expected or None)


KEEP, UNCORDON = FailedNodes.KEEP_CORDONED, FailedNodes.UNCORDON


@pytest.mark.parametrize(
    "view, now, policy, expected",
    [
        # failed before the driver was touched: back into service, whatever the policy
        (
            node(State.DRAIN_REQUIRED, claims=1, cordoned=True),
            60,
            KEEP,
            (Effect.UNCORDON, "DrainTimeout", False),
        ),
        # ... unless a failed attempt touched it before (a retry): then it stays out
        (
            node(State.DRAIN_REQUIRED, claims=1, cordoned=True, driver_touched=True),
            60,
            KEEP,
            (Effect.NONE, "DrainTimeout", True),
        ),
        (
            node(State.VALIDATION_REQUIRED, cordoned=True, install_failure="DkmsBuildFailed"),
            0,
            KEEP,
            (Effect.NONE, "DriverInstallFailed", True),
        ),
        (
            node(State.VALIDATION_REQUIRED, cordoned=True, driver_version="2.0", gpus_healthy=False),
            100,
            KEEP,
            (Effect.NONE, "ValidationFailed", True),
        ),
        (node(State.VALIDATION_REQUIRED, cordoned=True), 100, KEEP, (Effect.NONE, "ValidationFailed", True)),
        # the uncordon policy: every failed node goes back at once
        (
            node(State.VALIDATION_REQUIRED, cordoned=True, install_failure="DkmsBuildFailed"),
            0,
            UNCORDON,
            (Effect.UNCORDON, "DriverInstallFailed", False),
        ),
        (
            node(State.DRAIN_REQUIRED, claims=1, cordoned=True, driver_touched=True),
            60,
            UNCORDON,
            (Effect.UNCORDON, "DrainTimeout", False),
        ),
        # cordoned before the run: stays cordoned either way
        (
            node(State.VALIDATION_REQUIRED, cordoned=True, pre_cordoned=True, install_failure="x"),
            0,
            UNCORDON,
            (Effect.NONE, "DriverInstallFailed", False),
        ),
    ],
)
def test_a_failure_keeps_the_node_cordoned_only_once_its_driver_was_touched(view, now, policy, expected):
    strategy = replace(STRATEGY, failure_budget=5, failed_nodes=policy)
    step = plan(RUN, [view, node(State.DONE, name="z")], strategy, now).for_node("a")
    effect, reason, kept = expected
    assert (step.to, step.effect, step.reason) == (State.FAILED, effect, reason)
    assert step.message.endswith(KEPT_MESSAGE) == kept


def test_a_kept_failed_node_stays_cordoned_until_the_uncordon_policy_says_otherwise():
    failed = node(State.FAILED, cordoned=True, driver_touched=True)
    others = [node(State.DONE, name="z")]
    assert plan(RUN, [failed, *others], replace(STRATEGY, failure_budget=5), 0).for_node("a") is None
    step = plan(RUN, [failed, *others], replace(STRATEGY, failure_budget=5, failed_nodes=UNCORDON), 0)
    assert (step.for_node("a").effect, step.for_node("a").reason) == (
        Effect.UNCORDON,
        "UncordonedAfterFailure",
    )


def test_a_validated_node_is_trusted_again():
    retried = node(State.VALIDATION_REQUIRED, cordoned=True, driver_version="2.0", driver_touched=True)
    step = plan(RUN, [retried, node(State.DONE, name="z")], STRATEGY, 0).for_node("a")
    assert (step.to, step.reason) == (State.UNCORDON_REQUIRED, "Validated")
    done = plan(RUN, [replace(retried, state=State.UNCORDON_REQUIRED, driver_touched=False)], STRATEGY, 0)
    assert [(s.to, s.effect) for s in done.steps] == [(State.DONE, Effect.UNCORDON)]


def test_a_retried_node_starts_first_and_costs_no_budget():
    """A retry puts a kept node back in the queue still cordoned: it is unavailable already."""
    nodes = [
        node(State.UPGRADE_REQUIRED, name="n0"),
        node(State.UPGRADE_REQUIRED, name="n1", cordoned=True, driver_touched=True),
    ]
    assert [s.node for s in plan(RUN, nodes, STRATEGY, 0).steps] == ["n1"]


def test_kept_failed_nodes_count_against_max_unavailable():
    nodes = [
        node(State.FAILED, name="n0", cordoned=True, driver_touched=True),
        node(State.UPGRADE_REQUIRED, name="n1"),
        node(State.UPGRADE_REQUIRED, name="n2"),
    ]
    resumed = replace(RUN, failed_accepted=1)
    assert [s.node for s in plan(resumed, nodes, replace(STRATEGY, max_unavailable=2), 0).steps] == ["n1"]
    # the uncordon policy gave n0 back: both budget slots are free
    back = [replace(nodes[0], cordoned=False), *nodes[1:]]
    strategy = replace(STRATEGY, max_unavailable=2, failed_nodes=UNCORDON)
    assert [s.node for s in plan(resumed, back, strategy, 0).steps] == ["n1", "n2"]


def test_a_run_resumed_past_failures_that_hold_the_budget_ends_instead_of_waiting_forever():
    nodes = [
        node(State.FAILED, name="n0", cordoned=True, driver_touched=True),
        node(State.UPGRADE_REQUIRED, name="n1"),
        node(State.UPGRADE_REQUIRED, name="n2"),
    ]
    assert plan(RUN, nodes, STRATEGY, 0).reason == "FailureBudgetExhausted"  # the budget pauses first
    result = plan(replace(RUN, failed_accepted=1), nodes, STRATEGY, 0)  # an operator resumed
    assert (result.phase, result.reason, result.steps) == (Phase.FAILED, "FailedNodesHoldBudget", [])
    assert result.message == (
        "Failed nodes kept cordoned (1) hold the whole maxUnavailable budget (1); "
        "2 nodes not upgraded. Retry or roll back."
    )


def test_an_outside_cordon_that_shares_the_budget_blocks_and_says_why():
    nodes = [
        node(State.FAILED, name="n0", cordoned=True, driver_touched=True),
        node(State.DONE, name="n1", cordoned=True, pre_cordoned=True),
        node(State.UPGRADE_REQUIRED, name="n2"),
    ]
    result = plan(replace(RUN, failed_accepted=1), nodes, replace(STRATEGY, max_unavailable=2), 0)
    assert (result.phase, result.reason) == (Phase.RUNNING, "Blocked")
    assert "2 nodes are unavailable (maxUnavailable 2; 1 of them failed and kept cordoned)" in result.message


KEPT = node(State.FAILED, name="n0", cordoned=True, driver_touched=True)


@pytest.mark.parametrize(
    "view, phase, policy, code",
    [
        (KEPT, Phase.RUNNING, KEEP, None),
        (KEPT, Phase.FAILED, KEEP, None),
        (KEPT, Phase.ABORTING, KEEP, None),
        (node(State.DRAIN_REQUIRED, cordoned=True), Phase.RUNNING, KEEP, "node_in_flight"),
        (node(State.VALIDATION_REQUIRED, cordoned=True), Phase.PAUSED, KEEP, "node_in_flight"),
        # a retry queued it, still cordoned: the run is about to move it
        (
            node(State.UPGRADE_REQUIRED, cordoned=True, driver_touched=True),
            Phase.RUNNING,
            KEEP,
            "node_in_flight",
        ),
        (node(State.UPGRADE_REQUIRED), Phase.PENDING, KEEP, "node_in_flight"),
        (node(State.UPGRADE_REQUIRED), Phase.FAILED, KEEP, "not_kept_cordoned"),
        (node(State.DONE), Phase.COMPLETED, KEEP, "not_kept_cordoned"),
        (node(State.FAILED), Phase.FAILED, KEEP, "not_kept_cordoned"),  # failed before its install
        (replace(KEPT, cordoned=False), Phase.FAILED, UNCORDON, "not_kept_cordoned"),
        (replace(KEPT, pre_cordoned=True), Phase.FAILED, KEEP, "cordoned_before_run"),
        (returned_to_service(KEPT), Phase.FAILED, KEEP, "not_kept_cordoned"),  # twice
    ],
)
def test_only_a_failed_node_the_run_keeps_cordoned_may_be_returned_to_service(view, phase, policy, code):
    refusal = return_refusal(view, phase, replace(STRATEGY, failed_nodes=policy))
    assert (refusal[0] if refusal else None) == code
    if refusal:
        assert f"Node {view.name} " in refusal[1]


def test_a_returned_node_no_longer_holds_the_budget_and_the_run_goes_on():
    nodes = [KEPT, node(State.UPGRADE_REQUIRED, name="n1"), node(State.UPGRADE_REQUIRED, name="n2")]
    resumed = replace(RUN, failed_accepted=1)
    assert plan(resumed, nodes, STRATEGY, 0).reason == "FailedNodesHoldBudget"
    back = returned_to_service(KEPT)
    assert (back.cordoned, back.driver_touched, back.returned, back.unavailable) == (
        False,
        False,
        True,
        False,
    )
    result = plan(resumed, [back, *nodes[1:]], STRATEGY, 0)
    assert (result.phase, [(s.node, s.to) for s in result.steps]) == (
        Phase.RUNNING,
        [("n1", State.CORDON_REQUIRED)],
    )


def test_the_run_never_touches_a_returned_node_again():
    """Cordoned again from outside, a returned node stays as it is; a failed node the run gave back
    itself is uncordoned until that works (the uncordon may have failed)."""
    recordoned = replace(returned_to_service(KEPT), cordoned=True)
    others = [node(State.DONE, name="z")]
    for phase in (Phase.RUNNING, Phase.ABORTING):
        assert (
            plan(replace(RUN, phase=phase, failed_accepted=1), [recordoned, *others], STRATEGY, 0).steps == []
        )
    given_back = node(State.FAILED, name="n0", cordoned=True)  # failed before its install
    step = plan(replace(RUN, failed_accepted=1), [given_back, *others], STRATEGY, 0).for_node("n0")
    assert (step.effect, step.reason) == (Effect.UNCORDON, "UncordonedAfterFailure")


def test_the_finished_run_counts_a_returned_node_failed_but_not_kept():
    nodes = [node(State.DONE, name="n0"), returned_to_service(replace(KEPT, name="n1"))]
    result = plan(replace(RUN, failed_accepted=1), nodes, STRATEGY, 0)
    assert (result.phase, result.reason, result.message) == (
        Phase.FAILED,
        "NodesFailed",
        "1 of 2 nodes failed; 1 node returned to service unvalidated.",
    )


@pytest.mark.parametrize("policy, kept", [(KEEP, 1), (UNCORDON, 0)])
def test_the_finished_run_counts_the_nodes_kept_cordoned(policy, kept):
    nodes = [node(State.DONE, name="n0"), node(State.FAILED, name="n1", driver_touched=True)]
    result = plan(replace(RUN, failed_accepted=1), nodes, replace(STRATEGY, failed_nodes=policy), 0)
    assert (result.phase, result.reason) == (Phase.FAILED, "NodesFailed")
    assert result.message == "1 of 2 nodes failed" + (
        "; 1 node kept cordoned (driver not validated): retry or roll back." if kept else "."
    )


def test_abort_leaves_kept_nodes_and_touched_retries_cordoned_and_says_so():
    aborting = replace(RUN, phase=Phase.ABORTING)
    nodes = [
        node(State.FAILED, name="n0", cordoned=True, driver_touched=True),  # kept after its install
        node(State.DRAIN_REQUIRED, name="n1", cordoned=True, driver_touched=True),  # its retry
        node(State.UPGRADE_REQUIRED, name="n2", cordoned=True, driver_touched=True),  # a retry waiting
        node(State.DRAIN_REQUIRED, name="n3", cordoned=True),  # first attempt, driver untouched
        node(State.UPGRADE_REQUIRED, name="n4", driver_touched=True),  # in service again: left alone
    ]
    result = plan(aborting, nodes, STRATEGY, 0)
    assert [(s.node, s.to, s.effect) for s in result.steps] == [
        ("n1", State.FAILED, Effect.NONE),
        ("n2", State.FAILED, Effect.NONE),
        ("n3", State.UPGRADE_REQUIRED, Effect.UNCORDON),
    ]
    assert all(s.message.endswith(KEPT_MESSAGE) for s in result.steps[:2])
    assert (result.phase, result.message) == (
        Phase.ABORTED,
        "The run was aborted; 3 nodes kept cordoned (driver not validated): retry or roll back.",
    )


def test_abort_under_the_uncordon_policy_gives_every_node_back():
    aborting = replace(RUN, phase=Phase.ABORTING)
    nodes = [
        node(State.DRAIN_REQUIRED, name="n1", cordoned=True, driver_touched=True),
        node(
            State.UPGRADE_REQUIRED, name="n2", cordoned=True, driver_touched=True
        ),  # an earlier run's cordon
    ]
    result = plan(aborting, nodes, replace(STRATEGY, failed_nodes=UNCORDON), 0)
    assert [(s.node, s.to, s.effect) for s in result.steps] == [
        ("n1", State.UPGRADE_REQUIRED, Effect.UNCORDON),
        ("n2", State.UPGRADE_REQUIRED, Effect.UNCORDON),
    ]
    assert (result.phase, result.message) == (Phase.ABORTED, "The run was aborted.")


def test_starts_no_more_than_max_unavailable_counting_nodes_already_out():
    nodes = [node(State.UPGRADE_REQUIRED, name=f"n{i}") for i in range(5)]
    nodes[3] = replace(nodes[3], ready=False)  # already unavailable: starting it costs nothing
    started = plan(RUN, nodes, replace(STRATEGY, max_unavailable=2), 0).steps
    assert [s.node for s in started] == ["n3", "n0"]
    assert all(s.to == State.CORDON_REQUIRED for s in started)


def test_nothing_starts_when_the_budget_is_used_by_nodes_already_unavailable():
    nodes = [node(State.UPGRADE_REQUIRED, name=f"n{i}", cordoned=i < 2, pre_cordoned=i < 2) for i in range(4)]
    started = {s.node for s in plan(RUN, nodes, replace(STRATEGY, max_unavailable=1), 0).steps}
    assert started == {"n0", "n1"}  # both already out; no available node may go


def test_canary_goes_first_then_bakes_then_the_rest():
    strategy = replace(STRATEGY, max_unavailable=3, canary_nodes=1, canary_bake_s=30)
    nodes = [node(State.UPGRADE_REQUIRED, name=f"n{i}", canary=i == 0) for i in range(3)]
    assert [s.node for s in plan(RUN, nodes, strategy, 0).steps] == ["n0"]
    nodes[0] = replace(nodes[0], state=State.UNCORDON_REQUIRED)
    result = plan(RUN, nodes, strategy, 100)
    assert [s.node for s in result.steps] == ["n0"] and result.canary_done_at == 100
    nodes[0] = replace(nodes[0], state=State.DONE)
    baking = replace(RUN, canary_done_at=100)
    assert plan(baking, nodes, strategy, 129).steps == []
    assert {s.node for s in plan(baking, nodes, strategy, 130).steps} == {"n1", "n2"}


def test_canary_waits_for_approval():
    strategy = replace(STRATEGY, max_unavailable=3, canary_nodes=1, canary_approval=True)
    nodes = [node(State.DONE, name="n0", canary=True), node(State.UPGRADE_REQUIRED, name="n1")]
    waiting = plan(replace(RUN, canary_done_at=0), nodes, strategy, 10_000)
    assert waiting.steps == [] and "approval" in waiting.message
    approved = plan(replace(RUN, canary_done_at=0, approved=True), nodes, strategy, 10_000)
    assert [s.node for s in approved.steps] == ["n1"]


def test_failed_canary_pauses_the_run():
    strategy = replace(STRATEGY, max_unavailable=3, canary_nodes=1, failure_budget=5)
    nodes = [
        node(State.VALIDATION_REQUIRED, name="n0", canary=True, install_failure="x"),
        node(State.UPGRADE_REQUIRED, name="n1"),
    ]
    result = plan(RUN, nodes, strategy, 0)
    assert result.phase == Phase.PAUSED and result.reason == "CanaryFailed"


def test_a_failed_canary_resumed_past_bakes_then_lets_the_rest_go():
    """Before, only an upgraded canary started the bake: a failed one, resumed past, kept the gate shut
    for ever (found by the property test once it resumed its pauses)."""
    strategy = replace(STRATEGY, max_unavailable=3, canary_nodes=1, canary_bake_s=30, failure_budget=5)
    nodes = [
        node(State.VALIDATION_REQUIRED, name="n0", canary=True, install_failure="x", cordoned=True),
        node(State.UPGRADE_REQUIRED, name="n1"),
    ]
    paused = plan(RUN, nodes, strategy, 100)
    assert (paused.phase, paused.reason, paused.canary_done_at) == (Phase.PAUSED, "CanaryFailed", 100)
    nodes[0] = replace(nodes[0], state=State.FAILED, driver_touched=True)
    resumed = replace(RUN, failed_accepted=1, canary_done_at=100)
    assert plan(resumed, nodes, strategy, 129).steps == []
    assert [s.node for s in plan(resumed, nodes, strategy, 130).steps] == ["n1"]


def test_failure_budget_pauses_and_resume_accepts_the_failures_seen():
    strategy = replace(STRATEGY, max_unavailable=2, failure_budget=1)
    nodes = [node(State.FAILED, name="n0"), node(State.UPGRADE_REQUIRED, name="n1")]
    assert plan(RUN, nodes, strategy, 0).reason == "FailureBudgetExhausted"
    resumed = plan(replace(RUN, failed_accepted=1), nodes, strategy, 0)
    assert resumed.phase == Phase.RUNNING and [s.node for s in resumed.steps] == ["n1"]


def test_abort_hands_back_nodes_before_install_and_finishes_installs():
    aborting = replace(RUN, phase=Phase.ABORTING)
    nodes = [
        node(State.DRAIN_REQUIRED, name="n0", cordoned=True),
        node(State.VALIDATION_REQUIRED, name="n1", cordoned=True, busy=True),
        node(State.UPGRADE_REQUIRED, name="n2"),
    ]
    result = plan(aborting, nodes, STRATEGY, 0)
    assert [(s.node, s.to, s.effect) for s in result.steps] == [
        ("n0", State.UPGRADE_REQUIRED, Effect.UNCORDON)
    ]
    assert result.phase == Phase.ABORTING  # n1's install is still running
    nodes = [
        replace(nodes[0], state=State.UPGRADE_REQUIRED, cordoned=False),
        replace(nodes[1], state=State.DONE, cordoned=False),
        nodes[2],
    ]
    assert plan(aborting, nodes, STRATEGY, 0).phase == Phase.ABORTED


@pytest.mark.parametrize("failed, phase", [(0, Phase.COMPLETED), (1, Phase.FAILED)])
def test_run_finishes_when_no_node_is_left(failed, phase):
    nodes = [node(State.DONE, name="n0"), node(State.FAILED if failed else State.DONE, name="n1")]
    assert plan(replace(RUN, failed_accepted=failed), nodes, STRATEGY, 0).phase == phase


def test_paused_run_starts_nothing_but_finishes_in_flight_nodes():
    paused = replace(RUN, phase=Phase.PAUSED)
    nodes = [node(State.CORDON_REQUIRED, name="n0"), node(State.UPGRADE_REQUIRED, name="n1")]
    assert [s.node for s in plan(paused, nodes, replace(STRATEGY, max_unavailable=2), 0).steps] == ["n0"]


@pytest.mark.parametrize("phase", [Phase.PENDING, Phase.COMPLETED, Phase.ABORTED])
def test_settled_runs_do_nothing(phase):
    assert plan(replace(RUN, phase=phase), [node(State.CORDON_REQUIRED)], STRATEGY, 0).steps == []


@settings(max_examples=80, deadline=None)
@given(
    nodes=st.integers(1, 40),
    max_unavailable=st.integers(1, 6),
    canary=st.integers(0, 3),
    failure_rate=st.floats(0, 0.5),
    drain_failure_rate=st.floats(0, 0.5),
    failure_budget=st.integers(1, 4),
    failed_nodes=st.sampled_from(FailedNodes),
    resume=st.booleans(),
    return_rate=st.sampled_from([0.0, 0.3]),
    pre_cordoned=st.frozensets(st.integers(0, 39), max_size=4),
    claims=st.dictionaries(st.integers(0, 39), st.integers(1, 3), max_size=10),
    seed=st.integers(0, 1000),
)
def test_simulated_runs_keep_the_invariants_at_every_tick(
    nodes,
    max_unavailable,
    canary,
    failure_rate,
    drain_failure_rate,
    failure_budget,
    failed_nodes,
    resume,
    return_rate,
    pre_cordoned,
    claims,
    seed,
):
    strategy = Strategy(
        max_unavailable=max_unavailable,
        canary_nodes=canary,
        canary_bake_s=7,
        drain_timeout_s=20,
        failure_budget=failure_budget,
        failed_nodes=failed_nodes,
    )
    outcome = run_simulation(
        nodes,
        strategy,
        Durations(cordon=2, evict=3, install=10),
        failure_rate=failure_rate,
        drain_failure_rate=drain_failure_rate,
        pre_cordoned=frozenset(i for i in pre_cordoned if i < nodes),
        claims=claims,
        seed=seed,
        resume=resume,
        return_rate=return_rate,  # a person returns kept nodes to service between ticks
        max_ticks=5_000,  # a run that waits forever would hit this
    )
    # every tick: within max_unavailable; no install under claims; a failed node cordoned exactly
    # when its driver was touched (keep-cordoned) or it was cordoned before the run; a node returned
    # to service never moved, cordoned or uncordoned by the run again
    assert outcome.violations == []
    if not return_rate:
        assert outcome.returned == 0
    assert outcome.ticks < 5_000
    out_before = len([i for i in pre_cordoned if i < nodes])
    if failed_nodes == FailedNodes.UNCORDON:
        assert outcome.kept_cordoned == 0
    if outcome.blocked:  # only a cordon from outside the run waits: the run's own failures end it
        assert out_before >= 1 and out_before + outcome.kept_cordoned >= max_unavailable
    elif outcome.failed == 0:
        assert outcome.phase == Phase.COMPLETED
    elif resume:  # resumed past every pause, the run finishes
        assert outcome.phase == Phase.FAILED
        if outcome.reason == "FailedNodesHoldBudget":
            assert outcome.kept_cordoned >= max_unavailable
    else:
        assert outcome.phase in (Phase.FAILED, Phase.PAUSED)


def test_makespan_is_close_to_the_critical_path():
    durations = Durations(cordon=5, evict=30, install=120)
    outcome = run_simulation(50, Strategy(max_unavailable=5), durations)
    lower_bound = 10 * durations.per_node
    assert outcome.phase == Phase.COMPLETED and lower_bound <= outcome.makespan <= 1.1 * lower_bound


@pytest.mark.parametrize(
    ("text", "parsed", "of_ten"),
    [
        ("0", (0, False), 0),
        ("1", (1, False), 1),
        ("3", (3, False), 3),
        ("0%", (0, True), 0),
        ("10%", (10, True), 1),
        ("25%", (25, True), 3),
    ],
)
def test_max_unavailable_and_max_surge_are_a_count_or_a_percent_rounded_up(text, parsed, of_ten):
    assert parse_nodes(text) == parsed
    assert nodes_of(text, 10) == of_ten
    assert nodes_of(text, 0) == (1 if parsed[1] and parsed[0] else parsed[0])  # a percent is at least 1


@pytest.mark.parametrize("text", ["", "101%", "-1", "1.5", "%", "x", "12345", "2\n", "10%\n", " 2"])
def test_max_unavailable_refuses_anything_else(text):
    with pytest.raises(ValueError):
        parse_nodes(text)


@pytest.mark.parametrize(
    ("values", "refused"),
    [
        ({"max_unavailable": "0"}, "max_unavailable"),
        ({"max_unavailable": "0%", "max_surge": "0"}, "max_unavailable"),
        ({"max_unavailable": "0", "max_surge": "1"}, None),
        ({"max_surge": "10%"}, None),
        ({"max_surge": "x"}, "max_surge"),
    ],
)
def test_max_unavailable_is_zero_only_with_a_surge(values, refused):
    error = strategy_error(values, 10)
    assert (error[0] if error else None) == refused


# --- the run's lifecycle table ------------------------------------------------------------------------


def test_each_control_and_phase_has_at_most_one_row():
    rows = [(m.by, phase) for m in LIFECYCLE if m.by != TICK for phase in m.source]
    assert len(rows) == len(set(rows))
    assert {m.by for m in LIFECYCLE} == {*Control, TICK}


@pytest.mark.parametrize(
    ("control", "facts", "expected"),
    [
        (Control.START, RunFacts(Phase.PENDING), (Phase.RUNNING, "Started", "The run started.")),
        (Control.START, RunFacts(Phase.RUNNING), ("cannot_start", "Cannot start a run that is running.")),
        (Control.PAUSE, RunFacts(Phase.PAUSED), ("cannot_pause", "Cannot pause a run that is paused.")),
        (
            Control.RESUME,
            RunFacts(Phase.PAUSED, failed=2),
            (Phase.RUNNING, "Resumed", "Resumed; 2 failed nodes accepted."),
        ),
        (Control.ABORT, RunFacts(Phase.PENDING), (Phase.ABORTED, "Aborted", "Aborted before it started.")),
        (
            Control.ABORT,
            RunFacts(Phase.RUNNING, in_flight=2, kept=1),
            (
                Phase.ABORTING,
                "Aborting",
                "Aborting: 2 nodes not yet on the new driver go back into service; installs under way "
                "finish; failed nodes kept cordoned (driver not validated): 1.",
            ),
        ),
        (Control.ABORT, RunFacts(Phase.ABORTING), ("cannot_abort", "Cannot abort a run that is aborting.")),
        (
            Control.RETRY,
            RunFacts(Phase.FAILED, failed=3),
            (Phase.RUNNING, "Retry", "Retrying 3 failed nodes."),
        ),
        (
            Control.RETRY,
            RunFacts(Phase.RUNNING),
            ("cannot_retry", "Cannot retry a run that is running: it has no failed nodes to retry"),
        ),
        (
            Control.RETRY,
            RunFacts(Phase.ABORTING, failed=1),
            ("cannot_retry", "Cannot retry a run that is aborting."),
        ),
        (
            Control.RETRY,
            RunFacts(Phase.FAILED, failed=1, pool_busy=True),
            ("upgrade_in_progress", "The pool has another upgrade in progress."),
        ),
        (
            Control.RETRY,
            RunFacts(Phase.PAUSED, failed=1, taken_over=True),
            (
                "cannot_retry",
                "Cannot retry a run that is paused: a later run of the pool took its nodes over",
            ),
        ),
        (
            Control.APPROVE,
            RunFacts(Phase.RUNNING, canary_approval=True, canaries_settled=False),
            ("cannot_approve", "Cannot approve a run that is running: its canary nodes are still upgrading"),
        ),
        (
            Control.APPROVE,
            RunFacts(Phase.PAUSED, canary_approval=True),
            (Phase.RUNNING, "CanaryApproved", "Canary approved; the rest of the pool follows."),
        ),
        (
            Control.ROLLBACK,
            RunFacts(Phase.RUNNING),
            (
                "cannot_rollback",
                "Cannot rollback a run that is running: abort it first (installs under way finish), then "
                "roll back",
            ),
        ),
        (Control.ROLLBACK, RunFacts(Phase.FAILED), (None, "", "")),
    ],
)
def test_control_move_is_the_row_its_phase_allows_or_why_not(control, facts, expected):
    move = control_move(control, facts)
    if isinstance(move, ControlRefusal):
        assert (move.code, move.message) == expected
    else:
        assert isinstance(move, LifecycleMove) and (move.to, move.reason, move.message) == expected


def test_approving_a_paused_run_accepts_its_failures_and_leaves_its_message():
    move = control_move(Control.APPROVE, RunFacts(Phase.PAUSED, canary_approval=True))
    assert move.approves and move.accepts_failed and move.history_only


def test_every_phase_change_of_the_plan_is_a_row_of_the_table():
    assert tick_move(Phase.RUNNING, Phase.PAUSED, "FailureBudgetExhausted").to == Phase.PAUSED
    with pytest.raises(ValueError):
        tick_move(Phase.ABORTING, Phase.COMPLETED, "AllNodesUpgraded")


def test_a_rollout_has_its_own_three_controls():
    assert rollout_move("pause", Phase.RUNNING).to == Phase.PAUSED
    refused = rollout_move("resume", Phase.COMPLETED)
    assert (refused.code, refused.message, refused.with_status) == (
        "cannot_resume",
        "Cannot resume a rollout that is completed.",
        False,
    )
