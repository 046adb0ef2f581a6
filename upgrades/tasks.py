"""Celery entry points of rolling upgrades and control plane upgrades (queue `upgrades`). Each tick is
short and idempotent; it re-queues the next one itself, and beat's resync restarts runs whose chain was
lost (a killed worker), steps control plane upgrades in flight and starts the automatic upgrades due."""

from celery import shared_task
from django.conf import settings
from django.db.models import Q

from audit.context import acting_as
from clusters.models import Cluster
from clusters.tasks import tenant_of_cluster
from nvke import tenant_slots

from . import auto_upgrade, control_plane, controller, rollouts
from .models import FleetRollout, UpgradeRun
from .run_lifecycle import LIVE


def tenant_of_run(run_id: int, seq: int) -> int | None:
    return UpgradeRun.objects.filter(pk=run_id).values_list("tenant_id", flat=True).first()


@shared_task(bind=True, acks_late=True)
@tenant_slots.limited(tenant_of_run)
def tick_run(self, run_id: int, seq: int) -> None:
    with acting_as(f"upgrade run {run_id}"):  # what its steps change (cordons, moved claims) is the run's
        next_seq = controller.tick(run_id, seq)
    if next_seq is not None:
        controller.schedule_tick(run_id, next_seq)


@shared_task
def resync_runs() -> int:
    """Beat: give every live run whose ticks stopped (a worker died mid-tick) its next tick; and move
    fleet rollouts on. Returns how many runs were restarted."""
    stale = controller.stale_before()
    runs = UpgradeRun.objects.filter(status__in=list(LIVE)).filter(
        Q(ticked_at__isnull=True) | Q(ticked_at__lt=stale)
    )
    restarted = 0
    for run_id, seq in runs.values_list("pk", "tick_seq"):
        tick_run.delay(run_id, seq)
        restarted += 1
    for rollout_id in FleetRollout.objects.filter(status__in=list(LIVE)).values_list("pk", flat=True):
        rollouts.advance(rollout_id)
    for cluster_id in Cluster.objects.filter(kubernetes_target__isnull=False).values_list("pk", flat=True):
        step_control_plane.delay(cluster_id)
    with acting_as("automatic upgrades"):
        auto_upgrade.step()
    return restarted


@shared_task(bind=True, acks_late=True)
@tenant_slots.limited(tenant_of_cluster)
def step_control_plane(self, cluster_id: int) -> None:
    """One step of a control plane upgrade; the next is queued until it is over. Eager (the embedded
    default) queues none, which would recurse: its simulator finishes in one step."""
    with acting_as(f"control plane upgrade of cluster {cluster_id}"):
        over = control_plane.step(cluster_id)
    if not over and not step_control_plane.app.conf.task_always_eager:
        step_control_plane.apply_async((cluster_id,), countdown=settings.NVKE_UPGRADE_TICK_S)


@shared_task
def kick_cluster_runs(cluster_id: int) -> int:
    """kube_sync saw a driver or validator pod, or an NVIDIADriver, change: tick the cluster's live runs
    now rather than at their next tick. A tick of a number already taken does nothing, so this only
    makes a step sooner. Returns how many runs were kicked."""
    runs = UpgradeRun.objects.filter(pool__cluster_id=cluster_id, status__in=list(LIVE))
    kicked = 0
    for run_id, seq in runs.values_list("pk", "tick_seq"):
        controller.schedule_tick(run_id, seq, 0)
        kicked += 1
    return kicked


@shared_task(acks_late=True)
def advance_rollout(rollout_id: int) -> None:
    """One of the rollout's runs ended or paused: start its next wave, or end it."""
    rollouts.advance(rollout_id)
