"""Metering survives a crashed worker: a real Celery worker places a burst of queued claims and is
SIGKILLed mid-way; whatever it committed is metered, whatever it did not is not, and once the rest is
placed every allocation has exactly one open usage interval and no interval is open without one."""

import os
import signal

import pytest
from django.db.models import Count, Q

from claims.allocator import create_claim, place_pending
from claims.models import Allocation, Claim, UsageInterval
from nodepools.services import reconcile
from nvke.tenancy.context import TenantContext

from .processes import wait_until

pytestmark = pytest.mark.integration


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


def test_a_killed_worker_leaves_metering_exact(owner, make_cluster, make_pool, celery_worker_process):
    tenant = owner.memberships.get().tenant
    cluster = make_cluster(tenant, "prod")
    reconcile(make_pool(cluster, name="frac", gpu_model="l4", nodes=2, sharing_mode="fractional").pk)
    context = TenantContext(tenant, "owner")
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
        os.killpg(celery_worker_process.proc.pid, signal.SIGKILL)  # mid-whatever it is doing
        celery_worker_process.proc.wait()
    metering_is_exact()  # whatever the worker had committed when it died
    place_pending(cluster.pk)  # beat's resync would
    assert Claim.objects.filter(status="allocated").count() == 60
    metering_is_exact()
