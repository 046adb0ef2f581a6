"""An attached cluster without NVIDIA's DRA driver learns its GPUs' UUIDs from each node's nvke-agent:
the inventory route, checked whole, and samples naming those UUIDs afterwards."""

import time
import uuid

import pytest
from rest_framework.test import APIClient

from nodepools.models import Gpu, Node
from nodepools.services import reconcile
from telemetry.models import NodeToken

pytestmark = pytest.mark.django_db


@pytest.fixture
def node(attach, gpu_cluster, make_attached_pool):
    cluster = attach(gpu_cluster)
    return Node.objects.get(pool=make_attached_pool(cluster, 1, max_nodes=3))


def agent(node) -> APIClient:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Node {NodeToken.issue(node)[1]}")
    return client


def inventory(uuids: list[str]) -> dict:
    return {"gpus": [{"index": i, "uuid": f"GPU-{u}"} for i, u in enumerate(uuids)]}


def uuids_of(node) -> list[str]:
    return [str(u) for u in Gpu.objects.filter(node=node).order_by("index").values_list("uuid", flat=True)]


def test_the_agents_uuids_name_the_gpus_and_survive_a_resync(node):
    client = agent(node)
    nvml = [str(uuid.uuid4()) for _ in range(8)]
    answer = client.post("/api/v1/telemetry/inventory/", inventory(nvml), format="json")
    assert answer.status_code == 200 and answer.json() == {"updated": 8}
    assert uuids_of(node) == nvml
    sample = {"gpu": f"GPU-{nvml[3]}", "ts": time.time(), "metrics": {"DCGM_FI_DEV_GPU_UTIL": 50}}
    assert client.post("/api/v1/telemetry/ingest/", {"samples": [sample]}, format="json").status_code == 202
    reconcile(node.pool_id)  # GFD labels carry no UUIDs: NVKE keeps the agent's
    assert uuids_of(node) == nvml
    again = client.post("/api/v1/telemetry/inventory/", inventory(nvml), format="json")
    assert again.json() == {"updated": 0}


def test_two_gpus_may_swap_uuids(node):
    client = agent(node)
    nvml = [str(uuid.uuid4()) for _ in range(8)]
    client.post("/api/v1/telemetry/inventory/", inventory(nvml), format="json")
    swapped = [nvml[1], nvml[0], *nvml[2:]]
    assert client.post("/api/v1/telemetry/inventory/", inventory(swapped), format="json").json() == {
        "updated": 2
    }
    assert uuids_of(node) == swapped


@pytest.mark.parametrize(
    ("body", "field", "code"),
    [
        ({"gpus": []}, "gpus", "invalid"),
        ({"gpus": [{"index": 8, "uuid": str(uuid.uuid4())}]}, "gpus", "unknown_gpu"),
        ({"gpus": [{"index": 0, "uuid": "not-a-uuid"}]}, "gpus[0].uuid", "invalid"),
        (
            {"gpus": [{"index": 0, "uuid": str(uuid.uuid4())}, {"index": 0, "uuid": str(uuid.uuid4())}]},
            "gpus[1].index",
            "invalid",
        ),
        ({"gpus": [{"index": True, "uuid": str(uuid.uuid4())}]}, "gpus[0].index", "invalid"),
    ],
)
def test_a_bad_inventory_is_refused_naming_the_field_and_changes_nothing(node, body, field, code):
    before = uuids_of(node)
    answer = agent(node).post("/api/v1/telemetry/inventory/", body, format="json")
    assert answer.status_code == 400, answer.json()
    assert (answer.json()["code"], answer.json()["details"]["field"]) == (code, field)
    assert uuids_of(node) == before


def test_a_uuid_another_gpu_holds_is_a_conflict(node, owner, make_cluster, make_pool):
    client = agent(node)
    before = uuids_of(node)
    own = {"gpus": [{"index": 0, "uuid": before[7]}]}  # GPU 7 keeps it: two GPUs would share one
    pool = make_pool(make_cluster(owner.memberships.get().tenant, "other"), nodes=1)
    reconcile(pool.pk)
    elsewhere = {"gpus": [{"index": 0, "uuid": str(Gpu.objects.filter(node__pool=pool).first().uuid)}]}
    for body in (own, elsewhere):
        answer = client.post("/api/v1/telemetry/inventory/", body, format="json")
        assert answer.status_code == 409 and answer.json()["code"] == "duplicate_uuid"
    assert uuids_of(node) == before


def test_a_provisioned_clusters_gpus_are_named_by_its_provider(owner, make_cluster, make_pool):
    cluster = make_cluster(owner.memberships.get().tenant)
    pool = make_pool(cluster, nodes=1)
    reconcile(pool.pk)
    node = Node.objects.get(pool=pool)
    body = {"gpus": [{"index": 0, "uuid": str(uuid.uuid4())}]}
    answer = agent(node).post("/api/v1/telemetry/inventory/", body, format="json")
    assert answer.status_code == 409 and answer.json()["code"] == "provider_names_gpus"


def test_another_tenants_uuid_is_neither_an_oracle_nor_taken_from_them(
    node, make_member, make_cluster, make_pool
):
    """UUIDs are unique within a tenant. A node token naming another tenant's GPU UUID gets the answer a
    fresh UUID gets (a 409 told it the UUID existed) and takes nothing from that tenant: its GPU keeps
    the UUID and its own reconcile goes on (a global constraint let the first reporter block the other)."""
    victim = make_member("victim").memberships.get().tenant
    pool = make_pool(make_cluster(victim, "theirs"), nodes=1)
    reconcile(pool.pk)
    theirs = Gpu.objects.filter(node__pool=pool).order_by("index").first()
    client = agent(node)
    for index, value in ((0, str(theirs.uuid)), (1, str(uuid.uuid4()))):
        answer = client.post(
            "/api/v1/telemetry/inventory/", {"gpus": [{"index": index, "uuid": value}]}, format="json"
        )
        assert (answer.status_code, answer.json()) == (200, {"updated": 1})
    assert uuids_of(node)[0] == str(theirs.uuid)
    reconcile(pool.pk)
    theirs.refresh_from_db()
    assert Gpu.objects.filter(uuid=theirs.uuid).values_list("tenant", flat=True).count() == 2
    assert Gpu.objects.get(pk=theirs.pk, tenant=victim).uuid == theirs.uuid
