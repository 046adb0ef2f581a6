"""Metering survives a crashed worker: a real Celery worker places a burst of queued claims and is
SIGKILLed mid-way; whatever it committed is metered, whatever it did not is not, and once the rest is
placed every allocation has exactly one open usage interval and no interval is open without one."""

import os
import signal

import pytest
import redis
from django.conf import settings
from django.db.models import Count, Q

from nodepools.allocator import create_claim, place_pending
from nodepools.models import Allocation, Claim, UsageInterval
from nodepools.services import reconcile
from nvke.celery import app as celery_app
from nvke.tenancy.context import TenantContext

from .processes import BIN, Process, database_url_of_this_run, process_env, wait_until

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]


def worker() -> Process:
    process = Process(
        [
            str(BIN / "celery"),
            "-A",
            "nvke",
            "worker",
            "-Q",
            "allocator,default",
            "-P",
            "solo",
            "--without-gossip",
            "--without-mingle",
            "--without-heartbeat",
            "-l",
            "info",
        ],
        process_env(DATABASE_URL=database_url_of_this_run(), REDIS_URL=settings.REDIS_URL),
    )
    process.wait_for_line("ready.")
    return process


def metering_is_exact() -> None:
    open_per_allocation = (
        UsageInterval.objects.filter(ended_at=None).values("allocation_id").annotate(n=Count("pk"))
    )
    assert all(row["n"] == 1 for row in open_per_allocation)
    open_ids = {row["allocation_id"] for row in open_per_allocation}
    assert open_ids == set(Allocation.objects.values_list("pk", flat=True))
    # A claim is metered only while it holds capacity.
    pending = Claim.objects.filter(status="pending").values_list("pk", flat=True)
    assert not UsageInterval.objects.filter(Q(claim_id__in=pending), ended_at=None).exists()


def test_a_killed_worker_leaves_metering_exact(owner, make_cluster, make_pool):
    redis.Redis.from_url(settings.REDIS_URL).flushdb()
    celery_app.conf.task_always_eager = False
    tenant = owner.memberships.get().tenant
    cluster = make_cluster(tenant, "prod")
    reconcile(make_pool(cluster, name="frac", gpu_model="l4", nodes=2, sharing_mode="fractional").pk)
    context = TenantContext(tenant, "owner")
    first = worker()
    try:
        for i in range(60):
            create_claim(
                context=context,
                cluster=cluster,
                name=f"q{i}",
                kind="fraction",
                gpu_memory_mib=512,
                compute_percent=5,
                place=False,
            )
        wait_until(lambda: Claim.objects.filter(status="allocated").exists(), "the worker placing claims")
    finally:
        os.killpg(first.proc.pid, signal.SIGKILL)
        first.proc.wait()
        celery_app.conf.task_always_eager = True
    metering_is_exact()  # whatever the worker had committed when it died
    place_pending(cluster.pk)  # beat's resync would
    assert Claim.objects.filter(status="allocated").count() == 60
    metering_is_exact()
