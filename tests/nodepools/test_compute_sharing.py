"""Compute requests and limits: pools' oversubscription policy through the API, claims' guaranteed
shares, and what the claim says about its isolation."""

import pytest

from claims.selectors import allocation_violations
from nodepools.models import NodePool
from nodepools.services import reconcile

pytestmark = pytest.mark.django_db


@pytest.fixture
def cluster(owner, make_cluster):
    return make_cluster(owner.memberships.get().tenant, "prod")


def pool_body(cluster, mode, **fields):
    return {
        "cluster": cluster.pk,
        "name": mode.replace("-", ""),
        "gpu_model": "a10",
        "gpus_per_node": 1,
        "node_count": 1,
        "max_nodes": 2,
        "driver_release": "580.105.08",
        "sharing_mode": mode,
        **fields,
    }


def make(api, cluster, mode, **fields) -> dict:
    response = api.post("/api/v1/node-pools/", pool_body(cluster, mode, **fields), format="json")
    assert response.status_code == 201, response.data
    reconcile(response.data["id"])
    return response.data


def claim(api, cluster, pool, name, **fields):
    body = {"cluster": cluster.pk, "pool": pool["id"], "name": name, "kind": "fraction", **fields}
    return api.post("/api/v1/claims/", body, format="json")


@pytest.mark.parametrize(
    ("mode", "policy"),
    [
        ("time-slicing", (200, 10)),
        ("mps", (200, 10)),
        ("fractional", (100, None)),
        ("exclusive", (100, None)),
    ],
)
def test_each_mode_brings_its_default_policy(api, cluster, mode, policy):
    pool = make(api, cluster, mode)
    assert (pool["compute_oversubscription_percent"], pool["default_guaranteed_percent"]) == policy


@pytest.mark.parametrize(
    ("mode", "fields", "field"),
    [
        ("exclusive", {"compute_oversubscription_percent": 200}, "compute_oversubscription_percent"),
        ("mig", {"compute_oversubscription_percent": 150}, "compute_oversubscription_percent"),
        ("time-slicing", {"compute_oversubscription_percent": 401}, "compute_oversubscription_percent"),
        ("time-slicing", {"compute_oversubscription_percent": 99}, "compute_oversubscription_percent"),
        ("mps", {"default_guaranteed_percent": 101}, "default_guaranteed_percent"),
        ("exclusive", {"default_guaranteed_percent": 10}, "default_guaranteed_percent"),
    ],
)
def test_a_policy_that_does_not_suit_the_mode_is_refused(api, cluster, mode, fields, field):
    body = pool_body(cluster, mode, **fields)
    if mode == "mig":
        body["gpu_model"] = "a100-sxm4-80gb"
    response = api.post("/api/v1/node-pools/", body, format="json")
    assert response.status_code == 400, response.data
    assert field in str(response.data)
    assert not NodePool.objects.exists()


def test_operators_change_the_policy_and_a_new_mode_brings_its_own(api, cluster):
    pool = make(api, cluster, "time-slicing", compute_oversubscription_percent=300)
    assert pool["compute_oversubscription_percent"] == 300
    changed = api.patch(
        f"/api/v1/node-pools/{pool['id']}/", {"default_guaranteed_percent": None}, format="json"
    )
    assert changed.status_code == 200 and changed.data["default_guaranteed_percent"] is None
    exclusive = api.patch(f"/api/v1/node-pools/{pool['id']}/", {"sharing_mode": "exclusive"}, format="json")
    assert exclusive.status_code == 200, exclusive.data
    assert (
        exclusive.data["compute_oversubscription_percent"],
        exclusive.data["default_guaranteed_percent"],
    ) == (
        100,
        None,
    )


def test_explicit_guarantees_are_held_and_never_pass_the_gpu(api, cluster):
    pool = make(api, cluster, "time-slicing")
    first = claim(api, cluster, pool, "train", gpu_memory="8Gi", compute_percent=70, guaranteed_percent=70)
    (share,) = first.data["allocation"]["gpus"]
    assert (share["compute_percent"], share["guaranteed_percent"]) == (70.0, 70.0)
    assert first.data["gpu_util_display"] == "70%"
    second = claim(api, cluster, pool, "svc", gpu_memory="2Gi", compute_percent=40, guaranteed_percent=40)
    assert second.data["status"] == "pending"
    assert second.data["pending_reason"] == (
        "0/1 nodes: 1 insufficient GPU compute. It needs 40% compute; the best GPU has 30% free to "
        "guarantee and 130% left under its pool's 200% of ceilings; another node (scale the pool up) or "
        "releasing claims would help."
    )
    # Without a guarantee of its own it gets the pool's default (10%) and fits under the 200% ceilings.
    third = claim(api, cluster, pool, "svc2", gpu_memory="2Gi", compute_percent=40)
    assert third.data["status"] == "allocated" and third.data["gpu_util_display"] == "10%/40%"
    assert allocation_violations(cluster.pk) == []


