"""A real Celery worker runs an upgrade over Redis and is SIGKILLed at random points, twice; a new
worker (with beat's resync) finishes the run; and without beat, the broker itself gives the killed
worker's tick back. The invariants are checked all along, from this process."""

import os
import random
import signal
import time

import pytest
import redis
from django.conf import settings

from catalog.models import DriverRelease
from claims.models import Claim
from nodepools.models import Node
from nvke.celery import app as celery_app
from tests.integration.processes import BIN, Process, database_url_of_this_run, process_env
from upgrades import services
from upgrades.models import UpgradeRun

from .conftest import check_invariants

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]
TARGET = "595.71.05"


def start_worker(tmp_path, beat: bool = True, **env: str) -> Process:
    with_beat = ["-B", "-s", str(tmp_path / "beat-schedule")] if beat else []
    worker = Process(
        [
            str(BIN / "celery"),
            "-A",
            "nvke",
            "worker",
            "-Q",
            "upgrades,allocator,default",
            "-P",
            "solo",
            *with_beat,
            "--without-gossip",
            "--without-mingle",
            "--without-heartbeat",
            "-l",
            "info",
        ],
        process_env(
            **{
                "DATABASE_URL": database_url_of_this_run(),
                "REDIS_URL": settings.REDIS_URL,
                "NVKE_UPGRADE_TICK_S": "0.2",
                "NVKE_UPGRADE_RESYNC_S": "1",
                "NVKE_SIM_UPGRADE_STEP_S": "cordon=0.2,evict=0.3,install=0.8",
                "NVKE_SIM_DRIVER_FAILURE_RATE": "0",
                **env,
            }
        ),
    )
    worker.wait_for_line("ready.")
    return worker


def kill(worker: Process) -> None:
    os.killpg(worker.proc.pid, signal.SIGKILL)  # the worker and its beat, mid-whatever
    worker.proc.wait()


def watch(run: UpgradeRun, seconds: float) -> None:
    """Check the invariants over and over for `seconds` (or until the run settles)."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        check_invariants(run)
        if run.finished:
            return
        time.sleep(0.05)


@pytest.fixture
def broker():
    redis.Redis.from_url(settings.REDIS_URL).flushdb()
    celery_app.conf.task_always_eager = False
    yield
    celery_app.conf.task_always_eager = True


def test_killed_worker_loses_nothing(context, make_upgrade_pool, broker, tmp_path):
    pool = make_upgrade_pool(nodes=6, claims=5)
    rng = random.Random()
    worker = start_worker(tmp_path)
    try:
        run = services.create_run(
            context=context,
            pool=pool,
            target_release=DriverRelease.objects.get(version=TARGET),
            max_unavailable="2",
            canary_nodes=1,
        )
        for _ in range(2):
            watch(run, rng.uniform(0.5, 2.5))
            assert not run.finished  # the kill lands mid-run
            kill(worker)
            check_invariants(run)
            worker = start_worker(tmp_path)
        watch(run, 120)
        assert run.finished, f"run is {run.status} after the kills:\n{worker.log[-3000:]}"
    finally:
        worker.stop()
    assert run.status == "completed" and run.max_unavailable_seen <= 2
    nodes = Node.objects.filter(pool=pool)
    assert set(nodes.values_list("driver_version", "cordoned")) == {(TARGET, False)}
    claims = Claim.objects.filter(cluster=pool.cluster)
    assert claims.count() == 5 and all(c.status == "allocated" or c.pending_reason for c in claims)
    # The killed worker's countdown ticks died with it; beat's resync restarted the run.
    assert "upgrades.tasks.resync_runs" in worker.log and "upgrades.tasks.tick_run" in worker.log


def test_without_beat_a_killed_workers_tick_comes_back_within_the_visibility_timeout(
    context, make_upgrade_pool, broker, tmp_path
):
    """No beat, so no resync: the run's next tick is an ETA'd message the killed worker took and never
    acknowledged. Kombu hands it to the next worker once it is older than the broker's visibility
    timeout; with Kombu's default (an hour, and a sweep every 100 s) the run stalled that long."""
    visibility_s = 4.0
    env = {
        "NVKE_BROKER_VISIBILITY_TIMEOUT_S": str(visibility_s),
        "NVKE_UPGRADE_TICK_S": "1",
        # task limits stay under the visibility timeout (settings refuse otherwise)
        "NVKE_TASK_SOFT_TIME_LIMIT_S": "2",
        "NVKE_TASK_TIME_LIMIT_S": "3",
    }
    pool = make_upgrade_pool(nodes=4)
    worker = start_worker(tmp_path, beat=False, **env)
    try:
        run = services.create_run(
            context=context, pool=pool, target_release=DriverRelease.objects.get(version=TARGET)
        )
        deadline = time.monotonic() + 30
        while run.tick_seq < 2 and time.monotonic() < deadline:  # ticking over the broker
            run.refresh_from_db()
            time.sleep(0.1)
        assert run.tick_seq >= 2 and not run.finished, worker.log[-3000:]
        kill(worker)
        run.refresh_from_db()
        seq, killed_at = run.tick_seq, time.monotonic()
        worker = start_worker(tmp_path, beat=False, **env)
        while run.tick_seq == seq and time.monotonic() - killed_at < 60:
            run.refresh_from_db()
            time.sleep(0.1)
        resumed_after = time.monotonic() - killed_at
        assert run.tick_seq > seq, f"no tick within 60 s of the kill:\n{worker.log[-3000:]}"
        # The visibility timeout, one restore sweep (a quarter of it, at least 1 s) and a start-up.
        assert resumed_after < visibility_s + max(1, visibility_s // 4) + 15
        watch(run, 120)
        assert run.status == "completed", worker.log[-3000:]
    finally:
        worker.stop()
    assert "resync_runs[" not in worker.log  # nothing but the broker brought the tick back


def test_the_default_visibility_timeout_fits_the_ticks():
    options = settings.CELERY_BROKER_TRANSPORT_OPTIONS
    assert 2 * settings.NVKE_UPGRADE_TICK_S < options["visibility_timeout"] <= 300
    assert options["unacked_restore_interval"] * options["unacked_restore_throttle"] <= 60
    assert celery_app.conf.broker_transport_options["visibility_timeout"] == options["visibility_timeout"]
