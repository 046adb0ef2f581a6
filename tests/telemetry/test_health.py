"""Health: a fatal XID takes its GPU out and moves only its claims; silent nodes become NotReady."""

import time

import pytest

from claims.models import Claim, GpuShare
from clusters.services import cluster_operations
from nodepools.models import Node
from nodepools.services import reconcile
from telemetry import health
from telemetry.models import TelemetryEvent

from .conftest import client_of_node, gpu_of, post, sample

pytestmark = pytest.mark.django_db


def test_fatal_xid_marks_gpu_unhealthy_and_moves_only_its_claims(add_pool, claim_in, api):
    first = add_pool("first")
    a, b = claim_in("a", 30), claim_in("b", 30)
    failing = gpu_of(a)
    assert gpu_of(b) == failing
    spare = add_pool("spare", gpus_per_node=2)
    c = claim_in("c", 30, pool=spare)
    c_share = GpuShare.objects.get(allocation__claim=c)

    client = client_of_node(failing.node)
    assert post(client, [sample(failing, DCGM_FI_DEV_XID_ERRORS=13)]).status_code == 202  # not fatal
    failing.refresh_from_db()
    assert failing.healthy
    assert post(client, [sample(failing, DCGM_FI_DEV_XID_ERRORS=79)]).status_code == 202  # fell off the bus

    failing.refresh_from_db()
    assert not failing.healthy
    for claim in (a, b):
        claim.refresh_from_db()
        assert claim.status == Claim.Status.ALLOCATED
        assert gpu_of(claim).node.pool == spare
    assert GpuShare.objects.get(allocation__claim=c) == c_share  # untouched: same row, same GPU
    assert not GpuShare.objects.filter(gpu=failing).exists()
    assert first.nodes.get().gpus.get().healthy is False

    kinds = [e["kind"] for e in api.get("/api/v1/telemetry/events/").data["results"]]
    assert sorted(kinds) == ["claim.moved", "claim.moved", "gpu.unhealthy"]
    # The GPU keeps reporting its XID: nothing more happens.
    assert post(client, [sample(failing, DCGM_FI_DEV_XID_ERRORS=79)]).status_code == 202
    assert health.fail_gpu(failing.pk, 79) == []
    assert TelemetryEvent.objects.count() == 3


def test_claims_with_nowhere_to_go_wait_pending(add_pool, claim_in):
    add_pool("only")
    a = claim_in("a", 30)
    health.fail_gpu(gpu_of(a).pk, 48)
    a.refresh_from_db()
    assert a.status == Claim.Status.PENDING and a.pending_reason
    event = TelemetryEvent.objects.get(kind="claim.moved")
    assert "pending" in event.message


def test_silent_node_becomes_not_ready_then_ready_again(node, node_client, api):
    now = time.time()
    assert post(node_client, [sample(node.gpus.first(), now)]).status_code == 202
    assert health.check_heartbeats(now + 30) == ([], [])
    assert health.check_heartbeats(now + 61) == ([node.pk], [])
    node.refresh_from_db()
    assert node.status == Node.Status.NOT_READY
    assert health.check_heartbeats(now + 62) == ([], [])  # once
    # Other nodes never reported: they are left alone.
    assert Node.objects.filter(status=Node.Status.NOT_READY).count() == 1
    assert health.check_heartbeats(now) == ([], [node.pk])
    node.refresh_from_db()
    assert node.status == Node.Status.READY
    kinds = [
        e["kind"]
        for e in api.get(f"/api/v1/telemetry/events/?cluster={node.pool.cluster_id}").data["results"]
    ]
    assert kinds == ["node.ready", "node.not-ready"]


def test_verdicts_reach_the_provider_after_commit_and_survive_a_pool_resync(
    add_pool, claim_in, django_capture_on_commit_callbacks
):
    pool = add_pool("only", nodes=2)
    a = claim_in("a", 30)
    failing = gpu_of(a)
    ops = cluster_operations(pool.cluster)

    def provider_healthy() -> bool:
        (node,) = (n for n in ops.list_nodes(pool.name) if n.name == failing.node.name)
        return node.gpus[failing.index].healthy

    with django_capture_on_commit_callbacks(execute=True):
        health.fail_gpu(failing.pk, 79)
        assert provider_healthy()  # not told before the verdict commits
    assert not provider_healthy()
    reconcile(pool.pk)  # the pool's nodes and GPUs are copied again from the provider
    failing.refresh_from_db()
    assert not failing.healthy


def test_silent_node_is_replaced_and_its_claims_placed_again(
    add_pool, claim_in, api, django_capture_on_commit_callbacks
):
    pool = add_pool("only", nodes=2)
    a = claim_in("a", 30)
    lost = gpu_of(a).node
    now = time.time()
    assert post(client_of_node(lost), [sample(gpu_of(a), now)]).status_code == 202
    assert health.check_heartbeats(now + 61) == ([lost.pk], [])
    assert health.repair_nodes(now + 200) == []  # not yet: the repair timeout is 300 s
    with django_capture_on_commit_callbacks(execute=True):
        assert health.repair_nodes(now + 301) == [lost.name]

    assert not Node.objects.filter(pk=lost.pk).exists()
    assert pool.nodes.count() == 2 and pool.nodes.filter(status=Node.Status.READY).count() == 2
    a.refresh_from_db()
    assert a.status == Claim.Status.ALLOCATED and gpu_of(a).node != lost
    kinds = [e["kind"] for e in api.get("/api/v1/telemetry/events/").data["results"]]
    assert kinds[0] == "node.replaced"
    assert health.repair_nodes(now + 400) == []  # once