def test_the_ceiling_budget_holds(api, cluster):
    pool = make(api, cluster, "mps", compute_oversubscription_percent=150)
    statuses = [
        claim(api, cluster, pool, f"c{i}", gpu_memory="1Gi", compute_percent=50).data["status"]
        for i in range(4)
    ]
    assert statuses == ["allocated", "allocated", "allocated", "pending"]


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"gpu_memory": "1Gi", "compute_percent": 20, "guaranteed_percent": 30}, "above the claim's ceiling"),
        ({"gpu_memory": "1Gi", "guaranteed_percent": 10}, "above the claim's ceiling"),
        ({"gpu_memory": "1Gi", "compute_percent": 20, "guaranteed_percent": 101}, ""),
    ],
)
def test_a_guarantee_above_the_ceiling_is_refused(api, cluster, fields, message):
    pool = make(api, cluster, "time-slicing")
    response = claim(api, cluster, pool, "bad", **fields)
    assert response.status_code == 400, response.data
    assert "guaranteed_percent" in str(response.data) and message in str(response.data)


def test_a_guarantee_belongs_to_a_fraction(api, cluster):
    pool = make(api, cluster, "exclusive")
    body = {"cluster": cluster.pk, "pool": pool["id"], "name": "w", "kind": "whole", "guaranteed_percent": 50}
    response = api.post("/api/v1/claims/", body, format="json")
    assert response.status_code == 400 and "guaranteed_percent" in str(response.data)


@pytest.mark.parametrize(
    ("mode", "words"),
    [
        ("time-slicing", "nothing holds its memory"),
        ("mps", "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"),
        ("fractional", "enforced in software"),
    ],
)
def test_the_claim_says_what_holds_its_memory_and_compute(api, cluster, mode, words):
    pool = make(api, cluster, mode)
    data = claim(api, cluster, pool, "x", gpu_memory="1Gi", compute_percent=10).data
    assert words in data["allocation"]["isolation_detail"]


def test_sizing_hints_for_an_mps_fraction(api, cluster, owner):
    pool = make(api, cluster, "mps", gpu_model="a100-sxm4-80gb")
    data = claim(api, cluster, pool, "llm", gpu_memory="10Gi", compute_percent=10).data
    sizing = data["sizing"]
    assert sizing["vllm_gpu_memory_utilization"] == 0.12  # 10 of 80 GiB is 0.125, rounded down
    assert (
        "rounded down" in sizing["vllm_explained"] and "within the claim's 10Gi" in sizing["vllm_explained"]
    )
    assert sizing["mps_environment"] == {
        "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE": "10",
        "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT": "0=10240M",
    }
    assert sizing["pod_resources"] == (
        "schedulerName: nvke\nresources:\n  limits:\n    nvidia.com/gpu-memory: 10Gi\n"
        "    nvidia.com/gpu-utilization: 10\n"
    )
    from django.test import Client

    browser = Client()
    browser.force_login(owner)
    page = browser.get(f"/claims/{data['id']}/").content.decode()
    assert "--gpu-memory-utilization 0.12" in page and "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT=0=10240M" in page


def test_no_mps_environment_off_mps_and_no_hints_before_placement(api, cluster):
    pool = make(api, cluster, "time-slicing")
    placed = claim(api, cluster, pool, "a", compute_percent=30).data
    assert "mps_environment" not in placed["sizing"] and "vllm_gpu_memory_utilization" not in placed["sizing"]
    assert placed["sizing"]["pod_resources"].endswith("nvidia.com/gpu-utilization: 30\n")
    assert claim(api, cluster, pool, "b", gpu_memory="20Gi", compute_percent=10).data["status"] == "allocated"
    waiting = claim(api, cluster, pool, "c", gpu_memory="20Gi", compute_percent=10).data
    assert waiting["status"] == "pending" and waiting["sizing"] is None
