"""Claims of queues in one cohort created at once from several threads, each with its own PostgreSQL
connection: no queue ever holds more than nominal + borrowing limit, the cohort never more than its
queues' nominal quotas together, and no GPU is given twice."""

import threading
from collections import Counter

import pytest
from django.db import connection
from django.db.models import Sum

from claims.allocator import create_claim
from claims.models import Claim, GpuShare, Queue
from claims.selectors import allocation_violations
from nodepools.services import reconcile
from nvke.tenancy.context import TenantContext

H100 = "h100-sxm5-80gb"
ASKS = {"a": 10, "b": 6}  # claims of 2 GPUs each: 32 GPUs asked of a cohort of 24


@pytest.mark.skipif(connection.vendor != "postgresql", reason="the allocation lock across connections")
def test_concurrent_claims_never_pass_a_queues_limit_nor_overcommit(
    owner, make_cluster, make_pool, transactional_db
):
    tenant = owner.memberships.get().tenant
    cluster = make_cluster(tenant, "race")
    reconcile(make_pool(cluster, name="h100", gpu_model=H100, nodes=4, gpus_per_node=8).pk)
    queues = {
        name: Queue.objects.create(
            tenant=tenant,
            cluster=cluster,
            name=name,
            cohort="lab",
            quotas=[{"gpu_model": H100, "gpus": 8, "borrowing_limit": 4 if name == "a" else None}],
        )
        for name in "abc"
    }
    context = TenantContext(tenant, "owner")
    start = threading.Barrier(sum(ASKS.values()))
    errors = []

    def run(name: str, i: int) -> None:
        try:
            start.wait()
            create_claim(
                context=context, cluster=cluster, name=f"{name}{i}", kind="whole", gpus=2, queue=queues[name]
            )
        except Exception as error:  # noqa: BLE001 - any failure fails the test below
            errors.append(repr(error))
        finally:
            connection.close()

    threads = [threading.Thread(target=run, args=(name, i)) for name, n in ASKS.items() for i in range(n)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    assert not errors, errors
    held = dict(
        Claim.objects.filter(cluster=cluster, status="allocated")
        .values("queue__name")
        .annotate(gpus=Sum("gpus"))
        .values_list("queue__name", "gpus")
    )
    assert held["a"] == 12  # nominal 8 + borrowing limit 4, however the threads ran
    assert sum(held.values()) == 24  # the cohort's quota, though the fleet has 32 GPUs
    assert Claim.objects.filter(cluster=cluster, status="pending").count() == 4  # the race was real
    gpus = Counter(GpuShare.objects.filter(gpu__node__pool__cluster=cluster).values_list("gpu_id", flat=True))
    assert gpus and max(gpus.values()) == 1
    assert allocation_violations(cluster.pk) == []
