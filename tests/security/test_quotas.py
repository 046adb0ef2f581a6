"""Quotas: clusters, GPUs per model in node pools, claims' GPU memory and compute share. A refusal is
409 quota_exceeded naming the quota, use and limit, with nothing written; races never pass a limit."""

import threading

import pytest
from django.db import connection, transaction
from django.test.utils import CaptureQueriesContext

from catalog.models import GpuModel, KubernetesVersion, Region
from claims import quotas
from claims.models import Claim
from clusters.models import Cluster
from clusters.quotas import check_cluster
from clusters.services import create_cluster
from nodepools.models import NodePool
from nvke.tenancy.context import TenantContext
from nvke.tenancy.models import GpuQuota, Quota
from nvke.tenancy.quotas import QuotaExceeded

POOL = {
    "name": "gpu",
    "gpu_model": "l4",
    "gpus_per_node": 4,
    "node_count": 1,
    "min_nodes": 0,
    "max_nodes": 2,
    "driver_release": "580.105.08",
}


@pytest.fixture
def tenant(owner):
    return owner.memberships.get().tenant


@pytest.mark.django_db
def test_cluster_quota_refuses_with_use_and_limit(api, tenant, catalog, make_cluster):
    Quota.objects.create(tenant=tenant, max_clusters=1)
    make_cluster(tenant, "one")
    response = api.post(
        "/api/v1/clusters/",
        {"name": "two", "kubernetes_version": "1.35", "region": "us-east-1", "control_plane_nodes": 1},
    )
    assert response.status_code == 409
    assert response.data["code"] == "quota_exceeded"
    assert response.data["message"] == (
        "Quota max_clusters exceeded: clusters: 1 in use of 1; this asks for 1 more."
    )
    assert response.data["details"] == {"quota": "max_clusters", "used": 1, "requested": 1, "limit": 1}
    assert list(Cluster.objects.values_list("name", flat=True)) == ["one"]


@pytest.mark.django_db
def test_pool_gpus_count_each_pools_ceiling(api, tenant, make_cluster):
    cluster = make_cluster(tenant)
    GpuQuota.objects.create(tenant=tenant, gpu_model=GpuModel.objects.get(name="l4"), max_gpus=12)
    first = api.post("/api/v1/node-pools/", {**POOL, "cluster": cluster.pk})
    assert first.status_code == 201, first.data  # 4 GPUs × 2 nodes at most = 8 of 12
    second = api.post("/api/v1/node-pools/", {**POOL, "cluster": cluster.pk, "name": "more"})
    assert second.status_code == 409 and second.data["details"]["quota"] == "gpus[l4]"
    assert second.data["details"]["used"] == 8 and second.data["details"]["requested"] == 8
    assert NodePool.objects.count() == 1
    growing = api.patch(f"/api/v1/node-pools/{first.data['id']}/", {"max_nodes": 4})
    assert growing.status_code == 409 and growing.data["code"] == "quota_exceeded"
    assert api.patch(f"/api/v1/node-pools/{first.data['id']}/", {"max_nodes": 3}).status_code == 200
    other = api.post(
        "/api/v1/node-pools/",
        {
            **POOL,
            "cluster": cluster.pk,
            "name": "h",
            "gpu_model": "h100-sxm5-80gb",
            "gpus_per_node": 8,
            "max_nodes": 1,
        },
    )
    assert other.status_code == 201, other.data  # no quota on that model


def _claim(tenant, cluster, **fields) -> Claim:
    return Claim(tenant=tenant, cluster=cluster, namespace="default", name="c", **fields)


@pytest.mark.django_db
def test_check_claim_counts_memory_and_compute_of_every_claim(tenant, make_cluster):
    cluster = make_cluster(tenant)
    Quota.objects.create(tenant=tenant, max_claim_gpu_memory_mib=30000, max_claim_compute_percent=150)
    Claim.objects.create(
        tenant=tenant, cluster=cluster, name="half", kind="fraction", gpu_memory_mib=10000, compute_percent=50
    )
    with transaction.atomic():
        quotas.check_claim(tenant, _claim(tenant, cluster, kind="fraction", gpu_memory_mib=20000))
    with pytest.raises(QuotaExceeded) as refused, transaction.atomic():
        quotas.check_claim(tenant, _claim(tenant, cluster, kind="fraction", gpu_memory_mib=20001))
    assert refused.value.details == {
        "quota": "max_claim_gpu_memory_mib",
        "used": 10000,
        "requested": 20001,
        "limit": 30000,
    }
    assert refused.value.status == 409 and "10000 MiB in use of 30000 MiB" in refused.value.message
    # A whole GPU counts 100 % compute each: 50 + 100 fits 150, 50 + 200 does not.
    Quota.objects.filter(tenant=tenant).update(max_claim_gpu_memory_mib=None)
    tenant.refresh_from_db()  # as the next request reads it, quota included
    with transaction.atomic():
        quotas.check_claim(tenant, _claim(tenant, cluster, kind="whole", gpus=1, allowed_models=["l4"]))
    with pytest.raises(QuotaExceeded) as refused, transaction.atomic():
        quotas.check_claim(tenant, _claim(tenant, cluster, kind="whole", gpus=2, allowed_models=["l4"]))
    assert refused.value.details == {
        "quota": "max_claim_compute_percent",
        "used": 50,
        "requested": 200,
        "limit": 150,
    }


