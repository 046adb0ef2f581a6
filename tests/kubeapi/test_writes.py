"""Patches, preconditions, the status subresource and validation, through the official client."""

import json

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from tests.kubeapi import objects
from tests.kubeapi.patch import PatchError, json_patch, merge_patch, strategic_merge_patch


def status_of(error: ApiException) -> dict:
    return json.loads(error.body)


def test_merge_patch_follows_rfc_7386():
    target = {"a": "b", "c": {"d": "e", "f": "g"}, "list": [1, 2]}
    assert merge_patch(target, {"a": "z", "c": {"f": None}, "list": [3]}) == {
        "a": "z",
        "c": {"d": "e"},
        "list": [3],
    }
    assert merge_patch(target, {"new": {"x": None}}) == {**target, "new": {}}


def test_json_patch_follows_rfc_6902():
    doc = {"metadata": {"labels": {"a/b": "1"}}, "items": [1, 2]}
    patched = json_patch(
        doc,
        [
            {"op": "test", "path": "/metadata/labels/a~1b", "value": "1"},
            {"op": "add", "path": "/items/-", "value": 3},
            {"op": "add", "path": "/items/0", "value": 0},
            {"op": "replace", "path": "/metadata/labels/a~1b", "value": "2"},
            {"op": "remove", "path": "/items/1"},
            {"op": "copy", "from": "/items/0", "path": "/first"},
        ],
    )
    assert patched == {"metadata": {"labels": {"a/b": "2"}}, "items": [0, 2, 3], "first": 0}
    assert doc["items"] == [1, 2]  # the input is left alone
    with pytest.raises(PatchError):
        json_patch(doc, [{"op": "test", "path": "/items/0", "value": 9}])
    with pytest.raises(PatchError):
        json_patch(doc, [{"op": "replace", "path": "/missing", "value": 1}])


def test_strategic_merge_merges_lists_by_their_keys():
    original = {
        "spec": {
            "taints": [{"key": "a", "effect": "NoSchedule"}, {"key": "b", "effect": "NoSchedule"}],
            "containers": [{"name": "main", "image": "v1", "env": [{"name": "X", "value": "1"}]}],
            "tolerations": [{"key": "old"}],
        },
        "metadata": {"finalizers": ["one"]},
    }
    patch = {
        "spec": {
            "taints": [
                {"key": "b", "effect": "NoExecute"},
                {"key": "c", "effect": "NoSchedule"},
                {"key": "a", "$patch": "delete"},
            ],
            "containers": [{"name": "main", "env": [{"name": "Y", "value": "2"}]}],
            "tolerations": [{"key": "new"}],
        },
        "metadata": {"finalizers": ["two"]},
    }
    merged = strategic_merge_patch(original, patch)
    assert merged["spec"]["taints"] == [
        {"key": "b", "effect": "NoExecute"},
        {"key": "c", "effect": "NoSchedule"},
    ]
    assert merged["spec"]["containers"] == [
        {"name": "main", "image": "v1", "env": [{"name": "X", "value": "1"}, {"name": "Y", "value": "2"}]}
    ]
    assert merged["spec"]["tolerations"] == [{"key": "new"}]  # no merge key: replaced
    assert merged["metadata"]["finalizers"] == ["one", "two"]  # patchStrategy=merge on a list of strings
    removed = strategic_merge_patch(merged, {"metadata": {"$deleteFromPrimitiveList/finalizers": ["one"]}})
    assert removed["metadata"]["finalizers"] == ["two"]


def test_merge_patch_null_deletes_a_label(kubeapi, kube_client):
    kubeapi.create(objects.gpu_node("gpu-1", labels={"nvke.io/pool": "a"}))
    core = client.CoreV1Api(kube_client)
    body = {"metadata": {"labels": {"nvke.io/pool": None, "nvke.io/driver": "570"}}}
    node = core.patch_node("gpu-1", body, _content_type="application/merge-patch+json")
    assert "nvke.io/pool" not in node.metadata.labels and node.metadata.labels["nvke.io/driver"] == "570"
    assert kubeapi.requests[-1][1:] == ("/api/v1/nodes/gpu-1", {}, body)


