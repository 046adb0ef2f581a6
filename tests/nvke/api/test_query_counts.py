"""The reads of a fleet cost a fixed number of queries whatever the page holds: each list is read at
page size 1 and at a page of everything, and each detail with more claims behind it, so an N+1 (a query
per row, per GPU or per claim) fails here."""

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from claims.allocator import create_claim
from claims.models import Claim
from nodepools.models import Gpu, Node
from nodepools.services import reconcile
from nvke.tenancy.context import TenantContext

pytestmark = pytest.mark.django_db

# The most any read below may take: authentication (the token with its user, tenant, quota and role),
# the page's count, its rows and one query per prefetched relation.
MOST = 8


@pytest.fixture
def fleet(owner, make_cluster, make_pool):
    """Two clusters; a fractional, a MIG and a whole-GPU pool of several nodes; claims of each kind."""
    tenant = owner.memberships.get().tenant
    cluster = make_cluster(tenant, "prod")
    make_cluster(tenant, "staging")
    pools = [
        make_pool(cluster, name="frac", gpu_model="l4", nodes=3, gpus_per_node=4, sharing_mode="fractional"),
        make_pool(
            cluster, name="mig", gpu_model="h100-sxm5-80gb", nodes=2, gpus_per_node=8, sharing_mode="mig"
        ),
        make_pool(cluster, name="whole", gpu_model="h100-sxm5-80gb", nodes=2, gpus_per_node=8),
    ]
    for pool in pools:
        reconcile(pool.pk)
    context = TenantContext(tenant, "owner")
    for i in range(6):
        create_claim(context=context, cluster=cluster, name=f"f{i}", kind="fraction", gpu_memory_mib=1024)
        create_claim(context=context, cluster=cluster, name=f"m{i}", kind="mig", mig_profile="1g.10gb")
    create_claim(context=context, cluster=cluster, name="w", kind="whole", gpus=2)
    create_claim(context=context, cluster=cluster, name="wait", kind="whole", gpus=8, allowed_models=["l4"])
    assert Claim.objects.filter(status="allocated").count() == 13
    return {"cluster": cluster, "pools": pools}


@pytest.fixture
def reader(owner, client_for):
    client = client_for(owner, token=True)
    client.get("/api/v1/clusters/")  # the token's first use of the minute records last_used_at
    return client


def queries(client, url: str, **params) -> tuple[int, dict]:
    with CaptureQueriesContext(connection) as captured:
        response = client.get(url, params)
    assert response.status_code == 200, response.data
    return len(captured.captured_queries), response.data


LISTS = {
    "/api/v1/clusters/": 2,
    "/api/v1/node-pools/": 3,
    "/api/v1/nodes/": 7,
    "/api/v1/claims/": 14,
    "/api/v1/telemetry/gpus/": 44,
}


@pytest.mark.parametrize("url", LISTS)
def test_a_list_costs_the_same_queries_for_one_row_and_for_all(fleet, reader, url):
    one, page = queries(reader, url, page_size=1)
    everything, full = queries(reader, url, page_size=100)
    assert len(page["results"]) == 1 and len(full["results"]) == full["count"] == LISTS[url]
    assert everything == one <= MOST, (one, everything)


def detail_urls(fleet) -> list[str]:
    claim = Claim.objects.filter(status="allocated", kind="mig").first()
    node = claim.allocation.node
    return [
        f"/api/v1/clusters/{fleet['cluster'].pk}/",
        f"/api/v1/node-pools/{node.pool_id}/",
        f"/api/v1/nodes/{node.pk}/",
        f"/api/v1/claims/{claim.pk}/",
        f"/api/v1/telemetry/gpus/{claim.allocation.shares.first().gpu_id}/",
    ]


def test_a_detail_costs_the_same_queries_however_many_claims_share_its_gpus(fleet, reader, owner):
    before = [queries(reader, url)[0] for url in detail_urls(fleet)]
    context = TenantContext(owner.memberships.get().tenant, "owner")
    node = Node.objects.get(pk=Claim.objects.filter(kind="mig").first().allocation.node_id)
    for i in range(6):  # more slices on the same node's GPUs
        create_claim(
            context=context,
            cluster=fleet["cluster"],
            name=f"more{i}",
            kind="mig",
            mig_profile="1g.10gb",
            pool=node.pool,
        )
    assert Gpu.objects.get(pk=Claim.objects.get(name="more5").allocation.shares.get().gpu_id).node == node
    after = [queries(reader, url)[0] for url in detail_urls(fleet)]
    assert after == before and max(after) <= MOST, (before, after)


def test_nodes_come_20_to_a_page_by_default_and_up_to_500_on_request(fleet, reader, make_pool):
    reconcile(make_pool(fleet["cluster"], name="more", gpu_model="l4", nodes=20, gpus_per_node=1).pk)
    count, page = queries(reader, "/api/v1/nodes/")
    assert page["count"] == 27 and len(page["results"]) == 20 and page["next"].endswith("page=2")
    assert len(queries(reader, "/api/v1/nodes/", page_size=500)[1]["results"]) == 27
    assert len(queries(reader, "/api/v1/clusters/")[1]["results"]) == 2  # the others' default is 50
    assert count <= MOST


def test_a_list_builds_its_filterset_only_when_a_parameter_names_a_filter(fleet, reader, monkeypatch):
    from clusters.filtersets import ClusterFilter

    built = []
    original = ClusterFilter.__init__
    monkeypatch.setattr(
        ClusterFilter, "__init__", lambda self, *a, **k: built.append(1) or original(self, *a, **k)
    )
    assert queries(reader, "/api/v1/clusters/", page_size=1)[1]["count"] == 2 and built == []
    assert queries(reader, "/api/v1/clusters/", name="stag")[1]["count"] == 1 and built == [1]
