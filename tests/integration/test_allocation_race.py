"""Several processes allocate on one cluster against PostgreSQL at once: nothing is over-committed —
no GPU's memory, guaranteed compute past 100%, or ceilings past its pool's oversubscription budget."""

import json

import pytest
from django.db.models import Sum

from claims.models import Claim, GpuShare
from claims.selectors import allocation_violations
from nodepools.services import reconcile

from .processes import BIN, ROOT, Process, database_url_of_this_run, process_env

pytestmark = pytest.mark.integration

WORKERS, CLAIMS_EACH = 4, 40


def test_concurrent_workers_never_overcommit(owner, make_cluster, make_pool, transactional_db):
    cluster = make_cluster(owner.memberships.get().tenant, "race")
    # Small on purpose: 160 claims compete for 8 L4s (fractions), 4 time-sliced L4s whose ceilings may add up
    # to 200%, and 4 H100s (MIG), so many must wait.
    for pool in (
        make_pool(cluster, name="frac", gpu_model="l4", nodes=2, gpus_per_node=4, sharing_mode="fractional"),
        make_pool(
            cluster,
            name="ts",
            gpu_model="l4",
            nodes=1,
            gpus_per_node=4,
            sharing_mode="time-slicing",
            compute_oversubscription_percent=200,
            default_guaranteed_percent=10,
        ),
        make_pool(
            cluster, name="mig", gpu_model="h100-sxm5-80gb", nodes=1, gpus_per_node=4, sharing_mode="mig"
        ),
    ):
        reconcile(pool.pk)
    env = process_env(DATABASE_URL=database_url_of_this_run())
    workers = [
        Process(
            [
                str(BIN / "python"),
                str(ROOT / "manage.py"),
                "claim_load",
                "--cluster",
                str(cluster.pk),
                "--claims",
                str(CLAIMS_EACH),
                "--prefix",
                f"w{i}",
                "--seed",
                str(i),
            ],
            env,
        )
        for i in range(WORKERS)
    ]
    for worker in workers:
        worker.wait_for(lambda w=worker: w.proc.poll() is not None, "the worker to finish", timeout_s=300)
        assert worker.proc.returncode == 0, worker.log
    reports = [json.loads(worker.lines[-1]) for worker in workers]
    assert sum(r["claims"] for r in reports) == WORKERS * CLAIMS_EACH
    assert Claim.objects.filter(cluster=cluster).count() == WORKERS * CLAIMS_EACH
    allocated = sum(r["allocated"] for r in reports)
    assert 0 < allocated < WORKERS * CLAIMS_EACH  # the pools filled up: the race was real
    assert allocation_violations(cluster.pk) == []
    ceilings = (
        GpuShare.objects.filter(gpu__node__pool__name="ts").values("gpu").annotate(c=Sum("compute_milli"))
    )
    assert max(row["c"] for row in ceilings) > 1000  # the race covered oversubscribed ceilings
    for claim in Claim.objects.filter(cluster=cluster, status="pending"):
        assert claim.pending_reason.startswith("0/4 nodes:")
