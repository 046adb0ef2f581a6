import pytest

from clusters.models import Cluster
from clusters.services import cluster_infrastructure, cluster_operations
from nvke.providers.simulator.models import SimCluster, SimFault
from nvke.providers.simulator.provider import SimulatorInfrastructure, SimulatorOperations

pytestmark = pytest.mark.django_db

VALID = {"name": "prod", "kubernetes_version": "1.35", "region": "us-east-1", "control_plane_nodes": 3}


def test_create_provisions_through_the_provider(api, catalog, django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks(execute=True):
        response = api.post("/api/v1/clusters/", VALID)
    assert response.status_code == 201, response.data
    assert response.data["status"] == "provisioning"
    cluster = Cluster.objects.get(pk=response.data["id"])
    assert cluster.status == "running"
    assert cluster.endpoint.startswith("https://c")
    assert SimCluster.objects.filter(key=f"c{cluster.pk}", control_plane_nodes=3).exists()
    ready = next(c for c in cluster.conditions if c["type"] == "Ready")
    assert ready["status"] == "True" and ready["reason"] == "Provisioned"


def test_a_cluster_keeps_the_provider_that_made_it_when_nvke_provider_changes(
    api, catalog, settings, django_capture_on_commit_callbacks
):
    with django_capture_on_commit_callbacks(execute=True):
        response = api.post("/api/v1/clusters/", VALID)
    cluster = Cluster.objects.get(pk=response.data["id"])
    assert cluster.provider == "simulator"
    settings.NVKE_PROVIDER = "clusterapi"  # the operator switches: new clusters go to Cluster API
    assert type(cluster_infrastructure(cluster)) is SimulatorInfrastructure
    assert type(cluster_operations(cluster)) is SimulatorOperations


def test_provider_failure_leaves_cluster_failed_with_reason(api, catalog, django_capture_on_commit_callbacks):
    SimFault.objects.create(
        operation="provision_cluster", reason="QuotaExceeded", message="No control planes left"
    )
    with django_capture_on_commit_callbacks(execute=True):
        response = api.post("/api/v1/clusters/", VALID)
    cluster = api.get(f"/api/v1/clusters/{response.data['id']}/").data
    assert cluster["status"] == "failed"
    assert cluster["status_reason"] == "QuotaExceeded"
    assert cluster["status_message"] == "No control planes left"


def test_list_retrieve_filter_and_paginate(api, owner, make_cluster):
    tenant = owner.memberships.get().tenant
    for name in ["alpha", "beta", "gamma"]:
        make_cluster(tenant, name)
    make_cluster(tenant, "broken", status="failed")
    listing = api.get("/api/v1/clusters/", {"status": "running", "page_size": 2}).data
    assert listing["count"] == 3
    assert [c["name"] for c in listing["results"]] == ["alpha", "beta"]
    assert listing["next"] is not None
    assert api.get("/api/v1/clusters/", {"name": "amm"}).data["results"][0]["name"] == "gamma"
    detail = api.get(f"/api/v1/clusters/{listing['results'][0]['id']}/").data
    assert detail["kubernetes_version"] == "1.35" and detail["region"] == "us-east-1"


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"name": "Bad_Name"}, "name"),
        ({"name": ""}, "name"),
        ({"kubernetes_version": "1.12"}, "kubernetes_version"),
        ({"kubernetes_version": "1.33"}, "kubernetes_version"),  # in the catalog but not offered
        ({"region": "mars-1"}, "region"),
        ({"control_plane_nodes": 2}, "control_plane_nodes"),
    ],
)
def test_bad_input_is_400_naming_the_field(api, catalog, change, field):
    response = api.post("/api/v1/clusters/", {**VALID, **change})
    assert response.status_code == 400
    assert response.data["code"] == "invalid"
    assert response.data["message"].startswith(f"{field}:")
    assert field in response.data["details"]["fields"]
    assert not Cluster.objects.exists()


def test_duplicate_name_is_409_naming_the_field(api, owner, make_cluster):
    make_cluster(owner.memberships.get().tenant, "prod")
    response = api.post("/api/v1/clusters/", VALID)
    assert response.status_code == 409
    assert response.data == {
        "code": "duplicate",
        "message": "A cluster named 'prod' already exists.",
        "details": {"field": "name"},
    }
    assert Cluster.objects.count() == 1


def test_same_name_in_another_tenant_is_fine(api, make_member, make_cluster, catalog):
    other = make_member("globex", "owner")
    make_cluster(other.memberships.get().tenant, "prod")
    assert api.post("/api/v1/clusters/", VALID).status_code == 201


def test_delete_tears_down_pools_and_control_plane(api, owner, catalog, django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks(execute=True):
        cluster_id = api.post("/api/v1/clusters/", VALID).data["id"]
    with django_capture_on_commit_callbacks(execute=True):
        pool = api.post(
            "/api/v1/node-pools/",
            {
                "cluster": cluster_id,
                "name": "gpu",
                "gpu_model": "l4",
                "gpus_per_node": 4,
                "node_count": 2,
                "min_nodes": 0,
                "max_nodes": 4,
                "driver_release": "580.105.08",
            },
        )
    assert pool.status_code == 201, pool.data
    assert SimCluster.objects.get(key=f"c{cluster_id}").nodes.count() == 2
    with django_capture_on_commit_callbacks(execute=True):
        response = api.delete(f"/api/v1/clusters/{cluster_id}/")
    assert response.status_code == 202
    assert response.data["status"] == "deleting"
    assert not Cluster.objects.filter(pk=cluster_id).exists()
    assert not SimCluster.objects.filter(key=f"c{cluster_id}").exists()
    assert api.get(f"/api/v1/clusters/{cluster_id}/").status_code == 404


def test_clusters_cannot_be_patched(api, owner, make_cluster):
    cluster = make_cluster(owner.memberships.get().tenant)
    assert api.patch(f"/api/v1/clusters/{cluster.pk}/", {"name": "renamed"}).status_code == 405


def test_services_check_names_without_a_serializer(owner, catalog):
    from catalog.models import KubernetesVersion, Region
    from clusters.services import create_cluster
    from nvke.errors import DomainError
    from nvke.tenancy.context import TenantContext

    with pytest.raises(DomainError) as refused:
        create_cluster(
            context=TenantContext(owner.memberships.get().tenant, "owner"),
            name="Bad_Name",
            kubernetes_version=KubernetesVersion.objects.get(version="1.35"),
            region=Region.objects.get(name="us-east-1"),
            control_plane_nodes=1,
        )
    assert refused.value.field == "name" and refused.value.message.startswith("name: Use lower-case")
    assert not Cluster.objects.exists()
