"""Create, read, list, replace and delete: metadata, errors, selectors, pagination, finalizers, dry runs."""

import json

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from tests.kubeapi import objects


def status_of(error: ApiException) -> dict:
    return json.loads(error.body)


def test_create_sets_server_metadata_and_get_reads_it_back(kubeapi, kube_client):
    kubeapi.actors.kube_scheduler = False  # no PodScheduled condition written between create and read
    core = client.CoreV1Api(kube_client)
    created = core.create_namespaced_pod("default", objects.pod("web", labels={"app": "web"}))
    meta = created.metadata
    assert meta.uid and meta.creation_timestamp and meta.generation == 1 and int(meta.resource_version) > 0
    assert created.status.phase == "Pending"  # unscheduled: the kubelet has nothing to run
    read = core.read_namespaced_pod("web", "default")
    assert (read.metadata.uid, read.metadata.resource_version) == (meta.uid, meta.resource_version)


def test_missing_objects_are_404_with_a_status(kube_client):
    with pytest.raises(ApiException) as caught:
        client.CoreV1Api(kube_client).read_namespaced_pod("nope", "default")
    assert caught.value.status == 404
    assert status_of(caught.value) == {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": 'pods "nope" not found',
        "reason": "NotFound",
        "details": {"name": "nope", "kind": "pods"},
        "code": 404,
    }
    with pytest.raises(ApiException) as caught:
        client.PolicyV1Api(kube_client).read_namespaced_pod_disruption_budget("nope", "default")
    assert status_of(caught.value)["message"] == 'poddisruptionbudgets.policy "nope" not found'


def test_a_duplicate_create_is_409_already_exists(kube_client):
    core = client.CoreV1Api(kube_client)
    core.create_namespaced_pod("default", objects.pod("web"))
    with pytest.raises(ApiException) as caught:
        core.create_namespaced_pod("default", objects.pod("web"))
    assert caught.value.status == 409
    assert status_of(caught.value)["reason"] == "AlreadyExists"


def test_namespaced_objects_need_their_namespace(kube_client):
    core = client.CoreV1Api(kube_client)
    with pytest.raises(ApiException) as caught:
        core.create_namespaced_pod("ml", objects.pod("web", namespace="ml"))
    assert caught.value.status == 404 and status_of(caught.value)["message"] == 'namespaces "ml" not found'
    core.create_namespace(objects.namespace("ml"))
    assert core.create_namespaced_pod("ml", objects.pod("web", namespace="ml")).metadata.namespace == "ml"
    assert core.read_namespace("ml").status.phase == "Active"
    with pytest.raises(ApiException) as caught:
        core.create_namespaced_pod("default", objects.pod("web", namespace="ml"))
    assert caught.value.status == 400


def test_generate_name(kube_client):
    body = objects.pod("")
    body["metadata"] = {"generateName": "job-"}
    created = client.CoreV1Api(kube_client).create_namespaced_pod("default", body)
    assert created.metadata.name.startswith("job-") and len(created.metadata.name) == len("job-") + 5
    del body["metadata"]["generateName"]
    with pytest.raises(ApiException) as caught:
        client.CoreV1Api(kube_client).create_namespaced_pod("default", body)
    assert caught.value.status == 422


def test_resource_versions_grow_and_generation_counts_spec_changes(kubeapi, kube_client):
    core = client.CoreV1Api(kube_client)
    kubeapi.create(objects.gpu_node("gpu-1"))
    first = core.read_node("gpu-1")
    labelled = core.patch_node("gpu-1", {"metadata": {"labels": {"team": "a"}}})
    assert int(labelled.metadata.resource_version) > int(first.metadata.resource_version)
    assert labelled.metadata.generation == first.metadata.generation  # metadata is not spec
    cordoned = core.patch_node("gpu-1", {"spec": {"unschedulable": True}})
    assert cordoned.metadata.generation == first.metadata.generation + 1
    again = core.patch_node("gpu-1", {"spec": {"unschedulable": True}})
    assert again.metadata.resource_version == cordoned.metadata.resource_version  # a no-op writes nothing


