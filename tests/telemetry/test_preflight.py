"""Node preflight for sharing: agents report their facts, a node that fails its pool's mode takes no
claims (the check named in the pending reason, on the node and in the pool's condition), and one that
passes again takes them; the simulator models a failing node."""

import pytest

from claims.allocator import create_claim
from claims.models import Claim
from nodepools.models import Node, NodePool
from nodepools.services import reconcile
from nvke.providers.simulator.models import SimNode
from nvke.tenancy.context import TenantContext

from .conftest import client_of_node

pytestmark = pytest.mark.django_db

FIT = {
    "driver_version": "580.105.08",
    "kernel_version": "6.1.0-18-amd64",
    "iommu": True,
    "mps": True,
    "nvml_memory": True,
    "nvml_utilization": True,
}


def fraction(tenant, cluster, name: str) -> Claim:
    return create_claim(
        context=TenantContext(tenant, "owner"),
        cluster=cluster,
        name=name,
        kind="fraction",
        gpu_memory_mib=1024,
        compute_percent=10,
    )


def report(node: Node, facts: dict):
    return client_of_node(node).post("/api/v1/telemetry/preflight/", {"facts": facts}, format="json")


def condition(pool: NodePool) -> dict:
    pool.refresh_from_db()
    return next(c for c in pool.conditions if c["type"] == "SharingPreflight")


def test_a_node_that_fails_takes_no_claims_until_it_passes(
    add_pool, tenant, cluster, api, django_capture_on_commit_callbacks
):
    pool = add_pool("mps", sharing_mode="mps")
    node = Node.objects.get(pool=pool)
    answer = report(node, {**FIT, "iommu": False, "kernel_version": "4.19.0"})
    assert answer.status_code == 200, answer.data
    assert answer.data["failures"] == [
        "kernel_version 4.19.0 < 5.10 (GPU sharing)",
        "the IOMMU is off: no memory isolation",
    ]
    claim = fraction(tenant, cluster, "infer")
    assert claim.status == "pending"
    assert claim.pending_reason == "0/1 nodes: 1 node failed its sharing preflight"
    detail = api.get(f"/api/v1/nodes/{node.pk}/").data
    assert detail["preflight"]["iommu"] is False and len(detail["preflight_failures"]) == 2
    assert condition(pool)["status"] == "False" and node.name in condition(pool)["message"]

    with django_capture_on_commit_callbacks(execute=True):  # the placement pass it asks for
        assert report(node, FIT).data["failures"] == []
    claim.refresh_from_db()
    assert claim.status == "allocated"  # placed as soon as the node passes
    assert condition(pool)["status"] == "True"


def test_a_bad_report_is_refused_whole(add_pool):
    node = Node.objects.get(pool=add_pool("frac"))
    for facts, field in [
        ({"iommu": "yes"}, "facts.iommu"),
        ({"kernel_version": 5}, "facts.kernel_version"),
        ({"secure_boot": True}, "facts.secure_boot"),
    ]:
        answer = report(node, {**FIT, **facts})
        assert answer.status_code == 400 and answer.data["details"]["field"] == field
    node.refresh_from_db()
    assert node.preflight == {} or node.preflight.get("iommu") is not False  # nothing written
    assert client_of_node(node).post("/api/v1/telemetry/preflight/", {}, format="json").status_code == 400


def test_an_old_driver_fails_only_the_sharing_modes(add_pool, tenant, cluster, make_pool):
    """Fractional sharing needs 470.82.01; an exclusive pool's node with the same driver is fine."""
    shared = Node.objects.get(pool=add_pool("ts", sharing_mode="time-slicing"))
    exclusive_pool = make_pool(cluster, name="whole", gpu_model="l4", nodes=1, gpus_per_node=1)
    reconcile(exclusive_pool.pk)
    exclusive = Node.objects.get(pool=exclusive_pool)
    old = {**FIT, "driver_version": "470.57.02"}
    assert report(shared, old).data["failures"] == [
        "driver_version 470.57.02 < 470.82.01 (fractional sharing)"
    ]
    assert report(exclusive, old).data["failures"] == []


def test_the_simulator_models_a_node_that_fails(add_pool, tenant, cluster):
    pool = add_pool("mps", sharing_mode="mps", nodes=2)
    failing = SimNode.objects.filter(pool="mps").order_by("name").first()
    failing.preflight = {"mps": False}
    failing.save()
    reconcile(pool.pk)
    node = Node.objects.get(name=failing.name)
    assert node.preflight["mps"] is False and node.preflight["iommu"] is True
    assert "MPS cannot run on this node" in condition(pool)["message"]
    claims = [fraction(tenant, cluster, f"c{i}") for i in range(2)]
    placed_on = {c.allocation.node_id for c in claims if c.status == "allocated"}
    assert claims[0].status == "allocated" and node.pk not in placed_on
