"""A cluster's admin credential (encrypted at rest, only ever in a kubeconfig) and its GPU stack add-ons
(installed at provisioning), through the API, the UI and the audit log."""

import base64
import json

import pytest
import yaml
from django.db import connection
from django.test import Client

from audit.models import AuditEntry
from clusters import addons
from clusters.models import Cluster, ClusterAddon
from clusters.services import cluster_ref, provision
from nvke.providers.simulator.models import SimCluster, SimFault
from nvke.tenancy.models import ApiToken

pytestmark = pytest.mark.django_db

CLUSTER = {"name": "prod", "kubernetes_version": "1.35", "region": "us-east-1", "control_plane_nodes": 1}


@pytest.fixture
def running(api, catalog, django_capture_on_commit_callbacks) -> Cluster:
    """A cluster created through the API and provisioned by the simulator (audited as it happens)."""
    with django_capture_on_commit_callbacks(execute=True):
        response = api.post("/api/v1/clusters/", CLUSTER)
    assert response.status_code == 201, response.data
    return Cluster.objects.get(pk=response.data["id"])


def raw_column(table: str, column: str, pk: int) -> str:
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT {column} FROM {table} WHERE id = %s", [pk])  # noqa: S608 (fixed names)
        return cursor.fetchone()[0]


def test_provisioning_issues_an_admin_token_stored_encrypted(running):
    token = running.admin_token
    assert len(token) >= 32
    stored = raw_column("clusters_cluster", "admin_token", running.pk)
    assert stored.startswith("fernet:") and token not in stored
    sim = SimCluster.objects.get(key=f"c{running.pk}")
    assert token not in raw_column("simulator_simcluster", "admin_token", sim.pk)
    assert token not in repr(running) and token not in str(running)
    provision_again = Cluster.objects.filter(pk=running.pk)
    provision_again.update(status="provisioning")
    provision(running.pk)  # idempotent: the provider hands back the same token
    assert Cluster.objects.get(pk=running.pk).admin_token == token


def test_api_kubeconfig_holds_the_token_and_the_list_and_detail_never_do(api, running):
    response = api.get(f"/api/v1/clusters/{running.pk}/kubeconfig/")
    assert response.status_code == 200
    assert response["Content-Type"].startswith("application/yaml")
    assert response["Cache-Control"] == "no-store"
    assert response["Content-Disposition"] == 'attachment; filename="prod-kubeconfig.yaml"'
    config = yaml.safe_load(response.content)
    assert config["users"][0]["user"] == {"token": running.admin_token}
    assert config["clusters"][0]["cluster"]["server"] == running.endpoint
    for url in ("/api/v1/clusters/", f"/api/v1/clusters/{running.pk}/"):
        body = api.get(url).content.decode()
        assert running.admin_token not in body and "admin_token" not in body


def test_the_providers_ca_bundle_is_kept_and_reaches_the_kubeconfig_and_the_cluster_ref(
    api, running, monkeypatch
):
    from nvke.providers.base import ClusterAccess
    from nvke.providers.simulator.provider import SimulatorInfrastructure

    pem = "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n"
    provision_cluster = SimulatorInfrastructure.provision_cluster

    def with_ca(self, *args) -> ClusterAccess:
        access = provision_cluster(self, *args)
        return ClusterAccess(access.endpoint, access.token, pem)

    monkeypatch.setattr(SimulatorInfrastructure, "provision_cluster", with_ca)
    Cluster.objects.filter(pk=running.pk).update(status="provisioning")
    provision(running.pk)
    cluster = Cluster.objects.get(pk=running.pk)
    assert cluster.ca_bundle == pem
    entry = yaml.safe_load(api.get(f"/api/v1/clusters/{cluster.pk}/kubeconfig/").content)["clusters"][0]
    assert base64.b64decode(entry["cluster"]["certificate-authority-data"]).decode() == pem
    ref = cluster_ref(cluster)
    assert (ref.name, ref.endpoint, ref.token, ref.ca_bundle) == (
        f"c{cluster.pk}",
        cluster.endpoint,
        cluster.admin_token,
        pem,
    )
    assert cluster.admin_token not in repr(ref) and "BEGIN CERTIFICATE" not in repr(ref)


def test_the_token_never_reaches_the_audit_log(running):
    entries = AuditEntry.objects.filter(object_type="clusters.cluster", object_id=str(running.pk))
    assert entries.exists()
    dumped = json.dumps(list(entries.values("changes", "object_repr")), default=str)
    assert running.admin_token not in dumped
    assert not AuditEntry.objects.filter(changes__icontains=running.admin_token).exists()
    assert not any("admin_token" in e.changes for e in entries)  # provisioning output, like the endpoint
    assert not entries.filter(action="update").exists()


