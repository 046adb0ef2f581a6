"""Attaching a cluster: every check runs against a real HTTPS API server (the fake, through the official
client), a refusal names the check and writes nothing, a success stores the token encrypted."""

import socket

import pytest
import yaml
from django.db import connection

from clusters.models import Cluster
from nvke.providers.kubernetes import rbac
from tests.conftest import install_nvke_policies
from tests.kubeapi import objects
from tests.kubeapi.server import OTHER_CA_BUNDLE, FakeKubeApi

from .access import nvke_token

pytestmark = pytest.mark.django_db

WRITES = {"PUT", "PATCH", "DELETE"}


def post_attach(api, server, manifest=None, **overrides):
    """Attach as a tenant does, with the token of NVKE's service account once `manifest` (NVKE's own by
    default) is applied."""
    token = nvke_token(server, manifest)
    body = {"name": "onprem", "endpoint": server.url, "token": token, "ca_bundle": server.ca_bundle}
    return api.post("/api/v1/clusters/attach/", {**body, **overrides}, format="json")


def manifest_without(*grants: tuple[str, str]) -> str:
    """NVKE's access manifest with these (verb, resource) pairs taken out of its ClusterRole."""
    document = yaml.safe_load(rbac.manifest())
    role = next(
        d for d in document["items"] if d["kind"] == "ClusterRole" and d["metadata"]["name"] == "nvke"
    )
    for rule in role["rules"]:
        rule["verbs"] = [v for v in rule["verbs"] if (v, rule["resources"][0]) not in grants]
    role["rules"] = [rule for rule in role["rules"] if rule["verbs"]]
    return yaml.safe_dump(document)


def test_a_gpu_cluster_attaches_with_its_version_features_and_gpu_stack(api, catalog, gpu_cluster):
    answer = post_attach(api, gpu_cluster)
    assert answer.status_code == 201, answer.json()
    body = answer.json()
    assert body["attached"] is True and body["status"] == "running"
    assert body["observed"]["version"] == "v1.34.2"
    assert body["observed"]["features"] == {"dra": True, "dra_gpu_driver": False, "driver_upgrades": True}
    assert body["observed"]["gpu_nodes"] == 3
    assert body["observed"]["gpu_products"] == ["NVIDIA-H100-80GB-HBM3"]
    assert "cluster-policy" in body["observed"]["gpu_operator"]
    assert "token" not in body and "ca_bundle" not in body
    with connection.cursor() as cursor:
        cursor.execute("SELECT admin_token FROM clusters_cluster WHERE id = %s", [body["id"]])
        (stored,) = cursor.fetchone()
    token = nvke_token(gpu_cluster)
    assert stored.startswith("fernet:") and token not in stored
    assert Cluster.objects.get(pk=body["id"]).admin_token == token
    written = [(method, path) for method, path, *_ in gpu_cluster.requests if method in WRITES]
    assert written == [], "checking a cluster changes nothing on it"
    reviews = [path for method, path, *_ in gpu_cluster.requests if method == "POST"]
    assert reviews and all(p.endswith("/selfsubjectaccessreviews") for p in reviews)


def test_a_kubeconfig_attaches_the_same_cluster(api, catalog, gpu_cluster):
    import base64

    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {
                "name": "k",
                "cluster": {
                    "server": gpu_cluster.url,
                    "certificate-authority-data": base64.b64encode(gpu_cluster.ca_bundle.encode()).decode(),
                },
            }
        ],
        "users": [{"name": "nvke", "user": {"token": nvke_token(gpu_cluster)}}],
        "contexts": [{"name": "ctx", "context": {"cluster": "k", "user": "nvke"}}],
        "current-context": "ctx",
    }
    answer = api.post(
        "/api/v1/clusters/attach/", {"name": "from-file", "kubeconfig": yaml.safe_dump(config)}, format="json"
    )
    assert answer.status_code == 201, answer.json()
    assert Cluster.objects.get(name="from-file").endpoint == gpu_cluster.url


def refused(api, server, code, field=None, manifest=None, **overrides):
    answer = post_attach(api, server, manifest, **overrides)
    assert answer.status_code == 400, answer.json()
    body = answer.json()
    assert body["code"] == code, body
    if field:
        assert body["details"]["field"] == field
    assert not Cluster.objects.exists(), "a refused attach writes nothing"
    return body


def test_a_certificate_the_ca_does_not_sign_is_refused(api, catalog, gpu_cluster):
    body = refused(api, gpu_cluster, "tls_error", "ca_bundle", ca_bundle=OTHER_CA_BUNDLE)
    assert "CA bundle" in body["message"]


def test_a_wrong_token_is_refused(api, catalog, gpu_cluster):
    body = refused(api, gpu_cluster, "unauthorized", "token", token="not-the-token")
    assert "401" in body["message"]


