"""Celery entry points of driver upgrades (queue `upgrades`). Each tick is short and idempotent; it
re-queues the next one itself, and beat's resync restarts runs whose chain was lost (a killed worker)."""

from celery import shared_task
from django.db.models import Q

from audit.context import acting_as

from . import controller, rollouts
from .machine import LIVE
from .models import FleetRollout, UpgradeRun


@shared_task(acks_late=True)
def tick_run(run_id: int, seq: int) -> None:
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
    return restarted


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