def test_a_dict_patch_is_sent_as_strategic_merge_and_merges_taints_by_key(kubeapi, kube_client):
    node = objects.gpu_node("gpu-1")
    node["spec"]["taints"] = [{"key": "nvidia.com/gpu", "effect": "NoSchedule"}]
    kubeapi.create(node)
    core = client.CoreV1Api(kube_client)
    taint = {"key": "nvke.io/pool", "value": "a", "effect": "NoSchedule"}
    patched = core.patch_node("gpu-1", {"spec": {"taints": [taint]}})
    assert [(t.key, t.value) for t in patched.spec.taints] == [
        ("nvidia.com/gpu", None),
        ("nvke.io/pool", "a"),
    ]
    assert [(t.key, t.value) for t in patched.spec.taints] == [
        (t["key"], t.get("value")) for t in kubeapi.get("v1", "Node", "gpu-1")["spec"]["taints"]
    ]
    removed = core.patch_node("gpu-1", {"spec": {"taints": [{"key": "nvke.io/pool", "$patch": "delete"}]}})
    assert [t.key for t in removed.spec.taints] == ["nvidia.com/gpu"]


def test_a_list_patch_is_a_json_patch(kubeapi, kube_client):
    kubeapi.create(objects.gpu_node("gpu-1"))
    core = client.CoreV1Api(kube_client)
    node = core.patch_node("gpu-1", [{"op": "add", "path": "/metadata/labels/nvke.io~1pool", "value": "a"}])
    assert node.metadata.labels["nvke.io/pool"] == "a"
    with pytest.raises(ApiException) as caught:
        core.patch_node("gpu-1", [{"op": "test", "path": "/metadata/labels/nvke.io~1pool", "value": "b"}])
    assert caught.value.status == 422


def test_custom_resources_refuse_strategic_merge(kubeapi, kube_client):
    objects.gpu_operator(kubeapi)
    custom = client.CustomObjectsApi(kube_client)
    custom.patch_cluster_custom_object(  # the client's default for custom objects is a merge patch
        "nvidia.com",
        "v1",
        "clusterpolicies",
        "cluster-policy",
        {"spec": {"driver": {"version": "580.65.06"}}},
    )
    with pytest.raises(ApiException) as caught:
        custom.patch_cluster_custom_object(
            "nvidia.com",
            "v1",
            "clusterpolicies",
            "cluster-policy",
            {"spec": {}},
            _content_type="application/strategic-merge-patch+json",
        )
    assert caught.value.status == 415
    policy = kubeapi.get("nvidia.com/v1", "ClusterPolicy", "cluster-policy")
    assert policy["spec"]["driver"]["version"] == "580.65.06"


def test_stale_resource_versions_conflict_on_put_and_patch(kubeapi, kube_client):
    kubeapi.create(objects.gpu_node("gpu-1"))
    core = client.CoreV1Api(kube_client)
    stale = core.read_node("gpu-1")
    core.patch_node("gpu-1", {"metadata": {"labels": {"a": "1"}}})
    stale.metadata.labels["b"] = "2"
    with pytest.raises(ApiException) as caught:
        core.replace_node("gpu-1", stale)
    assert caught.value.status == 409
    assert status_of(caught.value)["message"] == (
        'Operation cannot be fulfilled on nodes "gpu-1": the object has been modified; please apply your '
        "changes to the latest version and try again"
    )
    body = {"metadata": {"resourceVersion": stale.metadata.resource_version, "labels": {"b": "2"}}}
    with pytest.raises(ApiException) as caught:
        core.patch_node("gpu-1", body, _content_type="application/merge-patch+json")
    assert caught.value.status == 409
    fresh = core.read_node("gpu-1")
    fresh.metadata.labels["b"] = "2"
    assert core.replace_node("gpu-1", fresh).metadata.labels["b"] == "2"
    unconditional = core.read_node("gpu-1")
    unconditional.metadata.resource_version = None
    unconditional.metadata.labels["c"] = "3"
    assert core.replace_node("gpu-1", unconditional).metadata.labels["c"] == "3"  # built-ins allow it


