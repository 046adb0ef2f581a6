"""The operator's console: a staff user in no tenant starts at the whole fleet (every tenant's use and
quotas, capacity by region and model, upgrades in flight, failing nodes and GPUs), and the navigation
offers no tenant page that would answer 403. Anyone but staff gets a 404."""

import re

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from catalog.models import GpuModel
from claims.allocator import create_claim
from nodepools.models import Gpu, Node
from nodepools.services import reconcile
from nvke.tenancy.context import TenantContext
from nvke.tenancy.models import GpuQuota

from .helpers import text

pytestmark = pytest.mark.django_db


@pytest.fixture
def operator(django_user_model):
    return django_user_model.objects.create_user("operator", password="pw-secret-123", is_staff=True)


@pytest.fixture
def fleet(tenant, make_member, make_cluster, make_pool):
    """Acme: 2 nodes × 4 L4 in us-east-1, one whole-GPU claim, a quota of 16 L4; Globex: 1 × 4 L4."""
    globex = make_member("globex", "owner").memberships.get().tenant
    acme_pool = make_pool(make_cluster(tenant, "prod"), name="l4")
    globex_pool = make_pool(make_cluster(globex, "west"), name="l4", nodes=1)
    for pool in (acme_pool, globex_pool):
        reconcile(pool.pk)
    create_claim(context=TenantContext(tenant, "owner"), cluster=acme_pool.cluster, name="a", kind="whole")
    GpuQuota.objects.create(tenant=tenant, gpu_model=GpuModel.objects.get(name="l4"), max_gpus=16)
    return {"acme": acme_pool, "globex": globex_pool}


def row(page: str, attr: str, key) -> str:
    match = re.search(rf'<tr {attr}="{re.escape(str(key))}">(.*?)</tr>', page, re.S)
    assert match, f"no row {attr}={key}"
    return re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", match[1])).strip()


def test_an_operator_in_no_tenant_starts_at_the_fleet_console(operator, ui_for, fleet, tenant):
    client = ui_for(operator)
    response = client.get("/")
    assert response.status_code == 302 and response.url == "/fleet/"
    page = text(client.get("/fleet/"))
    acme = row(page, "data-fleet-tenant", tenant.pk)
    assert acme == "Acme 1 8 1 GPUs 0 16 L4 24GB GPUs"
    globex = fleet["globex"].tenant
    assert row(page, "data-fleet-tenant", globex.pk).endswith("defaults")
    assert f'href="/admin/tenancy/tenant/{tenant.pk}/change/"' in page
    # The region's inventory, the GPUs both tenants' pools hold, healthy, what claims hold of them
    assert row(page, "data-fleet-region", "us-east-1/L4 24GB") == "us-east-1 L4 24GB 128 12 12 1 / 12 GPUs"
    assert "No upgrade is running." in page and "0 nodes not ready, 0 unhealthy GPUs." in page


def test_failing_nodes_and_gpus_of_every_tenant_are_listed(operator, ui_for, fleet):
    node = Node.objects.filter(pool=fleet["globex"]).first()
    Node.objects.filter(pk=node.pk).update(status=Node.Status.NOT_READY)
    gpu = Gpu.objects.filter(node__pool=fleet["acme"]).first()
    Gpu.objects.filter(pk=gpu.pk).update(healthy=False)
    page = text(ui_for(operator).get("/fleet/"))
    assert "1 node not ready, 1 unhealthy GPU." in page
    assert f'data-fleet-failing-node="{node.pk}"' in page and f'data-fleet-failing-gpu="{gpu.pk}"' in page


def test_the_console_takes_a_fixed_number_of_queries(operator, ui_for, fleet, make_member, make_cluster):
    client = ui_for(operator)
    with CaptureQueriesContext(connection) as first:
        client.get("/fleet/")
    for name in ("initech", "umbrella"):
        make_cluster(make_member(name, "owner").memberships.get().tenant, "more")
    with CaptureQueriesContext(connection) as second:
        client.get("/fleet/")
    assert len(second) == len(first)


def test_the_operators_navigation_links_no_tenant_page(operator, ui_for):
    client = ui_for(operator)
    page = text(client.get("/fleet/"))
    nav = re.search(r'<nav class="site-nav"[^>]*>(.*?)</nav>', page, re.S)[1]
    links = re.findall(r'href="([^"]+)"', nav)
    assert "/clusters/" not in links and "/usage/" not in links and "/fleet/" in links
    for link in links:
        assert client.get(link, follow=True).status_code == 200, link


def test_everyone_but_staff_gets_404(owner, ui_for, fleet):
    client = ui_for(owner)
    assert client.get("/fleet/").status_code == 404
    assert 'href="/fleet/"' not in text(client.get("/"))


def test_an_operator_makes_lists_and_revokes_operator_tokens(operator, ui_for, owner):
    client = ui_for(operator)
    assert 'href="/fleet/tokens/"' in text(client.get("/fleet/"))
    page = text(client.post("/fleet/tokens/", {"name": "grafana", "scope": "read-only"}))
    secret = re.search(r"data-token-secret>(nvke_[^<]+)<", page)[1]
    token = operator.api_tokens.get()
    assert token.tenant is None and token.read_only and "grafana" in text(client.get("/fleet/tokens/"))
    response = client.post(f"/fleet/tokens/{token.pk}/revoke/")
    assert response.status_code == 302 and "<td>grafana</td>" not in text(client.get("/fleet/tokens/"))
    token.refresh_from_db()
    assert token.revoked_at is not None and secret.startswith(token.key_prefix)
    tenant_user = ui_for(owner)
    assert tenant_user.get("/fleet/tokens/").status_code == 404
    assert tenant_user.post("/fleet/tokens/", {"name": "x", "scope": "read-only"}).status_code == 404
