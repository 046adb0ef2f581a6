"""The embedded default runs no beat, so idle nodes would never ripen there: while a cluster has a pool
the autoscaler looks after, its next step runs on a daemon timer thread of the process, one per cluster,
every NVKE_AUTOSCALER_INTERVAL_S (as upgrade ticks do, upgrades.controller.schedule_tick). A process that
restarts picks the chain up at the next step something asks for (a pending claim, a pool's change). With
beat (the production shape) none of this runs."""

import logging
import threading

from django.conf import settings
from django.db import close_old_connections, connection

from nodepools.autoscaler.service import autoscale, clusters

log = logging.getLogger(__name__)
_timers: dict[int, threading.Timer] = {}
_lock = threading.Lock()


def keep_stepping(cluster_id: int) -> None:
    """Embedded default only: make sure the cluster's next step is on a timer."""
    if not settings.EMBEDDED:
        return
    with _lock:
        if cluster_id in _timers:
            return
        timer = _timers[cluster_id] = threading.Timer(
            settings.NVKE_AUTOSCALER_INTERVAL_S, _step, args=(cluster_id,)
        )
    timer.daemon = True
    timer.name = f"nvke-autoscaler-{cluster_id}"
    timer.start()


def _step(cluster_id: int) -> None:
    with _lock:
        _timers.pop(cluster_id, None)
    close_old_connections()
    again = True
    try:
        autoscale(cluster_id)
        again = cluster_id in clusters()
    except Exception:
        log.exception("autoscaler: step of cluster %s failed; trying again", cluster_id)
    finally:
        connection.close()
    if again:
        keep_stepping(cluster_id)