def test_a_custom_resource_update_must_carry_a_resource_version(kubeapi, kube_client):
    objects.gpu_operator(kubeapi)
    custom = client.CustomObjectsApi(kube_client)
    policy = custom.get_cluster_custom_object("nvidia.com", "v1", "clusterpolicies", "cluster-policy")
    del policy["metadata"]["resourceVersion"]
    with pytest.raises(ApiException) as caught:
        custom.replace_cluster_custom_object("nvidia.com", "v1", "clusterpolicies", "cluster-policy", policy)
    assert caught.value.status == 422 and "must be specified for an update" in caught.value.body


def test_status_is_a_subresource_of_its_own(kubeapi, kube_client):
    kubeapi.actors.kubelet = False
    kubeapi.create(objects.pod("web"))
    core = client.CoreV1Api(kube_client)
    patched = core.patch_namespaced_pod(
        "web", "default", {"metadata": {"labels": {"a": "b"}}, "status": {"phase": "Failed"}}
    )
    assert patched.status.phase == "Pending" and patched.metadata.labels == {"a": "b"}  # status ignored
    status_patch = {
        "metadata": {"labels": {"a": "c"}},
        "spec": {"nodeName": "x"},
        "status": {"phase": "Running"},
    }
    patched = core.patch_namespaced_pod_status("web", "default", status_patch)
    assert (
        patched.status.phase == "Running"
        and patched.metadata.labels == {"a": "b"}
        and patched.spec.node_name is None
    )
    assert patched.metadata.generation == 1
    claim = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": "c"},
        "spec": {
            "devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": "gpu.nvidia.com"}}]}
        },
        "status": {"reservedFor": [{"resource": "pods", "name": "web", "uid": "1"}]},
    }
    created = client.ResourceV1Api(kube_client).create_namespaced_resource_claim("default", claim)
    assert created.status is None  # status cannot be set on create


def test_resource_claim_allocation_is_written_once_under_a_precondition(kubeapi, kube_client):
    claim = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": "c", "labels": {"nvke.io/claim": "c"}},
        "spec": {
            "devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": "gpu.nvidia.com"}}]}
        },
    }
    dra = client.ResourceV1Api(kube_client)
    created = dra.create_namespaced_resource_claim("default", claim)
    allocation = {
        "devices": {
            "results": [{"request": "gpu", "driver": "gpu.nvidia.com", "pool": "gpu-1", "device": "gpu-0"}]
        },
        "allocationTimestamp": "2026-01-01T00:00:00Z",
    }
    body = {
        "metadata": {"resourceVersion": created.metadata.resource_version},
        "status": {"allocation": allocation},
    }
    allocated = dra.patch_namespaced_resource_claim_status(
        "c", "default", body, _content_type="application/merge-patch+json"
    )
    assert allocated.status.allocation.devices.results[0].device == "gpu-0"
    with pytest.raises(ApiException) as caught:  # a second writer holding the old version loses
        dra.patch_namespaced_resource_claim_status(
            "c", "default", body, _content_type="application/merge-patch+json"
        )
    assert caught.value.status == 409
    moved = {
        "status": {
            "allocation": {
                **allocation,
                "devices": {"results": [{**allocation["devices"]["results"][0], "device": "gpu-1"}]},
            }
        }
    }
    with pytest.raises(ApiException) as caught:
        dra.patch_namespaced_resource_claim_status(
            "c", "default", moved, _content_type="application/merge-patch+json"
        )
    assert caught.value.status == 422 and "status.allocation" in caught.value.body
    with pytest.raises(ApiException) as caught:
        dra.patch_namespaced_resource_claim("c", "default", {"spec": {"devices": {"requests": []}}})
    assert caught.value.status == 422 and "field is immutable" in caught.value.body