def test_list_carries_the_collection_resource_version_and_bare_items(kubeapi, kube_client):
    kubeapi.create(objects.gpu_node("gpu-1"))
    response = client.CoreV1Api(kube_client).list_node(_preload_content=False)
    body = json.loads(response.data)
    assert body["kind"] == "NodeList" and body["apiVersion"] == "v1"
    assert body["metadata"]["resourceVersion"] == str(kubeapi.store.rv)
    assert "kind" not in body["items"][0] and body["items"][0]["metadata"]["name"] == "gpu-1"


def test_label_selectors(kubeapi, kube_client):
    for name, labels in [("a", {"app": "web", "tier": "1"}), ("b", {"app": "db"}), ("c", {"tier": "2"})]:
        kubeapi.create(objects.pod(name, labels=labels))
    core = client.CoreV1Api(kube_client)

    def names(selector: str) -> list[str]:
        return [p.metadata.name for p in core.list_namespaced_pod("default", label_selector=selector).items]

    assert names("app=web") == names("app==web") == ["a"]
    assert names("app!=web") == ["b", "c"]  # != matches pods without the label too
    assert names("app in (web, db)") == ["a", "b"]
    assert names("tier notin (1)") == ["b", "c"]
    assert names("app") == ["a", "b"] and names("!app") == ["c"]
    assert names("app,tier") == ["a"] and names("app in (web,db),!tier") == ["b"]
    with pytest.raises(ApiException) as caught:
        names("app in web")
    assert caught.value.status == 400


def test_field_selectors_and_an_unknown_field_is_400(kubeapi, kube_client):
    kubeapi.actors.kubelet = kubeapi.actors.kube_scheduler = False  # "nowhere" stays unscheduled
    kubeapi.create(objects.gpu_node("gpu-1"))
    kubeapi.create(objects.gpu_node("gpu-2", unschedulable=True))
    kubeapi.create(objects.pod("on-1", node="gpu-1"))
    kubeapi.create(objects.pod("on-2", node="gpu-2", phase="Running"))
    kubeapi.create(objects.pod("nowhere"))
    core = client.CoreV1Api(kube_client)

    def pods(selector: str) -> list[str]:
        return [p.metadata.name for p in core.list_pod_for_all_namespaces(field_selector=selector).items]

    assert pods("spec.nodeName=gpu-1") == ["on-1"]
    assert pods("spec.nodeName=") == ["nowhere"]
    assert pods("spec.nodeName!=gpu-1,status.phase==Pending") == ["nowhere"]
    assert pods("metadata.name=on-2,metadata.namespace=default") == ["on-2"]
    assert [n.metadata.name for n in core.list_node(field_selector="spec.unschedulable=false").items] == [
        "gpu-1"
    ]
    with pytest.raises(ApiException) as caught:
        pods("spec.bogus=x")
    assert caught.value.status == 400
    assert status_of(caught.value)["message"] == "field label not supported: spec.bogus"
    with pytest.raises(ApiException):
        core.list_node(field_selector="metadata.namespace=default")  # cluster-scoped: no namespace field


def test_resource_slices_select_by_node_and_driver(kubeapi, kube_client):
    node = kubeapi.create(objects.gpu_node("gpu-1"))
    kubeapi.create(objects.resource_slice(node, 2))
    kubeapi.create(objects.resource_slice("gpu-2", 1))
    dra = client.ResourceV1Api(kube_client)
    slices = dra.list_resource_slice(field_selector="spec.driver=gpu.nvidia.com,spec.nodeName=gpu-1").items
    assert [s.spec.node_name for s in slices] == ["gpu-1"]
    assert [d.attributes["uuid"].string for d in slices[0].spec.devices] == [
        objects.gpu_uuid("gpu-1", 0),
        objects.gpu_uuid("gpu-1", 1),
    ]
    assert slices[0].spec.devices[0].capacity["memory"].value == "81559Mi"


