"""TLS, authentication, version, discovery and injected faults, through the official client."""

import pytest
import urllib3
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from tests.kubeapi import objects
from tests.kubeapi.fixtures import client_configuration
from tests.kubeapi.server import OTHER_CA_BUNDLE, FakeKubeApi


def test_the_servers_ca_verifies_it(kubeapi):
    with client.ApiClient(client_configuration(kubeapi)) as api_client:
        assert client.VersionApi(api_client).get_code().git_version == "v1.34.2"


def test_another_ca_fails_the_handshake(kubeapi):
    configuration = client_configuration(kubeapi, ca_bundle=OTHER_CA_BUNDLE)
    configuration.retries = 0
    with client.ApiClient(configuration) as api_client:
        with pytest.raises(
            (urllib3.exceptions.MaxRetryError, urllib3.exceptions.SSLError, ApiException)
        ) as caught:
            client.CoreV1Api(api_client).list_node()
    assert "CERTIFICATE_VERIFY_FAILED" in str(caught.value)
    assert kubeapi.requests == []  # no request got through


@pytest.mark.parametrize("token", ["wrong-token", ""])
def test_a_wrong_or_missing_token_is_unauthorized(kubeapi, token):
    configuration = client_configuration(kubeapi, token=token)
    if not token:
        configuration.api_key = {}
    with client.ApiClient(configuration) as api_client:
        with pytest.raises(ApiException) as caught:
            client.CoreV1Api(api_client).list_node()
    assert caught.value.status == 401
    assert '"reason":"Unauthorized"' in caught.value.body


def test_version(kube_client):
    info = client.VersionApi(kube_client).get_code()
    assert (info.major, info.minor, info.git_version, info.platform) == ("1", "34", "v1.34.2", "linux/amd64")


def test_discovery_lists_groups_resources_and_subresources(kube_client):
    groups = {g.name: g for g in client.ApisApi(kube_client).get_api_versions().groups}
    assert groups["resource.k8s.io"].preferred_version.group_version == "resource.k8s.io/v1"
    assert "nvidia.com" not in groups  # no GPU Operator, no CRDs
    core = {r.name: r for r in client.CoreV1Api(kube_client).get_api_resources().resources}
    assert core["pods"].namespaced and not core["nodes"].namespaced
    assert core["pods/eviction"].group == "policy" and core["pods/eviction"].kind == "Eviction"
    assert core["nodes/status"].verbs == ["get", "patch", "update"]
    resource = {r.name: r for r in client.ResourceV1Api(kube_client).get_api_resources().resources}
    assert {"resourceslices", "resourceclaims", "resourceclaims/status", "deviceclasses"} <= set(resource)
    assert client.CoreApi(kube_client).get_api_versions().versions == ["v1"]


def test_the_gpu_operators_crds_add_nvidia_com_to_discovery(kubeapi, kube_client):
    objects.gpu_operator(kubeapi)
    group = client.ApisApi(kube_client).get_api_versions().groups
    nvidia = next(g for g in group if g.name == "nvidia.com")
    assert [v.version for v in nvidia.versions] == ["v1", "v1alpha1"]
    custom = client.CustomObjectsApi(kube_client)
    listed = custom.get_api_resources("nvidia.com", "v1alpha1")
    assert {r.name: r.kind for r in listed.resources} == {
        "nvidiadrivers": "NVIDIADriver",
        "nvidiadrivers/status": "NVIDIADriver",
    }
    assert custom.get_cluster_custom_object("nvidia.com", "v1", "clusterpolicies", "cluster-policy")["spec"][
        "driver"
    ]["useNvidiaDriverCRD"]


def test_dra_is_absent_before_1_34():
    with (
        FakeKubeApi(version="1.33.5") as server,
        client.ApiClient(client_configuration(server)) as api_client,
    ):
        groups = {g.name for g in client.ApisApi(api_client).get_api_versions().groups}
        assert "resource.k8s.io" not in groups and "policy" in groups
        with pytest.raises(ApiException) as caught:
            client.ResourceV1Api(api_client).list_resource_slice()
        assert caught.value.status == 404
        assert client.VersionApi(api_client).get_code().minor == "33"


def test_a_429_storm_on_a_read_is_retried_by_urllib3_until_it_passes(kubeapi, kube_client):
    kubeapi.faults.fail("GET", r"^/api/v1/nodes$", 429, times=3)
    kubeapi.create(objects.gpu_node("gpu-1"))
    nodes = client.CoreV1Api(kube_client).list_node()
    assert [n.metadata.name for n in nodes.items] == ["gpu-1"]
    assert [r[:2] for r in kubeapi.requests] == [("GET", "/api/v1/nodes")] * 4


