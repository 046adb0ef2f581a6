"""Preemption from several threads at once, each with its own PostgreSQL connection: the allocation lock
keeps every GPU held once, each victim is taken by one preemptor, and non-preemptible claims stay."""

import threading
from collections import Counter

import pytest
from django.db import connection

from claims.allocator import create_claim
from claims.models import Claim, GpuShare
from claims.selectors import allocation_violations
from nodepools.services import reconcile
from nvke.tenancy.context import TenantContext

PREEMPTORS = 8  # 4 GPUs each, 32 asked of 24, 4 of which are pinned


@pytest.mark.skipif(connection.vendor != "postgresql", reason="the allocation lock across connections")
def test_concurrent_preemptors_never_overcommit(owner, make_cluster, make_pool, transactional_db):
    tenant = owner.memberships.get().tenant
    cluster = make_cluster(tenant, "race")
    reconcile(make_pool(cluster, name="h100", gpu_model="h100-sxm5-80gb", nodes=3, gpus_per_node=8).pk)
    context = TenantContext(tenant, "owner")
    for i in range(24):
        pinned = i < 4
        made = create_claim(
            context=context, cluster=cluster, name=f"low{i}", kind="whole", gpus=1, preemptible=not pinned
        )
        assert made.status == "allocated"
    start = threading.Barrier(PREEMPTORS)
    errors = []

    def preempt(i: int) -> None:
        try:
            start.wait()
            create_claim(context=context, cluster=cluster, name=f"high{i}", kind="whole", gpus=4, priority=5)
        except Exception as error:  # noqa: BLE001 - any failure fails the test below
            errors.append(repr(error))
        finally:
            connection.close()

    threads = [threading.Thread(target=preempt, args=(i,)) for i in range(PREEMPTORS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    assert not errors, errors
    highs = Claim.objects.filter(name__startswith="high", status="allocated")
    assert highs.count() == 5  # 20 preemptible GPUs, 4 each
    assert Claim.objects.filter(name__startswith="high", status="pending").count() == PREEMPTORS - 5
    pinned = Claim.objects.filter(name__in=[f"low{i}" for i in range(4)])
    assert {c.status for c in pinned} == {"allocated"}
    victims = Claim.objects.filter(name__startswith="low", status="pending")
    assert victims.count() == 20
    assert Counter(v.preempted_by_id for v in victims) == {h.pk: 4 for h in highs}
    gpus = Counter(GpuShare.objects.filter(gpu__node__pool__cluster=cluster).values_list("gpu_id", flat=True))
    assert len(gpus) == 24 and max(gpus.values()) == 1  # whole GPUs: each held once
    assert allocation_violations(cluster.pk) == []