def test_limit_and_continue_page_through_a_list(kubeapi, kube_client):
    for i in range(5):
        kubeapi.create(objects.pod(f"p{i}"))
    core = client.CoreV1Api(kube_client)
    page = core.list_namespaced_pod("default", limit=2)
    assert [p.metadata.name for p in page.items] == ["p0", "p1"] and page.metadata.remaining_item_count == 3
    rest = core.list_namespaced_pod("default", limit=10, _continue=page.metadata._continue)
    assert [p.metadata.name for p in rest.items] == ["p2", "p3", "p4"] and rest.metadata._continue is None
    kubeapi.create(objects.pod("p5"))
    kubeapi.compact()  # the token's resourceVersion is now older than what is retained
    with pytest.raises(ApiException) as caught:
        core.list_namespaced_pod("default", limit=2, _continue=page.metadata._continue)
    assert caught.value.status == 410


def test_delete_answers_with_the_pod_or_a_status(kubeapi, kube_client):
    core = client.CoreV1Api(kube_client)
    kubeapi.create(objects.pod("web"))
    kubeapi.create(objects.gpu_node("gpu-1"))
    deleted = core.delete_namespaced_pod("web", "default")
    assert deleted.metadata.name == "web"  # pods answer with the object
    status = core.delete_node("gpu-1")
    assert status["status"] == "Success" and status["details"]["kind"] == "nodes"
    assert kubeapi.get("v1", "Pod", "web") is None and kubeapi.get("v1", "Node", "gpu-1") is None
    with pytest.raises(ApiException) as caught:
        core.delete_node("gpu-1")
    assert caught.value.status == 404


def test_delete_preconditions(kubeapi, kube_client):
    pod = kubeapi.create(objects.pod("web"))
    core = client.CoreV1Api(kube_client)
    for preconditions in ({"uid": "not-its-uid"}, {"resourceVersion": "1"}):
        with pytest.raises(ApiException) as caught:
            core.delete_namespaced_pod("web", "default", body={"preconditions": preconditions})
        assert caught.value.status == 409 and "Precondition failed" in caught.value.body
    core.delete_namespaced_pod("web", "default", body={"preconditions": {"uid": pod["metadata"]["uid"]}})


def test_finalizers_hold_a_deleted_object_until_they_are_removed(kubeapi, kube_client):
    core = client.CoreV1Api(kube_client)
    body = objects.pod("web")
    body["metadata"]["finalizers"] = ["nvke.io/cleanup"]
    core.create_namespaced_pod("default", body)
    core.delete_namespaced_pod("web", "default")
    held = core.read_namespaced_pod("web", "default")
    assert held.metadata.deletion_timestamp is not None and held.metadata.finalizers == ["nvke.io/cleanup"]
    core.delete_namespaced_pod("web", "default")  # deleting again changes nothing
    assert (
        core.read_namespaced_pod("web", "default").metadata.resource_version == held.metadata.resource_version
    )
    core.patch_namespaced_pod("web", "default", [{"op": "remove", "path": "/metadata/finalizers"}])
    assert kubeapi.get("v1", "Pod", "web") is None


def test_dry_run_answers_without_storing(kubeapi, kube_client):
    core = client.CoreV1Api(kube_client)
    before = kubeapi.store.rv
    assert core.create_namespaced_pod("default", objects.pod("web"), dry_run="All").metadata.name == "web"
    assert kubeapi.get("v1", "Pod", "web") is None and kubeapi.store.rv == before
    kubeapi.create(objects.pod("web"))
    core.patch_namespaced_pod("web", "default", {"metadata": {"labels": {"a": "b"}}}, dry_run="All")
    core.delete_namespaced_pod("web", "default", dry_run="All")
    assert kubeapi.get("v1", "Pod", "web")["metadata"]["labels"] == {}


def test_deleting_a_namespace_deletes_what_is_in_it(kubeapi, kube_client):
    core = client.CoreV1Api(kube_client)
    core.create_namespace(objects.namespace("ml"))
    kubeapi.create(objects.pod("web", namespace="ml"))
    core.delete_namespace("ml")
    assert kubeapi.list("v1", "Pod", namespace="ml") == [] and kubeapi.get("v1", "Namespace", "ml") is None


