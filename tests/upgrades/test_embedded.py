"""The embedded default (eager tasks, no broker, no beat): a run's ticks come from a timer thread in
this process instead of a self-requeueing task, which would recurse."""

import threading

import pytest

from catalog.models import DriverRelease
from nodepools.models import Node
from nvke.celery import app as celery_app
from tests.integration.processes import wait_until
from upgrades import services
from upgrades.models import UpgradeRun

pytestmark = pytest.mark.django_db(transaction=True)


def test_eager_mode_runs_the_upgrade_on_a_timer_thread(context, make_upgrade_pool, settings):
    assert celery_app.conf.task_always_eager
    settings.NVKE_UPGRADE_TICK_S = 0.05
    pool = make_upgrade_pool(nodes=3, claims=2)
    run = services.create_run(
        context=context,
        pool=pool,
        target_release=DriverRelease.objects.get(version="595.71.05"),
        max_unavailable="1",
    )
    wait_until(lambda: UpgradeRun.objects.get(pk=run.pk).finished, "the run to finish", timeout_s=60)
    assert UpgradeRun.objects.get(pk=run.pk).status == "completed"
    assert set(Node.objects.filter(pool=pool).values_list("driver_version", "cordoned")) == {
        ("595.71.05", False)
    }
    assert UpgradeRun.objects.get(pk=run.pk).tick_seq > 10  # many ticks, each its own stack frame
    wait_until(  # the chain ends with the run: no timer of this run is left waiting
        lambda: all(t.name != f"nvke-upgrade-{run.pk}" for t in threading.enumerate()), "timers done"
    )


def test_a_live_run_left_by_a_restart_is_picked_up_when_viewed(context, make_upgrade_pool, settings, api):
    settings.NVKE_UPGRADE_TICK_S = 0.05
    pool = make_upgrade_pool(nodes=2)
    run = services.create_run(
        context=context,
        pool=pool,
        target_release=DriverRelease.objects.get(version="595.71.05"),
        start=False,
    )
    UpgradeRun.objects.filter(pk=run.pk).update(status="running")  # as if the process died mid-run
    assert api.get(f"/api/v1/upgrades/{run.pk}/").status_code == 200
    wait_until(lambda: UpgradeRun.objects.get(pk=run.pk).status == "completed", "the run to finish")