def test_kubeconfig_is_for_members_and_up_in_the_tenant_only(running, make_member, client_for, make_cluster):
    url = f"/api/v1/clusters/{running.pk}/kubeconfig/"
    member = make_member("acme", "member")
    assert client_for(member).get(url).status_code == 200
    assert client_for(member, token=True).get(url).status_code == 200
    viewer = make_member("acme", "viewer")
    assert client_for(viewer).get(url).status_code == 403
    assert client_for(viewer).get(f"/api/v1/clusters/{running.pk}/").status_code == 200
    _, read_only = ApiToken.issue(tenant=running.tenant, user=member, name="ro", scope="read-only")
    ro_client = client_for(member)
    ro_client.force_authenticate(None)
    ro_client.credentials(HTTP_AUTHORIZATION=f"Bearer {read_only}")
    assert ro_client.get(url).status_code == 403
    stranger = make_member("globex", "owner")
    response = client_for(stranger).get(url)
    assert response.status_code == 404 and running.admin_token not in response.content.decode()
    provisioning = make_cluster(running.tenant, "new", status="provisioning")
    assert client_for(member).get(f"/api/v1/clusters/{provisioning.pk}/kubeconfig/").status_code == 404


def test_ui_kubeconfig_holds_the_token_viewers_and_strangers_get_none(running, owner, make_member):
    ui = Client()
    ui.force_login(owner)
    url = f"/clusters/{running.pk}/kubeconfig/"
    response = ui.get(url)
    assert response.status_code == 200
    assert yaml.safe_load(response.content)["users"][0]["user"]["token"] == running.admin_token
    assert running.admin_token not in ui.get(f"/clusters/{running.pk}/").content.decode()
    viewer = Client()
    viewer.force_login(make_member("acme", "viewer"))
    assert viewer.get(url).status_code == 403
    page = viewer.get(f"/clusters/{running.pk}/").content.decode()
    assert "Download kubeconfig" not in page and "admin credentials" in page
    stranger = Client()
    stranger.force_login(make_member("globex", "owner"))
    assert stranger.get(url).status_code == 404


def test_provisioning_installs_the_catalog_add_ons(running):
    rows = list(running.addons.values_list("name", "version", "status"))
    assert rows == [(a.name, a.version, "installed") for a in addons.CATALOG]
    assert {"gpu-operator", "nvidia-device-plugin", "nvidia-dra-driver-gpu", "dcgm-exporter"} <= {
        name for name, _, _ in rows
    }
    ready = next(c for c in running.conditions if c["type"] == "AddonsReady")
    assert ready["status"] == "True"
    Cluster.objects.filter(pk=running.pk).update(status="provisioning")
    provision(running.pk)  # a repeated step updates the rows in place
    assert running.addons.count() == len(addons.CATALOG)


def test_a_failed_provisioning_installs_no_add_ons(api, catalog, django_capture_on_commit_callbacks):
    SimFault.objects.create(operation="provision_cluster", reason="QuotaExceeded", message="No room")
    with django_capture_on_commit_callbacks(execute=True):
        response = api.post("/api/v1/clusters/", CLUSTER)
    cluster = Cluster.objects.get(pk=response.data["id"])
    assert cluster.status == "failed" and not cluster.addons.exists() and cluster.admin_token == ""
    assert api.get(f"/api/v1/clusters/{cluster.pk}/").data["addons"] == []
    assert api.get(f"/api/v1/clusters/{cluster.pk}/kubeconfig/").status_code == 404


def test_a_provider_that_cannot_install_add_ons_marks_them_failed(running, monkeypatch):
    from nvke.providers.base import Infrastructure

    monkeypatch.setattr(
        "nvke.providers.simulator.provider.SimulatorInfrastructure.install_addons",
        Infrastructure.install_addons,
    )
    Cluster.objects.filter(pk=running.pk).update(status="provisioning")
    provision(running.pk)
    cluster = Cluster.objects.get(pk=running.pk)
    assert set(cluster.addons.values_list("status", flat=True)) == {"failed"}
    condition = next(c for c in cluster.conditions if c["type"] == "AddonsReady")
    assert condition["status"] == "False" and condition["reason"] == "AddonFailed"


def test_api_detail_and_list_show_add_ons_read_only(api, running):
    detail = api.get(f"/api/v1/clusters/{running.pk}/").data
    assert [(a["name"], a["version"], a["status"]) for a in detail["addons"]] == [
        (a.name, a.version, "installed") for a in addons.CATALOG
    ]
    assert set(detail["addons"][0]) == {"name", "version", "status", "message", "updated_at"}
    listed = api.get("/api/v1/clusters/").data["results"][0]
    assert len(listed["addons"]) == len(addons.CATALOG)


def test_cluster_page_lists_add_ons_and_strangers_see_none(running, owner, make_member, client_for):
    ui = Client()
    ui.force_login(owner)
    page = ui.get(f"/clusters/{running.pk}/").content.decode()
    assert 'id="addons-heading">Add-ons</h2>' in page
    for addon in addons.CATALOG:
        assert f'data-addon-row="{addon.name}"' in page and addon.version in page
    assert page.count('<span class="status status-installed">installed</span>') == len(addons.CATALOG)
    stranger = make_member("globex", "owner")
    other = Client()
    other.force_login(stranger)
    assert other.get(f"/clusters/{running.pk}/").status_code == 404
    assert client_for(stranger).get(f"/api/v1/clusters/{running.pk}/").status_code == 404
    assert ClusterAddon.objects.filter(cluster__tenant__slug="globex").count() == 0