def test_rbac_kinds_serve_create_get_and_delete_and_refuse_the_rest(kube_client):
    rbac = client.RbacAuthorizationV1Api(kube_client)
    role = {
        "metadata": {"name": "nvke"},
        "rules": [{"apiGroups": [""], "resources": ["nodes"], "verbs": ["get"]}],
    }
    rbac.create_cluster_role(role)
    assert rbac.read_cluster_role("nvke").rules[0].resources == ["nodes"]
    with pytest.raises(ApiException) as caught:
        rbac.patch_cluster_role("nvke", {"metadata": {"labels": {"a": "b"}}})
    assert caught.value.status == 405  # a verb the stand-in does not serve, as discovery says
    rbac.delete_cluster_role("nvke")
    with pytest.raises(ApiException) as caught:
        rbac.read_cluster_role("nvke")
    assert caught.value.status == 404


def test_seeding_writes_like_the_api(kubeapi):
    node = kubeapi.create(objects.gpu_node("gpu-1"))
    patched = kubeapi.patch_merge("v1", "Node", "gpu-1", {"metadata": {"labels": {"team": "a"}}})
    assert int(patched["metadata"]["resourceVersion"]) > int(node["metadata"]["resourceVersion"])
    assert [n["metadata"]["name"] for n in kubeapi.list("v1", "Node", label_selector="team=a")] == ["gpu-1"]
    patched["status"]["conditions"][0]["status"] = "False"
    assert (
        kubeapi.update(patched)["status"]["conditions"][0]["status"] == "False"
    )  # status too, no precondition
    kubeapi.delete("v1", "Node", "gpu-1")
    assert kubeapi.get("v1", "Node", "gpu-1") is None
    with pytest.raises(KeyError):
        kubeapi.create(
            {"apiVersion": "nvidia.com/v1alpha1", "kind": "NVIDIADriver", "metadata": {"name": "x"}}
        )


def test_every_kind_round_trips_through_its_typed_api(kubeapi, kube_client):
    core, apps = client.CoreV1Api(kube_client), client.AppsV1Api(kube_client)
    dra, rbac = client.ResourceV1Api(kube_client), client.RbacAuthorizationV1Api(kube_client)
    core.create_namespaced_secret("default", {"metadata": {"name": "s"}, "stringData": {"token": "abc"}})
    assert core.read_namespaced_secret("s", "default").data == {"token": "YWJj"}  # stringData is write-only
    core.create_namespaced_service_account("default", {"metadata": {"name": "nvke"}})
    assert core.delete_namespaced_service_account("nvke", "default").metadata.name == "nvke"
    event = {
        "metadata": {"name": "e"},
        "involvedObject": {"kind": "Node", "name": "gpu-1"},
        "reason": "Cordoned",
        "message": "cordoned by NVKE",
        "type": "Normal",
    }
    core.create_namespaced_event("default", event)
    assert [
        e.reason
        for e in core.list_namespaced_event("default", field_selector="involvedObject.name=gpu-1").items
    ] == ["Cordoned"]
    labels = {"app": "x"}
    template = {"metadata": {"labels": labels}, "spec": {"containers": [{"name": "c", "image": "x"}]}}
    apps.create_namespaced_deployment(
        "default",
        {"metadata": {"name": "d"}, "spec": {"selector": {"matchLabels": labels}, "template": template}},
    )
    apps.create_namespaced_daemon_set(
        "default",
        {"metadata": {"name": "d"}, "spec": {"selector": {"matchLabels": labels}, "template": template}},
    )
    assert apps.read_namespaced_deployment("d", "default").spec.template.spec.containers[0].image == "x"
    assert [d.metadata.name for d in apps.list_daemon_set_for_all_namespaces().items] == ["d"]
    apps.create_namespaced_controller_revision(
        "default", {"metadata": {"name": "d-1"}, "revision": 1, "data": {}}
    )
    dra.create_device_class(objects.device_class())
    assert dra.delete_device_class("gpu.nvidia.com").metadata.name == "gpu.nvidia.com"
    binding = {
        "metadata": {"name": "nvke"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "nvke"},
        "subjects": [{"kind": "ServiceAccount", "name": "nvke", "namespace": "default"}],
    }
    rbac.create_cluster_role_binding(binding)
    assert rbac.read_cluster_role_binding("nvke").role_ref.name == "nvke"
    assert client.ApiextensionsV1Api(kube_client).list_custom_resource_definition().items == []
