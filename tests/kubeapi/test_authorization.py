"""Every request is authorized: system:masters outright, service accounts through RBAC over the stored roles,
403 in kube-apiserver's words otherwise; access reviews answer from the same evaluator; and from 1.36 a
ResourceClaim's allocation needs resourceclaims/binding."""

import json

import kubernetes
import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from tests.kubeapi import accounts, objects
from tests.kubeapi.authorization import request_attributes
from tests.kubeapi.fixtures import client_configuration
from tests.kubeapi.server import FakeKubeApi

USER = "system:serviceaccount:default:tester"


def as_account(server: FakeKubeApi, rules: list[dict]) -> kubernetes.client.ApiClient:
    return kubernetes.client.ApiClient(client_configuration(server, token=accounts.grant(server, rules)))


def refusal(call, *args, **kwargs) -> dict:
    with pytest.raises(ApiException) as caught:
        call(*args, **kwargs)
    assert caught.value.status == 403, caught.value.body
    return json.loads(caught.value.body)


@pytest.mark.parametrize(
    ("method", "path", "query", "expected"),
    [
        ("GET", "/api/v1/pods", {}, ("list", "", "pods", "", "", "")),
        ("GET", "/api/v1/namespaces/ml/pods", {"watch": "true"}, ("watch", "", "pods", "", "ml", "")),
        ("GET", "/api/v1/namespaces/ml/pods/a", {}, ("get", "", "pods", "", "ml", "a")),
        ("POST", "/api/v1/namespaces/ml/pods/a/eviction", {}, ("create", "", "pods", "eviction", "ml", "a")),
        ("DELETE", "/api/v1/namespaces/ml/pods", {}, ("deletecollection", "", "pods", "", "ml", "")),
        ("GET", "/api/v1/namespaces/ml", {}, ("get", "", "namespaces", "", "ml", "ml")),
        ("PUT", "/api/v1/namespaces/ml/finalize", {}, ("update", "", "namespaces", "finalize", "ml", "ml")),
        (
            "PATCH",
            "/apis/resource.k8s.io/v1/namespaces/ml/resourceclaims/c/status",
            {},
            ("patch", "resource.k8s.io", "resourceclaims", "status", "ml", "c"),
        ),
        ("GET", "/api/v1/nodes", {"fieldSelector": "metadata.name=n1"}, ("list", "", "nodes", "", "", "n1")),
    ],
)
def test_request_attributes_follow_the_request_info_resolver(method, path, query, expected):
    a = request_attributes(method, path, query)
    assert a.resource_request
    assert (a.verb, a.group, a.resource, a.subresource, a.namespace, a.name) == expected


def test_discovery_paths_are_non_resource_requests():
    for path in ("/api", "/api/v1", "/apis", "/apis/resource.k8s.io", "/apis/resource.k8s.io/v1", "/version"):
        a = request_attributes("GET", path, {})
        assert not a.resource_request and (a.verb, a.path) == ("get", path)


def test_a_service_account_without_a_role_may_discover_and_nothing_else(kubeapi):
    with as_account(kubeapi, []) as api:
        assert client.VersionApi(api).get_code().major == "1"  # system:public-info-viewer
        assert client.CoreV1Api(api).get_api_resources().resources  # system:discovery
        body = refusal(client.CoreV1Api(api).list_pod_for_all_namespaces)
        assert body["message"] == (
            f'pods is forbidden: User "{USER}" cannot list resource "pods" in API group "" at the cluster '
            "scope"
        )
        assert (body["reason"], body["details"]) == ("Forbidden", {"kind": "pods"})
        body = refusal(client.CoreV1Api(api).read_namespaced_pod, "web", "ml")
        assert body["message"] == (
            f'pods "web" is forbidden: User "{USER}" cannot get resource "pods" in API group "" in the '
            'namespace "ml"'
        )
        body = refusal(client.ResourceV1Api(api).list_resource_slice)
        assert body["message"].startswith("resourceslices.resource.k8s.io is forbidden: ")
        assert body["details"] == {"group": "resource.k8s.io", "kind": "resourceslices"}


