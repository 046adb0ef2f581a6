"""Overview, cluster list, create and delete through the dashboard."""

import pytest
import yaml

from claims.allocator import create_claim
from clusters.models import Cluster
from nodepools.models import Gpu
from nodepools.services import reconcile
from nvke.quantity import human_mib
from nvke.tenancy.context import TenantContext

from .helpers import field_errors, live_texts, text

pytestmark = pytest.mark.django_db

NEW_CLUSTER = {
    "name": "training",
    "kubernetes_version": "1.35",
    "region": "us-east-1",
    "control_plane_nodes": "3",
}


def test_dashboard_shows_this_tenants_clusters_only(ui, tenant, make_member, make_cluster):
    mine = make_cluster(tenant, "alpha")
    make_cluster(tenant, "broken", status="failed")
    other = make_member("globex", "owner").memberships.get().tenant
    make_cluster(other, "globex-secret")
    response = ui.get("/")
    page = text(response)
    assert f'href="/clusters/{mine.pk}/">alpha</a>' in page
    assert "broken" in page
    assert "globex-secret" not in page
    assert [c for c in response.context["status_counts"] if c[2]] == [
        ("running", "Running", 1),
        ("failed", "Failed", 1),
    ]
    assert response.context["cluster_total"] == 2
    assert 'data-ws-url="/ws/events/"' in page


def test_dashboard_lists_pools_needing_attention_with_their_reason(ui, tenant, make_cluster, make_pool):
    cluster = make_cluster(tenant, "prod")
    pool = make_pool(cluster, "waiting", status="pending")
    pool.status_reason, pool.status_message = (
        "InsufficientCapacity",
        "Region us-east-1 has 0 of 128 l4 GPUs free",
    )
    pool.save()
    fine = make_pool(cluster, "fine")
    page = text(ui.get("/"))
    assert live_texts(ui.get("/"), "data-pool-status", pool.pk) == ["pending"]
    assert "InsufficientCapacity: Region us-east-1 has 0 of 128 l4 GPUs free" in page
    assert f'href="/pools/{pool.pk}/">waiting</a>' in page
    assert f'href="/pools/{fine.pk}/"' not in page


def test_empty_states_say_what_to_do_next(ui):
    page = text(ui.get("/clusters/"))
    assert 'No clusters yet — <a href="/clusters/new/">create one</a>' in page
    assert "No GPUs yet" in text(ui.get("/"))


def test_cluster_list_filters_with_the_shared_filterset(ui, tenant, make_member, make_cluster):
    make_cluster(tenant, "alpha")
    make_cluster(tenant, "beta", status="failed")
    make_cluster(tenant, "gamma", region="eu-west-1")
    make_cluster(make_member("globex", "owner").memberships.get().tenant, "alphabet")
    names = lambda response: [c.name for c in response.context["page_obj"]]  # noqa: E731
    assert names(ui.get("/clusters/")) == ["alpha", "beta", "gamma"]
    assert names(ui.get("/clusters/", {"status": "failed"})) == ["beta"]
    assert names(ui.get("/clusters/", {"region": "eu-west-1"})) == ["gamma"]
    assert names(ui.get("/clusters/", {"name": "alp"})) == ["alpha"]
    response = ui.get("/clusters/", {"name": "nothing"})
    assert "No clusters match these filters" in text(response)


def test_cluster_list_row_shows_live_status_region_version_and_pools(ui, tenant, make_cluster, make_pool):
    cluster = make_cluster(tenant, "alpha")
    make_pool(cluster, "a")
    make_pool(cluster, "b")
    response = ui.get("/clusters/")
    row = text(response).split(f'data-cluster-row="{cluster.pk}"')[1].split("</tr>")[0]
    assert live_texts(response, "data-cluster-status", cluster.pk) == ["running"]
    assert "us-east-1" in row and "1.35" in row and '<td class="num">2</td>' in row


def test_create_form_offers_enabled_versions_with_the_default_selected(ui, catalog):
    response = ui.get("/clusters/new/")
    assert response.status_code == 200
    form = response.context["form"]
    assert [v.version for v in form.fields["kubernetes_version"].queryset] == ["1.36", "1.35", "1.34"]
    assert '<option value="1.35" selected>' in text(response)
    assert '<option value="1.33"' not in text(response)  # in the catalog, not offered
    for name in NEW_CLUSTER:
        assert f'<label for="id_{name}">' in text(response)