def test_a_429_on_a_write_reaches_the_caller_with_retry_after(kubeapi, kube_client):
    kubeapi.faults.fail("POST", r"/pods$", 429)
    core = client.CoreV1Api(kube_client)
    with pytest.raises(ApiException) as caught:
        core.create_namespaced_pod("default", objects.pod("web"))
    assert caught.value.status == 429 and caught.value.headers["Retry-After"] == "0"
    assert kubeapi.get("v1", "Pod", "web") is None
    core.create_namespaced_pod("default", objects.pod("web"))  # the fault was used up


def test_500_and_503_faults_carry_a_status(kubeapi, kube_client):
    kubeapi.faults.fail("GET", r"/nodes/gpu-1$", 500, message="etcdserver: request timed out")
    kubeapi.faults.fail("PATCH", r"/nodes/", 503, times=2)
    core = client.CoreV1Api(kube_client)
    with pytest.raises(ApiException) as caught:
        core.read_node("gpu-1")
    assert caught.value.status == 500 and "etcdserver: request timed out" in caught.value.body
    with pytest.raises(ApiException) as caught:
        core.patch_node("gpu-1", {"metadata": {"labels": {"a": "b"}}})
    assert caught.value.status == 503 and '"reason":"ServiceUnavailable"' in caught.value.body


def test_a_dropped_connection_surfaces_as_a_urllib3_error(kubeapi, kube_client):
    kubeapi.create(objects.gpu_node("gpu-1"))
    core = client.CoreV1Api(kube_client)
    kubeapi.faults.drop("PATCH", r"/nodes/gpu-1$")
    with pytest.raises(
        urllib3.exceptions.ProtocolError
    ):  # PATCH is not idempotent: urllib3 does not retry it
        core.patch_node("gpu-1", {"spec": {"unschedulable": True}})
    assert not kubeapi.get("v1", "Node", "gpu-1")["spec"].get("unschedulable")
    kubeapi.faults.drop("GET", r"/nodes/gpu-1$", times=4)
    with pytest.raises(urllib3.exceptions.MaxRetryError):  # a read is retried three times, then given up
        core.read_node("gpu-1")
    assert core.read_node("gpu-1").metadata.name == "gpu-1"


def test_a_conflict_fault_answers_a_write_as_stale(kubeapi, kube_client):
    kubeapi.create(objects.gpu_node("gpu-1"))
    kubeapi.faults.conflict(r"/nodes/gpu-1$")
    core = client.CoreV1Api(kube_client)
    with pytest.raises(ApiException) as caught:
        core.patch_node("gpu-1", {"spec": {"unschedulable": True}})
    assert caught.value.status == 409 and "the object has been modified" in caught.value.body
    assert core.patch_node("gpu-1", {"spec": {"unschedulable": True}}).spec.unschedulable is True


def test_requests_are_recorded_with_query_and_body(kubeapi, kube_client):
    core = client.CoreV1Api(kube_client)
    core.list_namespaced_pod("default", label_selector="app=web")
    core.create_namespaced_pod("default", objects.pod("web"))
    (method, path, query, body), (post, post_path, _, created) = kubeapi.requests
    assert (method, path, query, body) == (
        "GET",
        "/api/v1/namespaces/default/pods",
        {"labelSelector": "app=web"},
        None,
    )
    assert (post, post_path, created["metadata"]["name"]) == (
        "POST",
        "/api/v1/namespaces/default/pods",
        "web",
    )
    kubeapi.clear_requests()
    assert kubeapi.requests == []


def test_a_client_certificate_of_the_servers_ca_authenticates(kubeapi, tmp_path):
    from tests.kubeapi.tls import client_material

    certificate, key = client_material()
    (tmp_path / "admin.crt").write_text(certificate)
    (tmp_path / "admin.key").write_text(key)
    configuration = client.Configuration(host=kubeapi.url, ca_cert_data=kubeapi.ca_bundle)
    configuration.cert_file, configuration.key_file = str(tmp_path / "admin.crt"), str(tmp_path / "admin.key")
    with client.ApiClient(configuration) as api_client:
        assert client.CoreV1Api(api_client).list_namespace().items
    anonymous = client.Configuration(host=kubeapi.url, ca_cert_data=kubeapi.ca_bundle)
    with client.ApiClient(anonymous) as api_client:
        with pytest.raises(ApiException) as refused:
            client.CoreV1Api(api_client).list_namespace()
    assert refused.value.status == 401
