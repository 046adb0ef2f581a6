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