def test_create_cluster_provisions_it_and_shows_it_running(ui, catalog, django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks(execute=True):
        response = ui.post("/clusters/new/", NEW_CLUSTER)
    cluster = Cluster.objects.get(name="training")
    assert response.status_code == 302 and response.url == f"/clusters/{cluster.pk}/"
    assert cluster.status == "running" and cluster.control_plane_nodes == 3
    detail = ui.get(response.url)
    page = text(detail)
    assert live_texts(detail, "data-cluster-status", cluster.pk) == ["running"]
    assert cluster.endpoint in page
    assert "Provisioned" in page and "The control plane is serving." in page  # the Ready condition
    assert f'data-ws-url="/ws/events/?cluster={cluster.pk}"' in page
    assert "is being created" in page  # the flash message


@pytest.mark.parametrize(
    ("change", "field", "message"),
    [
        ({"name": "Bad_Name"}, "name", "Use lower-case letters"),
        ({"name": ""}, "name", "This field is required."),
        ({"kubernetes_version": "1.33"}, "kubernetes_version", "Select a valid choice."),
        ({"control_plane_nodes": "2"}, "control_plane_nodes", "Select a valid choice."),
    ],
)
def test_invalid_input_is_shown_next_to_the_field(ui, catalog, change, field, message):
    response = ui.post("/clusters/new/", {**NEW_CLUSTER, **change})
    assert response.status_code == 400
    assert any(message in error for error in field_errors(response, field))
    assert not Cluster.objects.exists()


def test_duplicate_name_from_the_service_is_shown_next_to_name(ui, tenant, make_cluster):
    make_cluster(tenant, "training")
    response = ui.post("/clusters/new/", NEW_CLUSTER)
    assert response.status_code == 400
    assert field_errors(response, "name") == ["A cluster named 'training' already exists."]
    # Screen readers hear the error with the control.
    assert 'aria-invalid="true" aria-describedby="id_name_helptext id_name_error"' in text(response)
    assert 'id="id_name_error"' in text(response)
    assert Cluster.objects.count() == 1


def test_delete_asks_first_then_tears_the_cluster_down(
    ui, tenant, make_cluster, make_pool, django_capture_on_commit_callbacks
):
    cluster = make_cluster(tenant, "prod")
    make_pool(cluster, "a")
    make_pool(cluster, "b")
    detail = text(ui.get(f"/clusters/{cluster.pk}/"))
    assert f'href="/clusters/{cluster.pk}/delete/"' in detail
    confirm = ui.get(f"/clusters/{cluster.pk}/delete/")
    assert "Delete cluster prod and its 2 pools?" in text(confirm)
    assert Cluster.objects.filter(pk=cluster.pk).exists()  # a GET deletes nothing
    with django_capture_on_commit_callbacks(execute=True):
        response = ui.post(f"/clusters/{cluster.pk}/delete/")
    assert response.status_code == 302 and response.url == "/clusters/"
    assert not Cluster.objects.filter(pk=cluster.pk).exists()
    assert ui.get(f"/clusters/{cluster.pk}/").status_code == 404


def test_delete_marks_the_cluster_deleting_until_the_task_runs(ui, tenant, make_cluster):
    cluster = make_cluster(tenant, "prod")
    ui.post(f"/clusters/{cluster.pk}/delete/")  # on_commit callbacks not run: the teardown waits
    response = ui.get("/clusters/")
    assert live_texts(response, "data-cluster-status", cluster.pk) == ["deleting"]


def test_every_page_has_a_plain_title(ui, tenant, make_cluster, make_pool):
    """Titles are text: markup that slips into a title block shows up raw in the browser's tab."""
    import re

    cluster = make_cluster(tenant, "prod")
    pool = make_pool(cluster, name="gpu")
    reconcile(pool.pk)
    node = pool.nodes.first()
    pages = {
        "/": "Overview",
        "/clusters/": "Clusters",
        f"/clusters/{cluster.pk}/": "prod",
        f"/clusters/{cluster.pk}/claims/": None,
        f"/pools/{pool.pk}/": None,
        f"/nodes/{node.pk}/": f"Node {node.name}",
        f"/clusters/{cluster.pk}/pools/new/": "Add node pool to prod",
    }
    for url, expected in pages.items():
        title = re.search(r"<title>(.*?)</title>", text(ui.get(url)), re.S).group(1)
        assert "<" not in title and "\n" not in title, (url, title)
        if expected:
            assert title == f"{expected} · NVKE", (url, title)


def test_overview_shows_capacity_held_and_free_and_what_needs_attention(ui, tenant, make_cluster, make_pool):
    cluster = make_cluster(tenant, "prod")
    pool = make_pool(cluster, "frac", nodes=2, gpus_per_node=1, sharing_mode="fractional")
    reconcile(pool.pk)
    context = TenantContext(tenant, "owner")
    create_claim(
        context=context, cluster=cluster, name="a", kind="fraction", gpu_memory_mib=6144, compute_percent=25
    )
    waiting = create_claim(context=context, cluster=cluster, name="huge", kind="whole", gpus=4)
    assert waiting.status == "pending"
    Gpu.objects.filter(pk=Gpu.objects.filter(node__pool=pool).order_by("pk").first().pk).update(healthy=False)
    make_cluster(tenant, "quiet")

    response = ui.get("/")
    [l4] = response.context["gpus_by_model"]
    total = 2 * 23034
    assert (l4.gpus, l4.healthy, l4.memory_mib, l4.memory_held_mib, l4.compute_held_milli) == (
        2,
        1,
        total,
        6144,
        250,
    )
    page = text(response)
    assert f"6Gi / {human_mib(total)}" in page and f">{human_mib(total - 6144)}<" in page  # held/total, free
    assert "0.25 / 2 GPUs" in page and ">1.75 GPUs<" in page
    [attention] = response.context["attention"]
    assert attention.cluster == cluster
    assert attention.problems == ["1 pending claim", "1 unhealthy GPU"]
    assert '<span class="problem">1 pending claim</span>' in page


def test_a_failed_cluster_needs_attention_first(ui, tenant, make_cluster, make_pool):
    busy = make_cluster(tenant, "busy")
    make_pool(busy, "short", status="pending")
    failed = make_cluster(tenant, "broken", status="failed")
    failed.status_reason, failed.status_message = "QuotaExceeded", "No control-plane capacity"
    failed.save()
    attention = ui.get("/").context["attention"]
    assert [a.cluster.name for a in attention] == ["broken", "busy"]
    assert attention[0].problems == ["Cluster failed — QuotaExceeded: No control-plane capacity"]
    assert [p.name for p in attention[1].pools] == ["short"]


def test_cluster_page_lists_every_node_with_gpu_health_and_claims(ui, tenant, make_cluster, make_pool):
    cluster = make_cluster(tenant, "prod")
    pool = make_pool(cluster, "frac", nodes=2, gpus_per_node=2, sharing_mode="fractional")
    reconcile(pool.pk)
    context = TenantContext(tenant, "owner")
    claim = create_claim(context=context, cluster=cluster, name="a", kind="fraction", gpu_memory_mib=1024)
    busy = claim.allocation.node
    Gpu.objects.filter(pk=busy.gpus.order_by("index").first().pk).update(healthy=False)
    page = text(ui.get(f"/clusters/{cluster.pk}/"))
    rows = {
        pk: page.split(f'data-node-row="{pk}"')[1].split("</tr>")[0]
        for pk in pool.nodes.values_list("pk", flat=True)
    }
    assert len(rows) == 2
    assert f'href="/nodes/{busy.pk}/"' in rows[busy.pk]
    assert '<td class="num text-danger">1/2</td>' in rows[busy.pk]
    assert '<td class="num">1</td>' in rows[busy.pk]  # claims on it
    [idle] = set(rows) - {busy.pk}
    assert '<td class="num">2/2</td>' in rows[idle] and '<td class="num">0</td>' in rows[idle]


def test_kubeconfig_download_names_the_endpoint_and_context(ui, tenant, owner, make_cluster):
    cluster = make_cluster(tenant, "prod")
    page = text(ui.get(f"/clusters/{cluster.pk}/"))
    assert f'href="/clusters/{cluster.pk}/kubeconfig/" download>Download kubeconfig</a>' in page
    response = ui.get(f"/clusters/{cluster.pk}/kubeconfig/")
    assert response.status_code == 200
    assert response["Content-Disposition"] == 'attachment; filename="prod-kubeconfig.yaml"'
    config = yaml.safe_load(response.content)
    name = f"nvke-{tenant.slug}-prod"
    assert config["clusters"] == [{"name": name, "cluster": {"server": cluster.endpoint}}]
    assert cluster.endpoint.startswith("https://")
    assert config["current-context"] == name
    assert config["contexts"][0]["context"] == {"cluster": name, "user": f"{name}-{owner.username}"}
    assert config["users"] == [{"name": f"{name}-{owner.username}", "user": {"token": cluster.admin_token}}]


def test_a_cluster_without_an_endpoint_has_no_kubeconfig(ui, tenant, make_cluster, make_member):
    provisioning = make_cluster(tenant, "new", status="provisioning")
    assert "Available once the cluster is running" in text(ui.get(f"/clusters/{provisioning.pk}/"))
    assert ui.get(f"/clusters/{provisioning.pk}/kubeconfig/").status_code == 404
    theirs = make_cluster(make_member("globex").memberships.get().tenant, "theirs")
    assert ui.get(f"/clusters/{theirs.pk}/kubeconfig/").status_code == 404


def test_a_simulated_cluster_says_so_and_how_to_attach_a_real_one(ui, tenant, make_cluster):
    cluster = make_cluster(tenant, "demo")
    page = ui.get(f"/clusters/{cluster.pk}/").content.decode()
    assert "data-simulated" in page and "This cluster is simulated" in page
    assert 'href="/clusters/attach/"' in page
