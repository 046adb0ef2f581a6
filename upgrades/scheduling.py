"""How a run's next tick gets going. With a broker, a Celery task re-queued with a countdown; in the
embedded default (eager tasks, no broker, no beat) a self-requeueing task would recurse, so a daemon
timer thread in this process runs the ticks instead."""

import datetime
import logging
import threading

from django.conf import settings
from django.db import close_old_connections, connection
from django.utils import timezone

from nvke import jobs
from nvke.celery import app as celery_app

from .machine import LIVE
from .ticks import tick

log = logging.getLogger(__name__)


def schedule_tick(run_id: int, seq: int, countdown: float | None = None) -> None:
    """Run tick `seq` of the run after `countdown` seconds (default NVKE_UPGRADE_TICK_S)."""
    delay = settings.NVKE_UPGRADE_TICK_S if countdown is None else countdown
    if celery_app.conf.task_always_eager:
        timer = threading.Timer(delay, _tick_in_thread, args=(run_id, seq))
        timer.daemon = True
        timer.name = f"nvke-upgrade-{run_id}"
        timer.start()
        return
    jobs.task("upgrades.tasks.tick_run").apply_async((run_id, seq), countdown=delay)


def stale_before() -> datetime.datetime:
    """A live run not ticked since then has lost its chain of ticks."""
    return timezone.now() - datetime.timedelta(seconds=max(5 * settings.NVKE_UPGRADE_TICK_S, 5))


def kick_if_stale(run) -> None:
    """Embedded default only (no beat): a live run whose ticks stopped, because the process restarted,
    gets a ticker again when someone looks at it."""
    if celery_app.conf.task_always_eager and run.status in LIVE:
        if run.ticked_at is None or run.ticked_at < stale_before():
            schedule_tick(run.pk, run.tick_seq, 0)


def _tick_in_thread(run_id: int, seq: int) -> None:
    close_old_connections()
    try:
        next_seq = tick(run_id, seq)
    except Exception:
        log.exception("upgrade run %s: tick %s failed; retrying", run_id, seq)
        next_seq = seq
    finally:
        connection.close()
    if next_seq is not None:
        schedule_tick(run_id, next_seq)
