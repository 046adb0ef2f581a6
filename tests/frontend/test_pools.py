"""Node pools through the dashboard: create, detail with nodes and GPUs, scale, delete."""

import json
import re

import pytest

from catalog.compatibility import driver_refusals, sharing_refusal
from catalog.models import DriverRelease, GpuModel
from clusters.models import Cluster
from frontend.forms import PoolCreateForm
from frontend.overview import ModelCapacity
from nodepools.models import Gpu, Node, NodePool

from .helpers import field_errors, live_texts, text

pytestmark = pytest.mark.django_db

NEW_POOL = {
    "name": "train",
    "gpu_model": "h100-sxm5-80gb",
    "gpus_per_node": "8",
    "node_count": "2",
    "min_nodes": "0",
    "max_nodes": "4",
    "driver_release": "580.105.08",
    "sharing_mode": "exclusive",
    "mig_layout": "",
}


@pytest.fixture
def running_cluster(ui, catalog, django_capture_on_commit_callbacks) -> Cluster:
    """A cluster created through the UI and provisioned by the simulator (so pools can get nodes)."""
    form = {"name": "prod", "kubernetes_version": "1.35", "region": "us-east-1", "control_plane_nodes": "1"}
    with django_capture_on_commit_callbacks(execute=True):
        ui.post("/clusters/new/", form)
    cluster = Cluster.objects.get(name="prod")
    assert cluster.status == "running"
    return cluster


@pytest.fixture
def ready_pool(ui, running_cluster, django_capture_on_commit_callbacks) -> NodePool:
    with django_capture_on_commit_callbacks(execute=True):
        response = ui.post(f"/clusters/{running_cluster.pk}/pools/new/", NEW_POOL)
    pool = NodePool.objects.get(name="train")
    assert response.status_code == 302 and response.url == f"/pools/{pool.pk}/"
    assert pool.status == "ready", pool.status_message
    return pool


def test_pool_form_has_every_field_labelled(ui, running_cluster):
    response = ui.get(f"/clusters/{running_cluster.pk}/pools/new/")
    assert response.status_code == 200
    for name in NEW_POOL:
        assert f'<label for="id_{name}">' in text(response)


def test_drivers_past_end_of_life_are_not_offered(ui, running_cluster):
    drivers = ui.get(f"/clusters/{running_cluster.pk}/pools/new/").context["form"].fields["driver_release"]
    versions = [driver.version for driver in drivers.queryset]
    assert "580.105.08" in versions and "550.90.07" not in versions  # R550 ended 2025-04-17


def test_cluster_detail_links_the_add_pool_form_and_says_when_it_has_none(ui, running_cluster):
    page = text(ui.get(f"/clusters/{running_cluster.pk}/"))
    assert f'href="/clusters/{running_cluster.pk}/pools/new/"' in page
    assert "No node pools yet" in page


def test_pool_detail_lists_nodes_and_gpus_once_reconciled(ui, ready_pool):
    response = ui.get(f"/pools/{ready_pool.pk}/")
    assert response.status_code == 200
    page = text(response)
    assert live_texts(response, "data-pool-status", ready_pool.pk) == ["ready"]
    assert live_texts(response, "data-pool-nodes", ready_pool.pk) == ["2/2"]
    nodes = list(Node.objects.filter(pool=ready_pool))
    assert len(nodes) == 2
    for node in nodes:
        assert node.name in page
        for gpu in node.gpus.all():
            assert str(gpu.uuid).split("-")[0] in page
    assert page.count('class="gpu-index"') == 16
    assert page.count(">NVLink<") == 16  # H100 SXM nodes of 8 GPUs share an NVLink domain
    assert page.count("79.6 GiB") == 16  # 81559 MiB
    assert "580.105.08" in page and "NodesReady" in page
    assert f'data-ws-url="/ws/events/?cluster={ready_pool.cluster_id}"' in page
    assert f'data-refresh-on="pool:{ready_pool.pk}"' in page  # its claims' events name the pool


