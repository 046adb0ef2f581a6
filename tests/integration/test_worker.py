"""Provisioning carried out by a real Celery worker process over the Redis broker."""

import pytest

from clusters.models import Cluster
from nodepools.models import Gpu, NodePool

from .processes import wait_until

pytestmark = pytest.mark.integration


def test_worker_provisions_cluster_and_pool(api, catalog, celery_worker_process):
    created = api.post(
        "/api/v1/clusters/",
        {
            "name": "prod",
            "kubernetes_version": "1.35",
            "region": "us-east-1",
            "control_plane_nodes": 3,
        },
    )
    assert created.status_code == 201 and created.data["status"] == "provisioning"
    cluster_id = created.data["id"]
    wait_until(lambda: Cluster.objects.get(pk=cluster_id).status == "running", "cluster running")

    pool = api.post(
        "/api/v1/node-pools/",
        {
            "cluster": cluster_id,
            "name": "a100",
            "gpu_model": "a100-sxm4-80gb",
            "gpus_per_node": 8,
            "node_count": 2,
            "min_nodes": 0,
            "max_nodes": 4,
            "driver_release": "580.105.08",
        },
    )
    assert pool.status_code == 201
    wait_until(lambda: NodePool.objects.get(pk=pool.data["id"]).status == "ready", "pool ready")
    assert Gpu.objects.filter(node__pool_id=pool.data["id"]).count() == 16
    assert "provision_cluster" in celery_worker_process.log and "reconcile_pool" in celery_worker_process.log

    assert api.delete(f"/api/v1/clusters/{cluster_id}/").status_code == 202
    wait_until(lambda: not Cluster.objects.filter(pk=cluster_id).exists(), "cluster torn down")
    assert not NodePool.objects.exists()


def test_queued_claims_ride_on_one_queued_pass(owner, make_cluster, make_pool, celery_worker_process):
    """A burst of queued claims: a real worker on the allocator queue places them all, and claims that
    arrive while a pass is queued do not queue passes of their own."""
    from claims.allocator import create_claim
    from claims.allocator.queue import _queued_key, _redis
    from claims.models import Claim
    from nodepools.services import reconcile
    from nvke.tenancy.context import TenantContext

    tenant = owner.memberships.get().tenant
    cluster = make_cluster(tenant, "prod")
    reconcile(make_pool(cluster, name="frac", gpu_model="l4", nodes=2, sharing_mode="fractional").pk)
    context = TenantContext(tenant, "owner")
    for i in range(30):
        create_claim(
            context=context, cluster=cluster, name=f"q{i}", kind="fraction", gpu_memory_mib=2048, place=False
        )
    wait_until(
        lambda: Claim.objects.filter(cluster=cluster, status="allocated").count() == 30, "all 30 placed"
    )
    passes = [
        line
        for line in celery_worker_process.log.splitlines()
        if "place_pending_claims" in line and "received" in line
    ]
    assert 1 <= len(passes) < 30, celery_worker_process.log
    wait_until(lambda: not _redis().exists(_queued_key(cluster.pk)), "no pass left queued")