def test_verbs_resources_subresources_and_names_must_each_match(kubeapi):
    kubeapi.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "ml"}})
    rules = [
        {"apiGroups": [""], "resources": ["pods"], "verbs": ["list"]},
        {"apiGroups": [""], "resources": ["pods/eviction"], "verbs": ["create"]},
        {"apiGroups": [""], "resources": ["namespaces"], "verbs": ["get"], "resourceNames": ["ml"]},
        {"apiGroups": ["*"], "resources": ["*/status"], "verbs": ["get"]},
    ]
    with as_account(kubeapi, rules) as api:
        core = client.CoreV1Api(api)
        assert core.list_pod_for_all_namespaces().items == []
        body = refusal(core.list_pod_for_all_namespaces, watch=True, _preload_content=False)
        assert 'cannot watch resource "pods"' in body["message"]
        body = refusal(core.delete_collection_namespaced_pod, "default")
        assert 'cannot deletecollection resource "pods"' in body["message"]
        body = refusal(core.create_namespaced_pod, "default", {"metadata": {"name": "p"}})
        assert 'cannot create resource "pods"' in body["message"], "pods/eviction is not pods"
        assert core.read_namespace("ml").metadata.name == "ml"
        body = refusal(core.read_namespace, "default")
        assert 'cannot get resource "namespaces"' in body["message"], "resourceNames name the only one"
        refusal(core.list_namespace)  # a rule with resourceNames never grants a list of all
        with pytest.raises(ApiException) as caught:
            core.read_namespace_status("gone")
        assert caught.value.status == 404, "*/status grants the status of every resource"


def test_role_bindings_grant_in_their_namespace_only(kubeapi):
    token = accounts.grant(kubeapi, [])
    kubeapi.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "ml"}})
    reader = [{"apiGroups": [""], "resources": ["pods"], "verbs": ["list"]}]
    kubeapi.create(
        {
            "apiVersion": accounts.RBAC,
            "kind": "Role",
            "metadata": {"name": "r", "namespace": "ml"},
            "rules": reader,
        }
    )
    kubeapi.create(
        {
            "apiVersion": accounts.RBAC,
            "kind": "RoleBinding",
            "metadata": {"name": "rb", "namespace": "ml"},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "r"},
            "subjects": [{"kind": "ServiceAccount", "name": "tester", "namespace": "default"}],
        }
    )
    with kubernetes.client.ApiClient(client_configuration(kubeapi, token=token)) as api:
        core = client.CoreV1Api(api)
        assert core.list_namespaced_pod("ml").items == []
        body = refusal(core.list_namespaced_pod, "default")
        assert body["message"].endswith('in the namespace "default"')
        refusal(core.list_pod_for_all_namespaces)


def test_an_aggregated_cluster_role_holds_the_rules_of_the_roles_it_selects(kubeapi):
    label = {"example.com/aggregate-to-tester": "true"}
    kubeapi.create(
        {
            "apiVersion": accounts.RBAC,
            "kind": "ClusterRole",
            "metadata": {"name": "node-reader", "labels": label},
            "rules": [{"apiGroups": [""], "resources": ["nodes"], "verbs": ["list"]}],
        }
    )
    kubeapi.create(
        {
            "apiVersion": accounts.RBAC,
            "kind": "ClusterRole",
            "metadata": {"name": "tester"},
            "aggregationRule": {"clusterRoleSelectors": [{"matchLabels": label}]},
        }
    )
    with as_account(kubeapi, []) as api:  # grant() leaves the existing aggregated role as it is
        assert client.CoreV1Api(api).list_node().items == []
        refusal(client.CoreV1Api(api).list_namespace)


def review(api_client, verb: str, resource: str, **attributes) -> client.V1SubjectAccessReviewStatus:
    body = {"spec": {"resourceAttributes": {"verb": verb, "resource": resource, **attributes}}}
    return client.AuthorizationV1Api(api_client).create_self_subject_access_review(body).status


def test_access_reviews_answer_from_the_same_rules_as_requests(kubeapi, kube_client):
    objects.gpu_operator(kubeapi)  # serves nvidia.com's NVIDIADriver
    assert review(kube_client, "delete", "nodes").allowed, "the server's token is system:masters"
    rules = [{"apiGroups": ["nvidia.com"], "resources": ["nvidiadrivers"], "verbs": ["get", "list"]}]
    with as_account(kubeapi, rules) as api:
        allowed = review(api, "list", "nvidiadrivers", group="nvidia.com")
        assert allowed.allowed
        assert allowed.reason == (
            'RBAC: allowed by ClusterRoleBinding "tester" of ClusterRole "tester" to ServiceAccount '
            '"tester/default"'
        )
        denied = review(api, "patch", "nvidiadrivers", group="nvidia.com")
        assert not denied.allowed and not denied.reason
        assert not review(api, "create", "pods", subresource="eviction", namespace="ml").allowed
        custom = client.CustomObjectsApi(api)
        assert custom.list_cluster_custom_object("nvidia.com", "v1alpha1", "nvidiadrivers")["kind"] == (
            "NVIDIADriverList"
        )
        refusal(custom.patch_cluster_custom_object, "nvidia.com", "v1alpha1", "nvidiadrivers", "x", {})