def test_an_endpoint_that_does_not_answer_is_refused(api, catalog, gpu_cluster):
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]  # nothing listens once it is closed
    refused(api, gpu_cluster, "unreachable", "endpoint", endpoint=f"https://127.0.0.1:{port}")


def test_missing_permissions_are_each_named(api, catalog, gpu_cluster):
    older = manifest_without(("create", "pods/eviction"), ("patch", "nodes"))
    body = refused(api, gpu_cluster, "forbidden", "token", manifest=older)
    assert "create pods/eviction" in body["message"] and "patch nodes" in body["message"]


def test_a_cluster_without_the_gpu_operator_is_refused(api, catalog, kubeapi):
    install_nvke_policies(kubeapi)
    kubeapi.create(objects.gpu_node("gpu-a"))
    body = refused(api, kubeapi, "no_gpu_operator")
    assert [c["check"] for c in body["details"]["checks"]] == ["gpu_operator"]


def test_a_cluster_without_gpu_nodes_is_refused(api, catalog, kubeapi):
    objects.gpu_operator(kubeapi)
    install_nvke_policies(kubeapi)
    refused(api, kubeapi, "no_gpu_nodes")


def test_every_failed_check_is_listed(api, catalog, kubeapi):
    body = refused(api, kubeapi, "forbidden", manifest=manifest_without(("list", "nodes")))
    assert {c["check"] for c in body["details"]["checks"]} >= {"access", "gpu_operator"}


@pytest.mark.parametrize(("version", "dra"), [("1.33.4", False), ("1.35.0", True)])
def test_dra_is_offered_from_1_34(api, catalog, version, dra):
    with FakeKubeApi(version=version) as server:
        objects.gpu_operator(server)
        install_nvke_policies(server)
        server.create(objects.gpu_node("gpu-a"))
        answer = post_attach(api, server)
    assert answer.status_code == 201, answer.json()
    assert answer.json()["observed"]["features"]["dra"] is dra


def test_a_cluster_older_than_1_30_is_refused(api, catalog):
    with FakeKubeApi(version="1.29.8") as server:
        objects.gpu_operator(server)
        server.create(objects.gpu_node("gpu-a"))
        body = refused(api, server, "unsupported_version")
    assert "1.34" in body["message"], "the refusal says what DRA needs"


def test_a_duplicate_name_is_a_conflict_before_the_cluster_is_asked(api, catalog, gpu_cluster, attach):
    attach(gpu_cluster, "onprem")
    gpu_cluster.clear_requests()
    answer = post_attach(api, gpu_cluster)
    assert answer.status_code == 409 and answer.json()["details"]["field"] == "name"
    assert gpu_cluster.requests == []


def test_an_attached_cluster_offers_no_kubeconfig(api, catalog, gpu_cluster, attach):
    cluster = attach(gpu_cluster)
    assert api.get(f"/api/v1/clusters/{cluster.pk}/kubeconfig/").status_code == 404


def test_the_rbac_manifest_is_served(api):
    answer = api.get("/api/v1/clusters/rbac-manifest/")
    assert answer.status_code == 200
    assert yaml.safe_load(answer.content)["kind"] == "List"


def test_the_attach_page_checks_and_attaches(client, owner, catalog, gpu_cluster):
    client.force_login(owner)
    page = client.get("/clusters/attach/")
    assert page.status_code == 200 and b"pods/eviction" in page.content, "the page shows the manifest"
    form = {
        "name": "onprem",
        "endpoint": gpu_cluster.url,
        "token": "wrong",
        "ca_bundle": gpu_cluster.ca_bundle,
    }
    refused_page = client.post("/clusters/attach/", form)
    assert refused_page.status_code == 400 and b"401" in refused_page.content
    assert not Cluster.objects.exists()
    answer = client.post("/clusters/attach/", {**form, "token": nvke_token(gpu_cluster)})
    cluster = Cluster.objects.get(name="onprem")
    assert answer.status_code == 302 and answer["Location"] == f"/clusters/{cluster.pk}/"
    detail = client.get(answer["Location"]).content.decode()
    assert "v1.34.2" in detail and "NVIDIA-H100-80GB-HBM3" in detail and "NVIDIADriver" in detail
    manifest = client.post(f"/clusters/{cluster.pk}/agent-manifest/")
    assert manifest.status_code == 200 and b"kind: DaemonSet" in manifest.content


@pytest.mark.parametrize(("status", "code"), [(404, "not_found"), (200, "not_kubernetes")])
def test_an_endpoint_that_is_not_kubernetes_is_refused(api, catalog, gpu_cluster, status, code):
    gpu_cluster.faults.fail("GET", r"^/version/?$", status, times=5)  # 200: a body that is no version
    body = refused(api, gpu_cluster, code)
    assert body["details"]["checks"][0]["check"] == "reachable"
