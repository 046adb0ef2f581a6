"""Claim groups created at once from several threads, each with its own PostgreSQL connection: every
group ends all or nothing (never part of one below its minimum holding GPUs) and no GPU is given
twice."""

import threading
from collections import Counter

import pytest
from django.db import connection

from claims.allocator import create_claim, create_group
from claims.models import Claim, ClaimGroup, GpuShare
from claims.selectors import allocation_violations
from nodepools.services import reconcile
from nvke.tenancy.context import TenantContext

GROUPS, SINGLES = 6, 4


@pytest.mark.skipif(connection.vendor != "postgresql", reason="the allocation lock across connections")
def test_concurrent_groups_are_all_or_nothing_and_never_overcommit(
    owner, make_cluster, make_pool, transactional_db
):
    tenant = owner.memberships.get().tenant
    cluster = make_cluster(tenant, "race")
    reconcile(make_pool(cluster, name="h100", gpu_model="h100-sxm5-80gb", nodes=5, gpus_per_node=8).pk)
    context = TenantContext(tenant, "owner")
    start = threading.Barrier(GROUPS + SINGLES)
    errors = []

    def run(make) -> None:
        try:
            start.wait()
            make()
        except Exception as error:  # noqa: BLE001 - any failure fails the test below
            errors.append(repr(error))
        finally:
            connection.close()

    def group(i: int):
        return lambda: create_group(
            context=context, cluster=cluster, name=f"g{i}", members=3, min_members=2, kind="whole", gpus=8
        )

    def single(i: int):
        return lambda: create_claim(context=context, cluster=cluster, name=f"s{i}", kind="whole", gpus=4)

    threads = [threading.Thread(target=run, args=(group(i),)) for i in range(GROUPS)]
    threads += [threading.Thread(target=run, args=(single(i),)) for i in range(SINGLES)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    assert not errors, errors
    assert ClaimGroup.objects.filter(cluster=cluster).count() == GROUPS
    placed_groups = 0
    for found in ClaimGroup.objects.filter(cluster=cluster):
        allocated = Claim.objects.filter(group=found, status="allocated", allocation__isnull=False).count()
        assert allocated == 0 or allocated >= found.min_members, (found, allocated)
        placed_groups += allocated >= found.min_members
    assert 1 <= placed_groups < GROUPS  # capacity ran out: the race was real
    gpus = Counter(GpuShare.objects.filter(gpu__node__pool__cluster=cluster).values_list("gpu_id", flat=True))
    assert gpus and max(gpus.values()) == 1  # whole GPUs: each held once
    assert allocation_violations(cluster.pk) == []