def test_pcie_gpus_show_no_nvlink_badge(ui, running_cluster, django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks(execute=True):
        ui.post(
            f"/clusters/{running_cluster.pk}/pools/new/", {**NEW_POOL, "gpu_model": "l4", "node_count": "1"}
        )
    pool = NodePool.objects.get(name="train")
    page = text(ui.get(f"/pools/{pool.pk}/"))
    assert page.count('class="gpu-index"') == 8 and ">NVLink<" not in page


def test_cluster_detail_shows_the_pool_row(ui, ready_pool):
    response = ui.get(f"/clusters/{ready_pool.cluster_id}/")
    row = text(response).split(f'data-pool-row="{ready_pool.pk}"')[1].split("</tr>")[0]
    assert f'href="/pools/{ready_pool.pk}/">train</a>' in row
    assert "H100 SXM5 80GB" in row and "580.105.08" in row and "exclusive" in row
    assert live_texts(response, "data-pool-nodes", ready_pool.pk) == ["2/2"]
    assert live_texts(response, "data-pool-status", ready_pool.pk) == ["ready"]


def test_dashboard_counts_gpus_by_model(ui, ready_pool):
    response = ui.get("/")
    assert response.context["gpus_by_model"] == [
        ModelCapacity(
            name="h100-sxm5-80gb",
            display_name="H100 SXM5 80GB",
            gpus=16,
            healthy=16,
            memory_mib=16 * 81559,
            memory_held_mib=0,
            compute_held_milli=0,
        )
    ]
    assert "0Gi / 1274.4Gi" in text(response)


def test_mig_on_a_gpu_without_mig_is_shown_next_to_sharing_mode(ui, running_cluster):
    response = ui.post(
        f"/clusters/{running_cluster.pk}/pools/new/", {**NEW_POOL, "gpu_model": "l4", "sharing_mode": "mig"}
    )
    assert response.status_code == 400
    assert field_errors(response, "sharing_mode") == ["L4 24GB does not support MIG."]
    assert not NodePool.objects.exists()


def test_node_count_out_of_bounds_is_shown_next_to_node_count(ui, running_cluster):
    response = ui.post(f"/clusters/{running_cluster.pk}/pools/new/", {**NEW_POOL, "node_count": "9"})
    assert response.status_code == 400
    assert field_errors(response, "node_count") == [
        "“Nodes” 9 must lie within “Minimum nodes” 0 and “Maximum nodes” 4."
    ]
    assert not NodePool.objects.exists()


def test_mig_layout_is_read_as_comma_separated_profiles(ui, running_cluster):
    form = {
        **NEW_POOL,
        "gpu_model": "a100-sxm4-80gb",
        "sharing_mode": "mig",
        "mig_layout": " 3g.40gb,3g.40gb , ",
    }
    response = ui.post(f"/clusters/{running_cluster.pk}/pools/new/", form)
    assert response.status_code == 302
    assert NodePool.objects.get(name="train").mig_layout == ["3g.40gb", "3g.40gb"]


def test_unknown_mig_profile_is_shown_next_to_mig_layout(ui, running_cluster):
    form = {**NEW_POOL, "gpu_model": "a100-sxm4-80gb", "sharing_mode": "mig", "mig_layout": "9g.99gb"}
    response = ui.post(f"/clusters/{running_cluster.pk}/pools/new/", form)
    assert response.status_code == 400
    assert "has no MIG profile '9g.99gb'" in field_errors(response, "mig_layout")[0]


def test_duplicate_pool_name_is_shown_next_to_name(ui, ready_pool):
    response = ui.post(f"/clusters/{ready_pool.cluster_id}/pools/new/", NEW_POOL)
    assert response.status_code == 400
    assert field_errors(response, "name") == ["Cluster prod already has a pool named 'train'."]


def test_a_failed_cluster_takes_no_pools_and_says_why_above_the_form(ui, tenant, make_cluster):
    cluster = make_cluster(tenant, "broken", status="failed")
    response = ui.post(f"/clusters/{cluster.pk}/pools/new/", NEW_POOL)
    assert response.status_code == 400
    assert "Cluster broken is failed; it takes no new pools." in text(response)
    assert not NodePool.objects.exists()


def test_scale_within_bounds_reconciles_the_nodes(ui, ready_pool, django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks(execute=True):
        response = ui.post(f"/pools/{ready_pool.pk}/scale/", {"node_count": "1"})
    assert response.status_code == 302 and response.url == f"/pools/{ready_pool.pk}/"
    ready_pool.refresh_from_db()
    assert ready_pool.node_count == 1 and ready_pool.status == "ready"
    assert Node.objects.filter(pool=ready_pool).count() == 1
    assert live_texts(ui.get(response.url), "data-pool-nodes", ready_pool.pk) == ["1/1"]


def test_scale_out_of_bounds_is_shown_next_to_node_count(ui, ready_pool):
    response = ui.post(f"/pools/{ready_pool.pk}/scale/", {"node_count": "5"})
    assert response.status_code == 400
    assert field_errors(response, "node_count") == ["“Nodes” 5 must lie within min nodes 0 and max nodes 4."]
    ready_pool.refresh_from_db()
    assert ready_pool.node_count == 2


def test_scale_is_post_only(ui, ready_pool):
    assert ui.get(f"/pools/{ready_pool.pk}/scale/").status_code == 405


def test_pool_delete_asks_first_then_removes_the_pool(ui, ready_pool, django_capture_on_commit_callbacks):
    confirm = ui.get(f"/pools/{ready_pool.pk}/delete/")
    assert "Delete node pool train and its 2 nodes?" in text(confirm)
    with django_capture_on_commit_callbacks(execute=True):
        response = ui.post(f"/pools/{ready_pool.pk}/delete/")
    assert response.status_code == 302 and response.url == f"/clusters/{ready_pool.cluster_id}/"
    assert not NodePool.objects.filter(pk=ready_pool.pk).exists()
    assert not Gpu.objects.exists()
    assert ui.get(f"/pools/{ready_pool.pk}/").status_code == 404


# --- compatibility hints ---------------------------------------------------------------------------


def embedded_hints(response) -> dict:
    found = re.search(
        r'<script id="pool-hints-data" type="application/json">(.*?)</script>', text(response), re.S
    )
    assert found, "no hints on the page"
    return json.loads(found.group(1))["models"]


def test_pool_form_embeds_what_fits_each_gpu_model(ui, running_cluster, hopper_only_driver):
    hints = embedded_hints(ui.get(f"/clusters/{running_cluster.pk}/pools/new/"))
    assert set(hints) == set(GpuModel.objects.values_list("name", flat=True))
    l4, h100, b200 = hints["l4"], hints["h100-sxm5-80gb"], hints["b200-sxm-180gb"]
    assert l4["sharing"]["mig"] == sharing_refusal(GpuModel.objects.get(name="l4"), "mig").message
    assert l4["sharing"]["exclusive"] == "" and l4["mig_profiles"] == []
    assert h100["sharing"]["mig"] == "" and "3g.40gb" in h100["mig_profiles"]
    assert b200["drivers"]["other"]["600.10.01"] == [
        "Driver branch 600 (600.10.01) does not support Blackwell."
    ]
    assert h100["drivers"]["other"]["600.10.01"] == []
    # Every offered driver (and only those) with the service's own reasons for the chosen mode.
    offered = {d.version for d in PoolCreateForm().fields["driver_release"].queryset}
    assert "600.10.01" in offered and "535.230.02" not in offered  # past end of life
    for name, hint in hints.items():
        model = GpuModel.objects.get(name=name)
        for mode, key in [("exclusive", "other"), ("mig", "mig")]:
            assert set(hint["drivers"][key]) == offered
            for version, reasons in hint["drivers"][key].items():
                driver = DriverRelease.objects.get(version=version)
                assert reasons == [r.message for r in driver_refusals(driver, model, mode)]


# --- capacity before it is asked for -------------------------------------------------------------


@pytest.fixture
def eu_cluster(tenant, make_cluster) -> Cluster:
    return make_cluster(tenant, "eu", region="eu-west-1")  # 16 H200s, 32 L4s, no A10


def test_pool_form_shows_what_the_tenant_may_get_in_the_region(ui, eu_cluster, settings):
    settings.NVKE_DEFAULT_GPU_QUOTA = 24
    response = ui.get(f"/clusters/{eu_cluster.pk}/pools/new/")
    page = text(response)
    assert ">L4 24GB (24 GPUs available to you)</option>" in page  # the quota binds, not the region's 32
    assert ">A10 24GB (none in this region)</option>" in page
    found = re.search(r'<script id="pool-hints-data" type="application/json">(.*?)</script>', page, re.S)
    embedded = json.loads(found.group(1))
    assert embedded["region"] == "eu-west-1"
    assert embedded["capacity"]["l4"] == {
        "available_gpus": 24,
        "quota_left_gpus": 24,
        "bound": "what your GPU quota leaves",
    }
    assert "a10" not in embedded["capacity"]
    # The same figures as the API's.
    regions = ui.get("/api/v1/regions/eu-west-1/").json()
    assert {"gpu_model": "l4", "available_gpus": 24, "limited_by": "quota", "quota_left_gpus": 24} in (
        regions["inventory"]
    )


@pytest.mark.parametrize(
    ("model", "gpus", "nodes", "warning"),
    [
        ("a10", 1, 1, "Region eu-west-1 has no A10 24GB GPUs: the pool's nodes would wait pending."),
        (
            "h200-sxm-141gb",
            8,
            3,
            "This pool asks for 24 H200 SXM 141GB GPUs; you may get 16 in eu-west-1 now (the GPUs free in "
            "the region now): 1 of its 3 nodes would wait pending.",
        ),
    ],
)
def test_pool_form_asks_before_creating_a_pool_that_would_wait(
    ui, eu_cluster, model, gpus, nodes, warning, django_capture_on_commit_callbacks
):
    form = {**NEW_POOL, "gpu_model": model, "gpus_per_node": gpus, "node_count": nodes, "max_nodes": nodes}
    response = ui.post(f"/clusters/{eu_cluster.pk}/pools/new/", form)
    assert response.status_code == 400
    assert field_errors(response, "wait_for_capacity") == [f"{warning} Tick this to create it anyway."]
    assert not NodePool.objects.exists()
    with django_capture_on_commit_callbacks(execute=True):
        response = ui.post(f"/clusters/{eu_cluster.pk}/pools/new/", {**form, "wait_for_capacity": "on"})
    pool = NodePool.objects.get()
    assert response.status_code == 302 and response.url == f"/pools/{pool.pk}/"
    assert (pool.status, pool.status_reason) == ("pending", "InsufficientCapacity")


def test_a_pool_the_region_can_give_is_created_without_asking(ui, eu_cluster):
    form = {**NEW_POOL, "gpu_model": "l4", "gpus_per_node": 8, "node_count": 4, "max_nodes": 4}
    response = ui.post(f"/clusters/{eu_cluster.pk}/pools/new/", form)
    assert response.status_code == 302 and NodePool.objects.get().node_count == 4
