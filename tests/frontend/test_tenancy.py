"""Tenant isolation, viewer role, and the tenant switcher."""

import pytest

from clusters.models import Cluster
from nodepools.models import Gpu, Node, NodePool
from nvke.tenancy.context import SESSION_KEY
from nvke.tenancy.models import Membership, Tenant

from .helpers import text

pytestmark = pytest.mark.django_db


@pytest.fixture
def foreign(make_member, make_cluster, make_pool):
    """Another tenant's cluster and pool (with a node and GPU), which acme must not see."""
    other = make_member("globex", "owner").memberships.get().tenant
    cluster = make_cluster(other, "secret-cluster")
    pool = make_pool(cluster, "secret-pool")
    node = Node.objects.create(
        tenant=other,
        pool=pool,
        name="secret-node",
        driver_version="580.105.08",
        cpu_millicores=1000,
        memory_mib=1024,
    )
    Gpu.objects.create(tenant=other, node=node, index=0, memory_mib=23034)
    return cluster, pool


@pytest.mark.parametrize(
    ("method", "path"),
    [
        ("get", "/clusters/{cluster}/"),
        ("get", "/clusters/{cluster}/delete/"),
        ("post", "/clusters/{cluster}/delete/"),
        ("get", "/clusters/{cluster}/pools/new/"),
        ("post", "/clusters/{cluster}/pools/new/"),
        ("get", "/pools/{pool}/"),
        ("post", "/pools/{pool}/scale/"),
        ("get", "/pools/{pool}/delete/"),
        ("post", "/pools/{pool}/delete/"),
        ("get", "/nodes/{node}/"),
        ("get", "/clusters/{cluster}/kubeconfig/"),
    ],
)
def test_another_tenants_objects_are_404(ui, foreign, method, path):
    cluster, pool = foreign
    node = pool.nodes.get()
    response = getattr(ui, method)(
        path.format(cluster=cluster.pk, pool=pool.pk, node=node.pk), {"node_count": "1"}
    )
    assert response.status_code == 404
    assert Cluster.objects.get(pk=cluster.pk).status == "running"
    assert (
        NodePool.objects.get(pk=pool.pk).status == "ready"
        and NodePool.objects.get(pk=pool.pk).node_count == 2
    )


def test_another_tenants_objects_are_absent_from_lists(ui, foreign):
    for path in ["/", "/clusters/", "/clusters/?name=secret"]:
        page = text(ui.get(path))
        assert "secret-cluster" not in page and "secret-pool" not in page
    assert "No GPUs yet" in text(ui.get("/"))


@pytest.fixture
def viewer_ui(make_member, ui_for):
    return ui_for(make_member("acme", "viewer"))


def test_viewer_sees_no_create_or_delete_controls(viewer_ui, tenant, make_cluster, make_pool):
    cluster = make_cluster(tenant, "prod")
    pool = make_pool(cluster)
    for path in ["/", "/clusters/", f"/clusters/{cluster.pk}/", f"/pools/{pool.pk}/"]:
        response = viewer_ui.get(path)
        assert response.status_code == 200
        page = text(response)
        assert "/clusters/new/" not in page and "/delete/" not in page and "/pools/new/" not in page
        assert "/scale/" not in page
    assert ">viewer<" in text(viewer_ui.get("/"))


def test_viewer_cannot_create_scale_or_delete(viewer_ui, tenant, make_cluster, make_pool):
    cluster = make_cluster(tenant, "prod")
    pool = make_pool(cluster)
    new_cluster = {
        "name": "x",
        "kubernetes_version": "1.35",
        "region": "us-east-1",
        "control_plane_nodes": "1",
    }
    assert viewer_ui.get("/clusters/new/").status_code == 403
    assert viewer_ui.post("/clusters/new/", new_cluster).status_code == 403
    assert viewer_ui.post(f"/clusters/{cluster.pk}/pools/new/", {"name": "y"}).status_code == 403
    assert viewer_ui.post(f"/pools/{pool.pk}/scale/", {"node_count": "1"}).status_code == 403
    assert viewer_ui.post(f"/pools/{pool.pk}/delete/").status_code == 403
    assert viewer_ui.post(f"/clusters/{cluster.pk}/delete/").status_code == 403
    assert list(Cluster.objects.values_list("name", "status")) == [("prod", "running")]
    assert list(NodePool.objects.values_list("status", "node_count")) == [("ready", 2)]


@pytest.fixture
def two_tenants(owner, make_cluster):
    """The owner of acme is also a viewer in globex; each tenant has one cluster."""
    acme = owner.memberships.get().tenant
    globex = Tenant.objects.create(name="Globex", slug="globex")
    Membership.objects.create(tenant=globex, user=owner, role="viewer")
    make_cluster(acme, "acme-cluster")
    make_cluster(globex, "globex-cluster")
    return acme, globex


def test_switcher_shows_only_for_users_in_several_tenants(ui):
    assert 'action="/tenant/switch/"' not in text(ui.get("/"))


def test_switching_tenant_changes_what_every_page_shows(ui, two_tenants):
    acme, globex = two_tenants
    page = text(ui.get("/"))
    assert 'action="/tenant/switch/"' in page
    assert f'<option value="{globex.pk}">Globex</option>' in page
    assert "acme-cluster" in page and "globex-cluster" not in page

    response = ui.post("/tenant/switch/", {"tenant": globex.pk})
    assert response.status_code == 302 and response.url == "/"
    assert ui.session[SESSION_KEY] == globex.pk
    page = text(ui.get("/"))
    assert "globex-cluster" in page and "acme-cluster" not in page
    assert ">viewer<" in page  # the role is the one held in globex
    assert "You are now working in Globex as viewer." in page


def test_switching_to_a_tenant_the_user_is_not_in_is_404(ui, two_tenants, make_member):
    acme, _ = two_tenants
    stranger = make_member("initech", "owner").memberships.get().tenant
    assert ui.post("/tenant/switch/", {"tenant": stranger.pk}).status_code == 404
    assert ui.post("/tenant/switch/", {"tenant": "nope"}).status_code == 404
    assert ui.get("/tenant/switch/").status_code == 405
    assert SESSION_KEY not in ui.session
    assert "acme-cluster" in text(ui.get("/"))


def test_error_pages_explain_in_the_dashboard_shell(viewer_ui, ui, foreign):
    forbidden = viewer_ui.get("/clusters/new/")
    assert "Your role in Acme is <strong>viewer</strong>" in text(forbidden)
    missing = ui.get(f"/clusters/{foreign[0].pk}/")
    assert "belongs to another tenant" in text(missing) and 'class="brand"' in text(missing)