CLAIM_RULES = [
    {"apiGroups": ["resource.k8s.io"], "resources": ["resourceclaims"], "verbs": ["create", "get"]},
    {"apiGroups": ["resource.k8s.io"], "resources": ["resourceclaims/status"], "verbs": ["patch"]},
]
ALLOCATION = {
    "devices": {
        "results": [{"request": "gpu", "driver": "gpu.nvidia.com", "pool": "gpu-1", "device": "gpu-0"}]
    },
    "allocationTimestamp": "2026-01-01T00:00:00Z",
}


def allocate(server: FakeKubeApi, rules: list[dict]) -> None:
    claim = {
        "metadata": {"name": "c"},
        "spec": {
            "devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": "gpu.nvidia.com"}}]}
        },
    }
    with as_account(server, rules) as api:
        dra = client.ResourceV1Api(api)
        dra.create_namespaced_resource_claim("default", claim)
        dra.patch_namespaced_resource_claim_status(
            "c",
            "default",
            {"status": {"allocation": ALLOCATION}},
            _content_type="application/merge-patch+json",
        )


def test_before_1_36_resourceclaims_status_is_enough_to_allocate():
    with FakeKubeApi(version="1.35.1") as server:
        allocate(server, CLAIM_RULES)
        assert server.get("resource.k8s.io/v1", "ResourceClaim", "c")["status"]["allocation"]


def test_from_1_36_an_allocation_needs_resourceclaims_binding():
    with FakeKubeApi(version="1.36.0") as server:
        with pytest.raises(ApiException) as caught:
            allocate(server, CLAIM_RULES)
        assert caught.value.status == 422
        cause = json.loads(caught.value.body)["details"]["causes"][0]
        assert cause["field"] == "status.allocation" and cause["reason"] == "FieldValueForbidden"
        assert "patch permission on resourceclaims/binding.resource.k8s.io" in cause["message"]
        assert "status" not in server.get("resource.k8s.io/v1", "ResourceClaim", "c")
    with FakeKubeApi(version="1.36.0") as server:
        binding = {
            "apiGroups": ["resource.k8s.io"],
            "resources": ["resourceclaims/binding"],
            "verbs": ["patch"],
        }
        allocate(server, [*CLAIM_RULES, binding])
        assert server.get("resource.k8s.io/v1", "ResourceClaim", "c")["status"]["allocation"]
        user = "system:serviceaccount:default:tester"
        assert (user, "resource.k8s.io", "resourceclaims/binding", "patch", True) in server.decisions


def test_from_1_36_a_drivers_device_status_needs_resourceclaims_driver_by_name():
    binding = {"apiGroups": ["resource.k8s.io"], "resources": ["resourceclaims/binding"], "verbs": ["patch"]}
    devices = {"status": {"devices": [{"driver": "gpu.nvidia.com", "pool": "gpu-1", "device": "gpu-0"}]}}
    with FakeKubeApi(version="1.36.0") as server:
        allocate(server, [*CLAIM_RULES, binding])
        with as_account(server, []) as api:  # the same account: grant() leaves its role as it is
            dra = client.ResourceV1Api(api)
            with pytest.raises(ApiException) as caught:
                dra.patch_namespaced_resource_claim_status(
                    "c", "default", devices, _content_type="application/merge-patch+json"
                )
            assert caught.value.status == 422
            cause = json.loads(caught.value.body)["details"]["causes"][0]
            assert cause["field"] == "status.devices"
            assert "arbitrary-node:patch permission on resourceclaims/driver" in cause["message"]
        driver = {
            "apiGroups": ["resource.k8s.io"],
            "resources": ["resourceclaims/driver"],
            "verbs": ["arbitrary-node:patch"],
            "resourceNames": ["gpu.nvidia.com"],
        }
        server.update({**server.get(accounts.RBAC, "ClusterRole", "tester"), "rules": [*CLAIM_RULES, driver]})
        with as_account(server, []) as api:
            client.ResourceV1Api(api).patch_namespaced_resource_claim_status(
                "c", "default", devices, _content_type="application/merge-patch+json"
            )
        assert server.get("resource.k8s.io/v1", "ResourceClaim", "c")["status"]["devices"]
