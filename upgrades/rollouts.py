"""Fleet rollouts: one target release over many pools (every tenant's), a wave of pools at a time. Each
pool gets an ordinary UpgradeRun; the rollout starts the next wave when every run of the current one
completed, and pauses when one did not."""

import hashlib
import json
from dataclasses import dataclass

from django.db import transaction

from catalog.models import DriverRelease, GpuModel
from nodepools.models import NodePool
from nvke.errors import Conflict, DomainError

from . import events
from .compatibility import upgrade_refusals
from .models import FleetRollout, UpgradeRun
from .run_lifecycle import FINISHED, LIVE, ControlRefusal, Phase, rollout_move, takes
from .services import control, create_run, validate_strategy


def matching_pools(target: DriverRelease, gpu_model: GpuModel | None, from_branch: int | None):
    pools = NodePool.objects.exclude(status=NodePool.Status.DELETING).select_related(
        "gpu_model__architecture", "driver_release", "cluster__tenant"
    )
    if gpu_model is not None:
        pools = pools.filter(gpu_model=gpu_model)
    if from_branch is not None:
        pools = pools.filter(driver_release__branch=from_branch)
    return pools.exclude(driver_release=target).order_by("cluster__tenant_id", "cluster__name", "name")


BUSY = ("upgrade_in_progress", "Another upgrade of this pool is running or waiting.")
# The controls of one run an operator uses from the rollout (services.control, as the tenant's pages and
# API do): pause, resume and abort act on the whole rollout instead, so that its waves stay consistent.
RUN_CONTROLS = ("retry", "approve")


@dataclass(frozen=True)
class RolloutPlan:
    waves: list[list[NodePool]]  # the pools that get a run, wave by wave
    skipped: list[dict]  # {pool, name, rule, message}: matching pools that cannot take the target now

    def digest(self) -> str:
        """Names this plan's waves and skipped pools: a confirmation carries the one it was shown."""
        shape = [
            [[pool.pk for pool in wave] for wave in self.waves],
            [[s["pool"], s["rule"]] for s in self.skipped],
        ]
        return hashlib.sha256(json.dumps(shape).encode()).hexdigest()[:16]


class PlanChanged(Conflict):
    """The fleet changed between the preview and its confirmation: `plan` is the new one to review."""

    code = "plan_changed"

    def __init__(self, plan: RolloutPlan) -> None:
        super().__init__(
            "The fleet changed since the preview (pools added, upgraded or busy): review the new plan.",
            field="plan",
        )
        self.plan = plan


def plan_rollout(
    target_release: DriverRelease,
    gpu_model: GpuModel | None = None,
    from_branch: int | None = None,
    pools_per_wave: int = 1,
    **strategy,
) -> RolloutPlan:
    """Which matching pools a rollout would upgrade, in which wave, and which it would skip and why; bad
    input is a DomainError naming its field. Reads only: the preview shows it, create_rollout carries it
    out."""
    if pools_per_wave < 1:
        raise DomainError("pools_per_wave is at least 1.", field="pools_per_wave")
    # canary_nodes is capped at each pool's size when its run is made; the other fields hold for all.
    validate_strategy({**strategy, "canary_nodes": 0}, 0)
    releases = list(DriverRelease.objects.all())
    # A pool with an unfinished run (live, or pending in a later wave of another rollout) is busy.
    busy = set(UpgradeRun.objects.exclude(status__in=list(FINISHED)).values_list("pool_id", flat=True))
    pools, skipped = [], []
    for pool in matching_pools(target_release, gpu_model, from_branch):
        refusals = upgrade_refusals(pool, target_release, releases=releases)
        if refusals or pool.pk in busy:
            rule, message = (refusals[0].rule, refusals[0].message) if refusals else BUSY
            skipped.append({"pool": pool.pk, "name": str(pool), "rule": rule, "message": message})
        else:
            pools.append(pool)
    waves = [pools[i : i + pools_per_wave] for i in range(0, len(pools), pools_per_wave)]
    return RolloutPlan(waves=waves, skipped=skipped)


def create_rollout(
    *,
    target_release: DriverRelease,
    gpu_model: GpuModel | None = None,
    from_branch: int | None = None,
    pools_per_wave: int = 1,
    user=None,
    previewed: str | None = None,
    **strategy,
) -> FleetRollout:
    """Plan the rollout: each compatible matching pool gets a pending run in its wave; the others are
    listed as skipped with the rule they break. The first wave starts at once. Bad input is refused
    before anything is written, and so is a plan that is no longer the `previewed` one (its digest)."""
    plan = plan_rollout(target_release, gpu_model, from_branch, pools_per_wave, **strategy)
    if previewed is not None and previewed != plan.digest():
        raise PlanChanged(plan)
    with transaction.atomic():
        rollout = FleetRollout.objects.create(
            target_release=target_release,
            gpu_model=gpu_model,
            from_branch=from_branch,
            pools_per_wave=pools_per_wave,
            strategy=strategy,
            skipped=plan.skipped,
            created_by=user,
        )
        for wave, pools in enumerate(plan.waves):
            for pool in pools:
                create_run(
                    context=None,
                    pool=pool,
                    target_release=target_release,
                    user=user,
                    start=False,
                    rollout=rollout,
                    wave=wave,
                    **{**strategy, "canary_nodes": min(strategy.get("canary_nodes", 0), pool.nodes.count())},
                )
        events.publish_rollout(rollout)
    advance(rollout.pk)
    return rollout


def advance(rollout_id: int) -> None:
    """Level-triggered: start the current wave's pending runs; when they all completed, the next wave;
    pause on a failed run; finish when no wave is left."""
    with transaction.atomic():
        rollout = FleetRollout.objects.select_for_update().filter(pk=rollout_id).first()
        if rollout is None or rollout.status != Phase.RUNNING:
            return
        before = (rollout.status, rollout.wave)
        while True:
            wave = list(rollout.runs.filter(wave=rollout.wave))
            if not wave:
                rollout.status = (
                    Phase.COMPLETED
                    if not rollout.runs.exclude(status=Phase.COMPLETED).exists()
                    else Phase.FAILED
                )
                break
            if any(r.status in (Phase.FAILED, Phase.PAUSED, Phase.ABORTED) for r in wave):
                rollout.status = Phase.PAUSED
                break
            for run in wave:
                if run.status == Phase.PENDING:
                    control(run, "start")
            if all(r.status == Phase.COMPLETED for r in wave):
                rollout.wave += 1
                continue
            break
        rollout.save()
        if (rollout.status, rollout.wave) != before:
            events.publish_rollout(rollout)


def control_rollout(rollout: FleetRollout, action: str) -> FleetRollout:
    """pause / resume / abort a rollout: it stops or restarts its waves and passes the control on to its
    live runs."""
    move = rollout_move(action, Phase(rollout.status))
    if isinstance(move, ControlRefusal):
        raise Conflict(move.message, code=move.code)
    with transaction.atomic():
        rollout = FleetRollout.objects.select_for_update().get(pk=rollout.pk)
        for run in rollout.runs.filter(status__in=[*LIVE, Phase.PENDING]):
            if takes(action, Phase(run.status)):  # a run aborting on its own already is left to it
                control(run, action)
        rollout.status = move.to
        rollout.save()
        events.publish_rollout(rollout)
    if action == "resume":
        advance(rollout.pk)
    return rollout