def raw_request(api_client: client.ApiClient, method: str, path: str, body: dict) -> tuple[int, dict]:
    """A request the typed API would refuse to send: the client checks bodies against its models first."""
    serialized = api_client.param_serialize(
        method,
        path,
        header_params={"Content-Type": "application/json"},
        body=body,
        auth_settings=["BearerToken"],
    )
    response = api_client.call_api(*serialized)
    return response.status, json.loads(response.read())


def test_an_invalid_pod_is_422_naming_the_problem(kube_client):
    body = {"metadata": {"name": "bad"}, "spec": {"containers": [{"image": "x", "imagePolicy": "Always"}]}}
    with pytest.raises(ValueError):
        client.CoreV1Api(kube_client).create_namespaced_pod("default", body)
    code, status = raw_request(kube_client, "POST", "/api/v1/namespaces/default/pods", body)
    assert code == 422
    assert status["reason"] == "Invalid" and status["details"]["kind"] == "Pod"
    assert {(c["field"], c["reason"]) for c in status["details"]["causes"]} == {
        ("spec.containers[0].name", "FieldValueRequired"),
        ("spec.containers[0].imagePolicy", "FieldValueInvalid"),
    }
    assert status["message"].startswith('Pod "bad" is invalid: [spec.containers[0]')


def test_pod_updates_may_only_change_some_fields(kubeapi, kube_client):
    kubeapi.actors.kubelet = False
    pod = objects.pod("web")
    pod["spec"]["schedulingGates"] = [{"name": "nvke.io/placement"}]
    kubeapi.create(pod)
    core = client.CoreV1Api(kube_client)
    with pytest.raises(ApiException) as caught:
        core.patch_namespaced_pod("web", "default", {"spec": {"nodeName": "gpu-1"}})
    assert caught.value.status == 422 and "pod updates may not change fields" in caught.value.body
    with pytest.raises(ApiException):
        core.patch_namespaced_pod("web", "default", {"spec": {"schedulingGates": [{"name": "another"}]}})
    ungated = core.patch_namespaced_pod("web", "default", [{"op": "remove", "path": "/spec/schedulingGates"}])
    assert ungated.spec.scheduling_gates is None
    assert core.patch_namespaced_pod(
        "web", "default", {"spec": {"containers": [{"name": "main", "image": "v2"}]}}
    )


def test_custom_resources_are_checked_against_their_crd_and_defaulted(kubeapi, kube_client):
    objects.gpu_operator(kubeapi)
    custom = client.CustomObjectsApi(kube_client)
    body = {
        "apiVersion": "nvidia.com/v1alpha1",
        "kind": "NVIDIADriver",
        "metadata": {"name": "d"},
        "spec": {"version": "570.133.20", "upgradePolicy": {}},
    }
    created = custom.create_cluster_custom_object("nvidia.com", "v1alpha1", "nvidiadrivers", body)
    assert created["spec"]["driverType"] == "gpu" and created["spec"]["image"] == "nvcr.io/nvidia/driver"
    assert created["spec"]["upgradePolicy"]["autoUpgrade"] is True  # the CRD's default: NVKE must say false
    for spec, field in [
        ({"version": "570", "bogus": True}, "spec.bogus"),
        ({"driverType": "cuda"}, "spec.driverType"),
        ({"upgradePolicy": {"autoUpgrade": "no"}}, "spec.upgradePolicy.autoUpgrade"),
        ({"nodeSelector": {"a": 1}}, "spec.nodeSelector.a"),
    ]:
        with pytest.raises(ApiException) as caught:
            custom.create_cluster_custom_object(
                "nvidia.com", "v1alpha1", "nvidiadrivers", {**body, "metadata": {"name": "x"}, "spec": spec}
            )
        assert caught.value.status == 422
        assert [c["field"] for c in status_of(caught.value)["details"]["causes"]] == [field]


def test_access_reviews_are_validated(kube_client):
    with pytest.raises(ApiException) as caught:
        client.AuthorizationV1Api(kube_client).create_self_subject_access_review({"spec": {}})
    assert caught.value.status == 422
