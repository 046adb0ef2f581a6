"""Table tests of the pure upgrade state machine, and invariants over simulated runs with failures."""

from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from upgrades.machine import Effect, NodeView, Phase, RunView, State, Strategy, plan
from upgrades.simulate import Durations, run_simulation

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
        (node(State.DONE), 0, None),
    ],
)
def test_each_state_takes_one_step(view, now, expected):
    others = [node(State.DONE, name="z")]  # keeps the run from finishing or starting anything
    step = plan(RUN, [view, *others], replace(STRATEGY, failure_budget=5), now).for_node("a")
    assert (step and (step.to, step.effect, step.reason)) == (expected or None)


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
    strategy = replace(STRATEGY, max_unavailable=3, canary=1, canary_bake_s=30)
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
    strategy = replace(STRATEGY, max_unavailable=3, canary=1, canary_approval=True)
    nodes = [node(State.DONE, name="n0", canary=True), node(State.UPGRADE_REQUIRED, name="n1")]
    waiting = plan(replace(RUN, canary_done_at=0), nodes, strategy, 10_000)
    assert waiting.steps == [] and "approval" in waiting.message
    approved = plan(replace(RUN, canary_done_at=0, approved=True), nodes, strategy, 10_000)
    assert [s.node for s in approved.steps] == ["n1"]


def test_failed_canary_pauses_the_run():
    strategy = replace(STRATEGY, max_unavailable=3, canary=1, failure_budget=5)
    nodes = [
        node(State.VALIDATION_REQUIRED, name="n0", canary=True, install_failure="x"),
        node(State.UPGRADE_REQUIRED, name="n1"),
    ]
    result = plan(RUN, nodes, strategy, 0)
    assert result.phase == Phase.PAUSED and result.reason == "CanaryFailed"


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


@settings(max_examples=60, deadline=None)
@given(
    nodes=st.integers(1, 40),
    max_unavailable=st.integers(1, 6),
    canary=st.integers(0, 3),
    failure_rate=st.floats(0, 0.5),
    pre_cordoned=st.frozensets(st.integers(0, 39), max_size=4),
    claims=st.dictionaries(st.integers(0, 39), st.integers(1, 3), max_size=10),
    seed=st.integers(0, 1000),
)
def test_simulated_runs_keep_the_invariants_at_every_tick(
    nodes, max_unavailable, canary, failure_rate, pre_cordoned, claims, seed
):
    strategy = Strategy(max_unavailable=max_unavailable, canary=canary, canary_bake_s=7, failure_budget=1000)
    outcome = run_simulation(
        nodes,
        strategy,
        Durations(cordon=2, evict=3, install=10),
        failure_rate=failure_rate,
        pre_cordoned=frozenset(i for i in pre_cordoned if i < nodes),
        claims=claims,
        seed=seed,
    )
    assert outcome.violations == []
    out_before = len([i for i in pre_cordoned if i < nodes])
    if outcome.blocked:  # only nodes cordoned before the run can hold the whole budget
        assert out_before >= max_unavailable
    else:
        assert outcome.phase == Phase.COMPLETED or failure_rate > 0  # a failed canary pauses
        assert outcome.phase in (Phase.COMPLETED, Phase.FAILED, Phase.PAUSED)


def test_makespan_is_close_to_the_critical_path():
    durations = Durations(cordon=5, evict=30, install=120)
    outcome = run_simulation(50, Strategy(max_unavailable=5), durations)
    lower_bound = 10 * durations.per_node
    assert outcome.phase == Phase.COMPLETED and lower_bound <= outcome.makespan <= 1.1 * lower_bound