@pytest.mark.django_db
def test_claim_ask_prices_mig_by_profile_and_whole_by_the_largest_candidate():
    from catalog.seed import seed_catalog

    seed_catalog()
    h100 = GpuModel.objects.get(name="h100-sxm5-80gb")
    profile = h100.mig_profiles.get(name="3g.40gb")
    ask = quotas.claim_ask(quotas.ClaimShape("mig", mig_profile="3g.40gb", allowed_models=(h100.name,)))
    assert ask == quotas.ClaimAsk(profile.memory_mib, -(-100 * profile.compute_slices // 7))
    largest = max(GpuModel.objects.values_list("memory_mib", flat=True))
    assert quotas.claim_ask(quotas.ClaimShape("whole", gpus=2)) == quotas.ClaimAsk(2 * largest, 200)


@pytest.mark.django_db(transaction=True)
def test_checks_refuse_to_run_outside_a_transaction(tenant):
    with pytest.raises(RuntimeError):
        check_cluster(tenant)


@pytest.mark.django_db(transaction=True)
def test_concurrent_cluster_creates_never_pass_the_quota(owner, catalog):
    tenant = owner.memberships.get().tenant
    Quota.objects.create(tenant=tenant, max_clusters=3)
    context = TenantContext(tenant, "owner")
    version, region = KubernetesVersion.objects.get(version="1.35"), Region.objects.get(name="us-east-1")
    start = threading.Barrier(8)
    outcomes: list[str] = []

    def create(i: int) -> None:
        try:
            start.wait()
            create_cluster(
                context=context,
                name=f"c{i}",
                kubernetes_version=version,
                region=region,
                control_plane_nodes=1,
            )
            outcomes.append("created")
        except QuotaExceeded:
            outcomes.append("refused")
        finally:
            connection.close()

    threads = [threading.Thread(target=create, args=(i,)) for i in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(outcomes) == ["created"] * 3 + ["refused"] * 5
    assert Cluster.objects.filter(tenant=tenant).count() == 3


@pytest.mark.django_db(transaction=True)
def test_concurrent_claims_never_pass_the_compute_quota(owner, catalog):
    """The claim check as create_claim will call it: inside the transaction that saves the claim."""
    tenant = owner.memberships.get().tenant
    cluster = Cluster.objects.create(
        tenant=tenant,
        name="prod",
        kubernetes_version=KubernetesVersion.objects.get(version="1.35"),
        region=Region.objects.get(name="us-east-1"),
        control_plane_nodes=1,
    )
    Quota.objects.create(tenant=tenant, max_claim_compute_percent=100)
    start = threading.Barrier(6)
    refused: list[int] = []

    def create(i: int) -> None:
        claim = Claim(tenant=tenant, cluster=cluster, name=f"c{i}", kind="fraction", compute_percent=30)
        try:
            start.wait()
            with transaction.atomic():
                quotas.check_claim(tenant, claim)
                claim.save()
        except QuotaExceeded:
            refused.append(i)
        finally:
            connection.close()

    threads = [threading.Thread(target=create, args=(i,)) for i in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert Claim.objects.filter(tenant=tenant).count() == 3 and len(refused) == 3


@pytest.mark.django_db
def test_the_quota_endpoint_shows_limits_and_use(
    api, tenant, make_cluster, make_pool, make_member, client_for, settings
):
    settings.NVKE_DEFAULT_GPU_QUOTA = None  # only the rows below limit GPUs
    cluster = make_cluster(tenant)
    make_pool(cluster, gpus_per_node=4, nodes=2)  # max_nodes 8: 32 L4s at most
    Quota.objects.create(tenant=tenant, max_clusters=5, max_claim_compute_percent=400)
    h100, l4 = GpuModel.objects.get(name="h100-sxm5-80gb"), GpuModel.objects.get(name="l4")
    GpuQuota.objects.create(tenant=tenant, gpu_model=h100, max_gpus=16)
    GpuQuota.objects.create(tenant=None, gpu_model=h100, max_gpus=8)  # the tenant's own wins
    GpuQuota.objects.create(tenant=None, gpu_model=l4, max_gpus=48)
    Claim.objects.create(tenant=tenant, cluster=cluster, name="f", kind="fraction", compute_percent=25)
    viewer = client_for(make_member("acme", "viewer"))
    response = viewer.get("/api/v1/quota/")
    assert response.status_code == 200
    assert response.data == {
        "clusters": {"used": 1, "limit": 5},
        "gpus": [
            {"gpu_model": "h100-sxm5-80gb", "used": 0, "limit": 16, "default": False},
            {"gpu_model": "l4", "used": 32, "limit": 48, "default": True},
        ],
        "claim_gpu_memory_mib": {"used": 0, "limit": None},
        "claim_compute_percent": {"used": 25, "limit": 400},
    }


@pytest.mark.django_db
def test_no_tenant_is_unlimited_by_default(api, tenant, make_cluster, settings):
    """The probe's pool of 10,000 L4 nodes: past the per-pool node cap it is a 400 naming the field; at
    the cap, the platform's default GPU quota refuses it. Nothing is written either way."""
    settings.NVKE_DEFAULT_GPU_QUOTA, settings.NVKE_MAX_POOL_NODES = 64, 100
    cluster = make_cluster(tenant)
    huge = {**POOL, "cluster": cluster.pk, "gpus_per_node": 1, "node_count": 10000, "max_nodes": 10000}
    response = api.post("/api/v1/node-pools/", huge)
    assert response.status_code == 400
    assert response.data["code"] == "too_many_nodes" and response.data["details"]["field"] == "node_count"
    assert "node_count 10000 is above the platform's limit of 100 nodes per pool" in response.data["message"]
    response = api.post("/api/v1/node-pools/", {**huge, "node_count": 1, "max_nodes": 101})
    assert response.status_code == 400 and response.data["details"]["field"] == "max_nodes"
    response = api.post("/api/v1/node-pools/", {**huge, "node_count": 100, "max_nodes": 100})
    assert response.status_code == 409
    assert response.data["details"] == {"quota": "gpus[l4]", "used": 0, "requested": 100, "limit": 64}
    assert "(the platform default)" in response.data["message"]
    assert not NodePool.objects.exists()
    # An operator's default for the model beats the setting; the tenant's own quota beats both.
    l4 = GpuModel.objects.get(name="l4")
    GpuQuota.objects.create(tenant=None, gpu_model=l4, max_gpus=100)
    assert api.post("/api/v1/node-pools/", {**huge, "node_count": 100, "max_nodes": 100}).status_code == 201
    GpuQuota.objects.create(tenant=tenant, gpu_model=l4, max_gpus=101)
    more = {**huge, "name": "more", "node_count": 1, "max_nodes": 1}
    assert api.post("/api/v1/node-pools/", more).status_code == 201
    pool = NodePool.objects.get(name="gpu")
    response = api.patch(f"/api/v1/node-pools/{pool.pk}/", {"max_nodes": 101})
    assert response.status_code == 400 and response.data["details"]["field"] == "max_nodes"
    pool.refresh_from_db()
    assert pool.max_nodes == 100


@pytest.mark.django_db
def test_the_claims_api_refuses_a_claim_over_the_quota(api, tenant, make_cluster):
    cluster = make_cluster(tenant)
    Quota.objects.create(tenant=tenant, max_claim_compute_percent=50)
    claim = {"cluster": cluster.pk, "name": "big", "kind": "fraction", "compute_percent": 60}
    response = api.post("/api/v1/claims/", claim)
    assert response.status_code == 409 and response.data["details"]["quota"] == "max_claim_compute_percent"
    assert not Claim.objects.exists()
    # Each request reads the limits afresh, in its membership query: no query of its own.
    Quota.objects.filter(tenant=tenant).update(max_claim_compute_percent=100)
    with CaptureQueriesContext(connection) as queries:
        response = api.post("/api/v1/claims/", claim)
    assert response.status_code == 201, response.data
    quota_table = Quota._meta.db_table
    reads = [q["sql"] for q in queries if quota_table in q["sql"]]
    assert len(reads) == 1 and "tenancy_membership" in reads[0], reads
    Quota.objects.filter(tenant=tenant).delete()
    assert api.post("/api/v1/claims/", {**claim, "name": "bigger", "compute_percent": 90}).status_code == 201
