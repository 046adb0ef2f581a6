"""The embedded default's live telemetry. It runs no Redis, no beat and no simulator process, yet its
dashboard is live: the store is in this process (store.client() without REDIS_URL), and one daemon
thread of the web process plays the other two parts. Every second it writes a sample of each GPU of the
simulated clusters (attached clusters' GPUs report through nvke-agent, as in production), and it plays
beat's whole schedule (settings.CELERY_BEAT_SCHEDULE: the fleet's resync, pending claims, the pool
autoscaler, telemetry's upkeep, upgrades' resync, the logs' pruning), each task by name when it is due.
It is the embedded default's one scheduler; only an upgrade run's ticks, which Celery would run after a
countdown rather than on beat's schedule, keep timers of their own (upgrades.controller.schedule_tick).
nvke/asgi.py starts it."""

import logging
import threading
import time

from django.conf import settings
from django.db import close_old_connections

from nvke import jobs

from . import synthetic_load

log = logging.getLogger(__name__)
SAMPLE_INTERVAL_S = 1.0
RESTART_AFTER_S = 5.0
SIMULATED_GPUS = {"node__pool__cluster__attached": False}
_started = threading.Event()


def upkeep_schedule() -> dict[str, float]:
    """Beat's tasks, which this thread plays: task name → seconds between runs."""
    return {entry["task"]: float(entry["schedule"]) for entry in settings.CELERY_BEAT_SCHEDULE.values()}


def start() -> None:
    """Start the thread once per process."""
    if _started.is_set():
        return
    _started.set()
    threading.Thread(target=_run, name="nvke-telemetry", daemon=True).start()


def _run() -> None:
    while True:
        try:
            _play()
        except Exception:  # the database was busy, or a row went away mid-tick: carry on shortly
            log.exception("embedded telemetry failed; starting again in %s s", RESTART_AFTER_S)
            time.sleep(RESTART_AFTER_S)


def _play() -> None:
    schedule = upkeep_schedule()
    due = dict.fromkeys(schedule, 0.0)
    for now, _ in synthetic_load.play(SAMPLE_INTERVAL_S, SIMULATED_GPUS):
        for task, every in schedule.items():
            if now >= due[task]:
                jobs.task(task)()
                due[task] = now + every
        close_old_connections()
