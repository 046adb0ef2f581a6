"""The pool autoscaler carried out by a real Celery worker process (with its beat) over Redis: a pending
claim grows its pool, and once it is released the idle node is drained and removed, the pool back at its
minimum. Everything after the API calls happens in the worker."""

import pytest
import redis
from django.conf import settings

from audit.models import AuditEntry
from claims.models import Claim
from nodepools.models import Node, NodePool
from nvke.celery import app as celery_app

from .processes import BIN, Process, database_url_of_this_run, process_env, wait_until

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def worker_with_beat(tmp_path):
    """A worker on the queues pools and claims use, with beat running the autoscaler every second."""
    redis.Redis.from_url(settings.REDIS_URL).flushdb()
    worker = Process(
        [
            str(BIN / "celery"),
            "-A",
            "nvke",
            "worker",
            "-Q",
            "default,provisioning,allocator",
            "-P",
            "solo",
            "-B",
            "-s",
            str(tmp_path / "beat-schedule"),
            "--without-gossip",
            "--without-mingle",
            "--without-heartbeat",
            "-l",
            "info",
        ],
        process_env(
            DATABASE_URL=database_url_of_this_run(),
            REDIS_URL=settings.REDIS_URL,
            NVKE_AUTOSCALER_INTERVAL_S="1",
        ),
    )
    celery_app.conf.task_always_eager = False
    try:
        worker.wait_for_line("ready.")
        yield worker
    finally:
        celery_app.conf.task_always_eager = True
        worker.stop()


def test_a_worker_grows_a_pool_for_a_pending_claim_and_shrinks_it_after(
    api, owner, make_cluster, worker_with_beat
):
    cluster = make_cluster(owner.memberships.get().tenant)
    created = api.post(
        "/api/v1/node-pools/",
        {
            "cluster": cluster.pk,
            "name": "l4",
            "gpu_model": "l4",
            "gpus_per_node": 1,
            "node_count": 1,
            "min_nodes": 1,
            "max_nodes": 3,
            "driver_release": "580.105.08",
            "autoscaling": True,
            "scale_down_delay_s": 2,
        },
    )
    assert created.status_code == 201, created.data
    pool_id = created.data["id"]
    wait_until(lambda: NodePool.objects.get(pk=pool_id).status == "ready", "pool ready")

    def claim(name: str) -> dict:
        response = api.post("/api/v1/claims/", {"cluster": cluster.pk, "name": name, "kind": "whole"})
        assert response.status_code == 201, response.data
        return response.data

    claim("first")
    second = claim("second")
    assert second["status"] == "pending"  # one node, taken: the worker's autoscaler adds one
    wait_until(lambda: Claim.objects.get(pk=second["id"]).status == "allocated", "second claim placed", 60)
    assert (
        NodePool.objects.get(pk=pool_id).node_count == 2 and Node.objects.filter(pool_id=pool_id).count() == 2
    )

    assert api.delete(f"/api/v1/claims/{second['id']}/").status_code == 204
    wait_until(lambda: Node.objects.filter(pool_id=pool_id).count() == 1, "the idle node removed", 60)
    wait_until(lambda: NodePool.objects.get(pk=pool_id).scale_down_node == "", "the scale-down done")
    assert NodePool.objects.get(pk=pool_id).node_count == 1
    assert Claim.objects.get(name="first").status == "allocated"  # its node is the one that stayed
    body = api.get(f"/api/v1/node-pools/{pool_id}/autoscaling/").data
    story = iter(d["reason"] for d in reversed(body["decisions"]))  # oldest first
    assert all(reason in story for reason in ("PendingClaims", "NodeIdle", "NodeDrained")), body["decisions"]
    changes = AuditEntry.objects.filter(actor="autoscaler", object_type="nodepools.nodepool")
    assert sorted(entry.changes["node_count"] for entry in changes) == [[1, 2], [2, 1]]
    assert "autoscale_cluster" in worker_with_beat.log
