"""Celery entry points of driver upgrades (queue `upgrades`). Each tick is short and idempotent; it
re-queues the next one itself, and beat's resync restarts runs whose chain was lost (a killed worker)."""

import datetime

from celery import shared_task
from django.conf import settings
from django.db.models import Q
from django.utils import timezone

from . import rollouts, ticks
from .machine import LIVE
from .models import FleetRollout, UpgradeRun
from .scheduling import schedule_tick


@shared_task(acks_late=True)
def tick_run(run_id: int, seq: int) -> None:
    next_seq = ticks.tick(run_id, seq)
    if next_seq is not None:
        schedule_tick(run_id, next_seq)


def stale_before() -> datetime.datetime:
    """A live run not ticked since then has lost its chain of ticks."""
    return timezone.now() - datetime.timedelta(seconds=max(5 * settings.NVKE_UPGRADE_TICK_S, 5))


@shared_task
def resync_runs() -> int:
    """Beat: give every live run whose ticks stopped (a worker died mid-tick) its next tick; and move
    fleet rollouts on. Returns how many runs were restarted."""
    stale = timezone.now() - datetime.timedelta(seconds=max(5 * settings.NVKE_UPGRADE_TICK_S, 5))
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
