"""A virtual fleet for the pure state machine: fixed step durations, injectable failures, a virtual
clock. The property tests and bench/upgrades.py drive `node_machine.plan` through it, tick by tick, and
check the invariants after every tick."""

import random
import time
from dataclasses import dataclass, field, replace

from .node_machine import (
    ACTIVE,
    Effect,
    NodeView,
    RunView,
    State,
    keeps_cordoned,
    plan,
    return_refusal,
    returned_to_service,
    unavailable_count,
)
from .run_lifecycle import LIVE, Phase, tick_move
from .strategy import Strategy


@dataclass(frozen=True)
class Durations:
    """Seconds each provider operation keeps a node busy."""

    cordon: float = 5
    evict: float = 30
    install: float = 120
    uncordon: float = 0  # an API call; the node is back in service at once

    def of(self, effect: Effect) -> float:
        return {Effect.CORDON: self.cordon, Effect.EVICT: self.evict, Effect.INSTALL: self.install}.get(
            effect, self.uncordon if effect == Effect.UNCORDON else 0
        )

    @property
    def per_node(self) -> float:
        """The least time one node can take: its operations back to back."""
        return self.cordon + self.evict + self.install + self.uncordon


@dataclass
class VirtualNode:
    """A node of the virtual fleet: what the plan sees of it, when its operation ends, its faults."""

    view: NodeView
    busy_until: float = 0
    fails_install: bool = False
    fails_drain: bool = False  # its claims cannot be evicted (a PodDisruptionBudget that never allows it)


@dataclass
class SimulationOutcome:
    """What one simulated run came to: its timing, its end and the invariants it broke (if any)."""

    makespan: float
    ticks: int
    node_steps: int
    phase: Phase
    max_unavailable_seen: int
    blocked: bool  # stopped: nodes unavailable outside the run hold the whole budget
    plan_cpu_s: float
    violations: list[str] = field(default_factory=list)
    reason: str = ""  # of the last phase change
    failed: int = 0
    kept_cordoned: int = 0  # failed nodes left cordoned because their driver was touched
    returned: int = 0  # kept nodes a person returned to service during the run


