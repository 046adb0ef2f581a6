import pytest

from nodepools.models import Gpu, Node, NodePool
from nvke.providers.simulator.models import SimNode

pytestmark = pytest.mark.django_db


@pytest.fixture
def cluster(owner, make_cluster):
    return make_cluster(owner.memberships.get().tenant, "prod")


@pytest.fixture
def body(cluster):
    return {
        "cluster": cluster.pk,
        "name": "train",
        "gpu_model": "h100-sxm5-80gb",
        "gpus_per_node": 8,
        "node_count": 2,
        "min_nodes": 1,
        "max_nodes": 4,
        "driver_release": "580.105.08",
    }


def test_create_builds_nodes_and_gpus_with_topology(api, body, django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks(execute=True):
        response = api.post("/api/v1/node-pools/", body)
    assert response.status_code == 201, response.data
    pool = NodePool.objects.get(pk=response.data["id"])
    assert pool.status == "ready"
    nodes = list(pool.nodes.all())
    assert len(nodes) == 2
    gpus = Gpu.objects.filter(node__pool=pool)
    assert gpus.count() == 16
    # An 8-GPU SXM board is one NVLink domain per node; indexes 0..7 on each node.
    for node in nodes:
        assert sorted(g.index for g in node.gpus.all()) == list(range(8))
        assert {g.nvlink_domain for g in node.gpus.all()} == {f"{node.name}-nvlink"}
        assert node.labels["nvidia.com/gpu.product"] == "h100-sxm5-80gb"
        assert node.driver_version == "580.105.08"
        assert node.cpu_millicores == 24 * 8 * 1000
    assert {g.memory_mib for g in gpus} == {81559}
    assert len({g.uuid for g in gpus}) == 16
    listed = api.get("/api/v1/nodes/", {"pool": pool.pk}).data
    assert listed["count"] == 2 and len(listed["results"][0]["gpus"]) == 8


def test_pcie_gpus_have_no_nvlink_domain(api, body, django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks(execute=True):
        api.post("/api/v1/node-pools/", {**body, "gpu_model": "l4", "gpus_per_node": 4})
    assert set(Gpu.objects.values_list("nvlink_domain", flat=True)) == {""}


def test_scale_up_and_down(api, body, django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks(execute=True):
        pool_id = api.post("/api/v1/node-pools/", body).data["id"]
    with django_capture_on_commit_callbacks(execute=True):
        response = api.patch(f"/api/v1/node-pools/{pool_id}/", {"node_count": 4})
    assert response.status_code == 200, response.data
    assert response.data["status"] == "scaling"
    assert Node.objects.filter(pool_id=pool_id).count() == 4
    with django_capture_on_commit_callbacks(execute=True):
        api.patch(f"/api/v1/node-pools/{pool_id}/", {"node_count": 1})
    assert Node.objects.filter(pool_id=pool_id).count() == 1
    assert SimNode.objects.filter(pool="train").count() == 1
    assert api.get(f"/api/v1/node-pools/{pool_id}/").data["status"] == "ready"


def test_capacity_shortfall_leaves_pool_pending_with_reason(api, body, django_capture_on_commit_callbacks):
    # eu-west-1 has 16 H200s: two 8-GPU nodes fit, the third waits.
    from catalog.models import Region

    body["cluster"] = api.post(
        "/api/v1/clusters/",
        {
            "name": "eu",
            "kubernetes_version": "1.35",
            "region": "eu-west-1",
            "control_plane_nodes": 1,
        },
    ).data["id"]
    from clusters.services import provision

    provision(body["cluster"])
    with django_capture_on_commit_callbacks(execute=True):
        response = api.post("/api/v1/node-pools/", {**body, "gpu_model": "h200-sxm-141gb", "node_count": 3})
    pool = api.get(f"/api/v1/node-pools/{response.data['id']}/").data
    assert pool["status"] == "pending"
    assert pool["status_reason"] == "InsufficientCapacity"
    assert "Region eu-west-1 has 0 of 16 h200-sxm-141gb GPUs free" in pool["status_message"]
    assert "1 of 3 nodes" in pool["status_message"]
    assert pool["nodes_ready"] == 2
    region = api.get("/api/v1/regions/eu-west-1/").data
    h200 = next(row for row in region["inventory"] if row["gpu_model"] == "h200-sxm-141gb")
    # What this tenant may add: nothing (its pool holds every H200 there), its quota leaving 64 - 32.
    assert h200 == {
        "gpu_model": "h200-sxm-141gb",
        "available_gpus": 0,
        "limited_by": "capacity",
        "quota_left_gpus": 32,
    }
    assert Region.objects.filter(name="eu-west-1").exists()


@pytest.mark.parametrize(
    ("change", "field", "code", "message"),
    [
        (
            {"driver_release": "535.230.02", "gpu_model": "b200-sxm-180gb"},
            "driver_release",
            "architecture",
            "Driver branch 535 (535.230.02) does not support Blackwell.",
        ),
        (
            {"driver_release": "570.172.08"},
            "driver_release",
            "end_of_life",
            "Driver branch 570 reached end of life on 2026-02-28.",
        ),
        (
            {"gpu_model": "l4", "sharing_mode": "mig"},
            "sharing_mode",
            "mig_unsupported",
            "L4 24GB does not support MIG.",
        ),
        (
            {"sharing_mode": "mig", "mig_layout": ["4g.40gb", "4g.40gb"]},
            "mig_layout",
            "mig_layout_does_not_fit",
            "MIG layout 4g.40gb + 4g.40gb does not fit on one GPU.",
        ),
        ({"sharing_mode": "mig", "mig_layout": ["9g.1tb"]}, "mig_layout", "unknown_mig_profile", None),
        (
            {"mig_layout": ["1g.10gb"]},
            "mig_layout",
            "invalid",
            "mig_layout applies only to sharing_mode mig.",
        ),
        ({"node_count": 9}, "node_count", "out_of_bounds", None),
        ({"gpus_per_node": 9}, "gpus_per_node", "invalid", None),
        ({"driver_release": "999.1.1"}, "driver_release", "invalid", None),
        ({"gpu_model": "rtx-9090"}, "gpu_model", "invalid", None),
        ({"name": "-bad-"}, "name", "invalid", None),
    ],
)
def test_refusals_name_field_and_rule(api, body, change, field, code, message):
    response = api.post("/api/v1/node-pools/", {**body, **change})
    assert response.status_code == 400, response.data
    assert response.data["code"] == code
    if code == "invalid" and "fields" in response.data["details"]:
        assert field in response.data["details"]["fields"]
    else:
        assert response.data["details"]["field"] == field
    if message:
        assert response.data["message"] == message
    assert not NodePool.objects.exists()


def test_valid_mig_layout_is_accepted(api, body):
    response = api.post(
        "/api/v1/node-pools/",
        {
            **body,
            "sharing_mode": "mig",
            "mig_layout": ["3g.40gb", "2g.20gb", "1g.10gb", "1g.10gb"],
        },
    )
    assert response.status_code == 201, response.data


def test_update_checks_compatibility_and_immutables(api, body, make_pool, cluster):
    pool = make_pool(cluster, gpu_model="h100-sxm5-80gb", gpus_per_node=8)
    response = api.patch(f"/api/v1/node-pools/{pool.pk}/", {"driver_release": "550.163.01"})
    assert response.status_code == 400 and response.data["code"] == "end_of_life"
    response = api.patch(f"/api/v1/node-pools/{pool.pk}/", {"gpu_model": "l4"})
    assert response.status_code == 400
    assert response.data["message"] == "gpu_model: Fixed when the pool is created."
    pool.refresh_from_db()
    assert pool.driver_release.version == "580.105.08" and pool.gpu_model.name == "h100-sxm5-80gb"
    assert api.patch(f"/api/v1/node-pools/{pool.pk}/", {"driver_release": "620.70.06"}).status_code == 200


def test_duplicate_pool_name_in_cluster_is_409(api, body, make_pool, cluster):
    make_pool(cluster, name="train")
    response = api.post("/api/v1/node-pools/", body)
    assert response.status_code == 409
    assert response.data["details"] == {"field": "name"}
    assert NodePool.objects.count() == 1


def test_pool_in_deleting_cluster_is_409(api, body, cluster):
    cluster.status = "deleting"
    cluster.save()
    response = api.post("/api/v1/node-pools/", body)
    assert response.status_code == 409 and response.data["details"]["field"] == "cluster"


def test_delete_pool_removes_nodes(api, body, django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks(execute=True):
        pool_id = api.post("/api/v1/node-pools/", body).data["id"]
    with django_capture_on_commit_callbacks(execute=True):
        assert api.delete(f"/api/v1/node-pools/{pool_id}/").status_code == 202
    assert not NodePool.objects.filter(pk=pool_id).exists()
    assert not SimNode.objects.exists()
    assert not Gpu.objects.exists()


def test_pool_waits_for_its_cluster(api, owner, make_cluster, body, django_capture_on_commit_callbacks):
    from clusters.services import provision

    pending = make_cluster(owner.memberships.get().tenant, "slow", status="provisioning")
    with django_capture_on_commit_callbacks(execute=True):
        pool_id = api.post("/api/v1/node-pools/", {**body, "cluster": pending.pk}).data["id"]
    assert NodePool.objects.get(pk=pool_id).status == "provisioning"
    with django_capture_on_commit_callbacks(execute=True):
        provision(pending.pk)
    assert NodePool.objects.get(pk=pool_id).status == "ready"
    assert Node.objects.filter(pool_id=pool_id).count() == 2


def test_placement_policy_defaults_to_fgd_and_can_change(api, body):
    pool = api.post("/api/v1/node-pools/", body).data
    assert pool["placement_policy"] == "fgd"
    changed = api.patch(f"/api/v1/node-pools/{pool['id']}/", {"placement_policy": "spread"})
    assert changed.status_code == 200 and changed.data["placement_policy"] == "spread"
    refused = api.patch(f"/api/v1/node-pools/{pool['id']}/", {"placement_policy": "random"})
    assert refused.status_code == 400 and refused.data["message"].startswith("placement_policy:")