def run_simulation(
    nodes: int,
    strategy: Strategy,
    durations: Durations = Durations(),
    tick_s: float = 1.0,
    failure_rate: float = 0.0,
    pre_cordoned: frozenset[int] = frozenset(),
    claims: dict[int, int] | None = None,
    seed: int = 0,
    max_ticks: int = 1_000_000,
    drain_failure_rate: float = 0.0,
    resume: bool = False,
    return_rate: float = 0.0,
) -> SimulationOutcome:
    """Upgrade `nodes` nodes from 1.0 to 2.0 with a tick every `tick_s` virtual seconds. With `resume`,
    an operator resumes every pause at once (accepting the failures so far) instead of ending there.
    With `return_rate`, after each tick of a live run a person returns each node the run keeps cordoned
    to service with that probability (as the service does: only when `return_refusal` allows it)."""
    rng = random.Random(seed)
    claims = claims or {}
    fleet = {
        f"n{i:05d}": VirtualNode(
            NodeView(
                name=f"n{i:05d}",
                state=State.UPGRADE_REQUIRED,
                entered_at=0,
                canary=i < strategy.canary_nodes,
                pre_cordoned=i in pre_cordoned,
                cordoned=i in pre_cordoned,
                claims=claims.get(i, 0),
                driver_version="1.0",
            ),
            fails_install=rng.random() < failure_rate,
            fails_drain=i in claims and rng.random() < drain_failure_rate,
        )
        for i in range(nodes)
    }
    run = RunView(phase=Phase.RUNNING, target_version="2.0")
    limit = max(strategy.max_unavailable, len(pre_cordoned))
    now, ticks, steps, high = 0.0, 0, 0, 0
    violations: list[str] = []
    blocked = False
    reason = ""
    plan_cpu = 0.0
    returned = 0
    while run.phase not in (Phase.COMPLETED, Phase.FAILED, Phase.ABORTED, Phase.PAUSED) and ticks < max_ticks:
        views = [replace(n.view, busy=n.busy_until > now) for n in fleet.values()]
        started = time.process_time()
        result = plan(run, views, strategy, now)
        plan_cpu += time.process_time() - started
        for step in result.steps:
            node = fleet[step.node]
            view = node.view
            if view.returned:
                violations.append(f"t={now}: {step.node} was returned to service, yet the run moved it")
            if step.effect == Effect.INSTALL and view.claims:
                violations.append(f"{step.node}: driver installed with {view.claims} claims on it")
            if step.effect != Effect.NONE:
                node.busy_until = now + durations.of(step.effect)
            cordoned = {Effect.CORDON: True, Effect.UNCORDON: False}.get(step.effect, view.cordoned)
            view = replace(
                view,
                state=step.to,
                cordoned=cordoned,
                entered_at=now if step.to != view.state else view.entered_at,
                # the shell's record: an install started and not validated since
                driver_touched=(view.driver_touched or step.effect == Effect.INSTALL)
                and step.to != State.UNCORDON_REQUIRED,
            )
            if step.effect == Effect.EVICT and not node.fails_drain:
                view = replace(view, claims=0)
            if step.effect == Effect.INSTALL:
                if node.fails_install:
                    view = replace(view, install_failure="SimulatedInstallFailure")
                else:
                    view = replace(view, driver_version="2.0")
            node.view = view
            steps += 1
        if result.phase != run.phase:  # as the controller records it: a row of the lifecycle table
            tick_move(run.phase, result.phase, result.reason)
        run = replace(run, phase=result.phase, canary_done_at=result.canary_done_at)
        reason = result.reason or reason
        if result.reason == "Blocked":
            blocked = True
            break
        for node in fleet.values() if return_rate and run.phase in LIVE else ():  # while it runs
            if rng.random() < return_rate and return_refusal(node.view, run.phase, strategy) is None:
                node.view = returned_to_service(node.view)
                returned += 1
        views = [n.view for n in fleet.values()]
        unavailable = unavailable_count(views)
        high = max(high, unavailable)
        if unavailable > limit:
            violations.append(f"t={now}: {unavailable} nodes unavailable, limit {limit}")
        violations += _failed_node_violations(views, strategy, now)
        if resume and run.phase == Phase.PAUSED:
            run = replace(
                run, phase=Phase.RUNNING, failed_accepted=sum(v.state == State.FAILED for v in views)
            )
        ticks += 1
        if run.phase in (Phase.RUNNING,) or any(n.view.state in ACTIVE for n in fleet.values()):
            now += tick_s
    kept_count = 0
    for node in fleet.values():
        view = node.view
        kept = view.state == State.FAILED and keeps_cordoned(strategy.failed_nodes, view.driver_touched)
        kept_count += kept
        if view.returned and (view.cordoned or view.state != State.FAILED):
            violations.append(f"{view.name}: returned to service, then cordoned={view.cordoned} {view.state}")
        if view.cordoned != (view.pre_cordoned or kept) and run.phase != Phase.PAUSED and not blocked:
            violations.append(
                f"{view.name}: cordoned={view.cordoned} at the end, before={view.pre_cordoned}, kept={kept}"
            )
        if run.phase == Phase.COMPLETED and view.driver_version != "2.0":
            violations.append(f"{view.name}: on {view.driver_version} after a completed run")
    failed = sum(n.view.state == State.FAILED for n in fleet.values())
    return SimulationOutcome(
        now,
        ticks,
        steps,
        run.phase,
        high,
        blocked,
        plan_cpu,
        violations,
        reason,
        failed,
        kept_count,
        returned,
    )


def _failed_node_violations(views: list[NodeView], strategy: Strategy, now: float) -> list[str]:
    """After every tick: a failed node whose driver was touched is cordoned (under keep-cordoned); any
    other failed node is back in service unless it was cordoned before the run."""
    found = []
    for view in views:
        if view.state != State.FAILED:
            continue
        kept = keeps_cordoned(strategy.failed_nodes, view.driver_touched)
        if kept and not view.cordoned:
            found.append(f"t={now}: {view.name} failed after its install and is in service")
        if not kept and view.cordoned and not view.pre_cordoned:
            found.append(f"t={now}: {view.name} failed before its install and is still cordoned")
    return found
