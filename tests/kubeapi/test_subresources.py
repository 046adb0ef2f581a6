"""pods/eviction against PodDisruptionBudgets and pods/binding (access reviews: test_authorization)."""

import json

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from tests.kubeapi import objects


def eviction(name: str, namespace: str = "default", **delete_options) -> dict:
    body = {"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": name, "namespace": namespace}}
    if delete_options:
        body["deleteOptions"] = delete_options
    return body


@pytest.fixture
def web(kubeapi):
    """Three Running, Ready pods labelled app=web on gpu-1."""
    kubeapi.create(objects.gpu_node("gpu-1"))
    for i in range(3):
        kubeapi.create(objects.pod(f"web-{i}", node="gpu-1", labels={"app": "web"}, owner_kind="ReplicaSet"))
    assert all(p["status"]["phase"] == "Running" for p in kubeapi.list("v1", "Pod"))
    return kubeapi


def test_an_eviction_without_a_budget_deletes_the_pod(web, kube_client):
    result = client.CoreV1Api(kube_client).create_namespaced_pod_eviction(
        "web-0", "default", eviction("web-0")
    )
    assert isinstance(result, client.V1Eviction)
    assert web.get("v1", "Pod", "web-0") is None
    method, path, _, body = web.requests[-1]
    assert (method, path, body["kind"]) == (
        "POST",
        "/api/v1/namespaces/default/pods/web-0/eviction",
        "Eviction",
    )


def test_an_eviction_is_answered_201_success(web, kube_client):
    response = client.CoreV1Api(kube_client).create_namespaced_pod_eviction(
        "web-0", "default", eviction("web-0"), _preload_content=False
    )
    assert response.status == 201
    assert json.loads(response.data) == {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Success",
        "code": 201,
    }


def test_a_budget_with_room_allows_evictions_until_it_has_none(web, kube_client):
    web.create(objects.pdb("web", selector={"app": "web"}, min_available=2))
    pdb = web.get("policy/v1", "PodDisruptionBudget", "web")["status"]
    assert (pdb["currentHealthy"], pdb["desiredHealthy"], pdb["disruptionsAllowed"], pdb["expectedPods"]) == (
        3,
        2,
        1,
        3,
    )
    core = client.CoreV1Api(kube_client)
    core.create_namespaced_pod_eviction("web-0", "default", eviction("web-0"))
    with pytest.raises(ApiException) as caught:
        core.create_namespaced_pod_eviction("web-1", "default", eviction("web-1"))
    assert caught.value.status == 429
    status = json.loads(caught.value.body)
    assert status["reason"] == "TooManyRequests"
    assert status["message"] == "Cannot evict pod as it would violate the pod's disruption budget."
    assert status["details"]["causes"] == [
        {
            "reason": "DisruptionBudget",
            "message": "The disruption budget web needs 2 healthy pods and has 2 currently",
        }
    ]
    assert "Retry-After" not in caught.value.headers
    assert web.get("v1", "Pod", "web-1") is not None
    budget = client.PolicyV1Api(kube_client).read_namespaced_pod_disruption_budget_status("web", "default")
    assert (budget.status.disruptions_allowed, budget.status.current_healthy) == (0, 2)


@pytest.mark.parametrize(
    ("budget", "evictable"),
    [
        ({"min_available": "50%"}, 1),
        ({"max_unavailable": 1}, 1),
        ({"max_unavailable": "34%"}, 2),
        ({"min_available": 3}, 0),
    ],
)
def test_budgets_in_numbers_and_percentages(web, kube_client, budget, evictable):
    web.create(objects.pdb("web", selector={"app": "web"}, **budget))
    core = client.CoreV1Api(kube_client)
    evicted = 0
    for i in range(3):
        try:
            core.create_namespaced_pod_eviction(f"web-{i}", "default", eviction(f"web-{i}"))
            evicted += 1
        except ApiException as error:
            assert error.status == 429
    assert evicted == evictable


def test_two_budgets_for_one_pod_are_a_500(web, kube_client):
    web.create(objects.pdb("one", selector={"app": "web"}, min_available=1))
    web.create(objects.pdb("two", selector={"app": "web"}, max_unavailable=1))
    with pytest.raises(ApiException) as caught:
        client.CoreV1Api(kube_client).create_namespaced_pod_eviction("web-0", "default", eviction("web-0"))
    assert caught.value.status == 500
    assert json.loads(caught.value.body)["message"] == (
        "This pod has more than one PodDisruptionBudget, which the eviction subresource does not support."
    )


def test_evicting_a_missing_pod_is_404(kube_client):
    with pytest.raises(ApiException) as caught:
        client.CoreV1Api(kube_client).create_namespaced_pod_eviction("gone", "default", eviction("gone"))
    assert caught.value.status == 404


def test_pending_and_finished_pods_are_evicted_despite_a_budget(web, kube_client):
    web.create(objects.pdb("web", selector={"app": "web"}, min_available=3))
    web.create(objects.pod("waiting", labels={"app": "web"}))  # unscheduled: Pending
    web.actors.kubelet = False
    web.create(objects.pod("done", node="gpu-1", labels={"app": "web"}, phase="Succeeded"))
    core = client.CoreV1Api(kube_client)
    core.create_namespaced_pod_eviction("waiting", "default", eviction("waiting"))
    core.create_namespaced_pod_eviction("done", "default", eviction("done"))
    assert web.get("v1", "Pod", "waiting") is None and web.get("v1", "Pod", "done") is None


def test_an_eviction_honours_the_grace_period(web, kube_client):
    web.actors.pod_grace_seconds = 30
    core = client.CoreV1Api(kube_client)
    core.create_namespaced_pod_eviction("web-0", "default", eviction("web-0"))
    going = web.get("v1", "Pod", "web-0")
    assert going["metadata"]["deletionGracePeriodSeconds"] == 30 and "deletionTimestamp" in going["metadata"]
    web.create(objects.pdb("web", selector={"app": "web"}, min_available=1))
    assert (
        web.get("policy/v1", "PodDisruptionBudget", "web")["status"]["currentHealthy"] == 2
    )  # going: not healthy
    core.create_namespaced_pod_eviction("web-1", "default", eviction("web-1", gracePeriodSeconds=0))
    assert web.get("v1", "Pod", "web-1") is None
    with pytest.raises(ApiException):
        core.create_namespaced_pod_eviction("web-2", "default", eviction("web-2"))
    web.settle(10)
    assert web.get("v1", "Pod", "web-0") is not None
    web.settle(20)
    assert web.get("v1", "Pod", "web-0") is None


def test_a_dry_run_eviction_checks_without_deleting(web, kube_client):
    client.CoreV1Api(kube_client).create_namespaced_pod_eviction(
        "web-0", "default", eviction("web-0"), dry_run="All"
    )
    assert web.get("v1", "Pod", "web-0") is not None


def test_binding_assigns_an_unscheduled_pod_once(kubeapi, kube_client):
    kubeapi.create(objects.gpu_node("gpu-1"))
    job = objects.pod("job")
    job["spec"]["schedulerName"] = "custom"  # binding is a custom scheduler's work; kube-scheduler leaves it
    kubeapi.create(job)
    core = client.CoreV1Api(kube_client)
    binding = {
        "apiVersion": "v1",
        "kind": "Binding",
        "metadata": {"name": "job", "annotations": {"nvke.io/gpus": "GPU-1"}},
        "target": {"apiVersion": "v1", "kind": "Node", "name": "gpu-1"},
    }
    # kube-apiserver answers a Status, which the typed call cannot read back as a V1Binding: the call must
    # not preload the answer.
    response = core.create_namespaced_pod_binding("job", "default", binding, _preload_content=False)
    assert response.status == 201 and json.loads(response.data)["status"] == "Success"
    pod = kubeapi.get("v1", "Pod", "job")
    assert pod["spec"]["nodeName"] == "gpu-1" and pod["metadata"]["annotations"] == {"nvke.io/gpus": "GPU-1"}
    assert pod["status"]["phase"] == "Running"  # the kubelet took it
    with pytest.raises(ApiException) as caught:
        core.create_namespaced_pod_binding("job", "default", binding, _preload_content=False)
    assert caught.value.status == 409
    assert json.loads(caught.value.body)["message"] == (
        'Operation cannot be fulfilled on pods/binding "job": pod job is already assigned to node "gpu-1"'
    )
    kubeapi.create({**job, "metadata": {"name": "other"}})
    with pytest.raises(ValueError):  # the typed answer: pydantic finds no target in the Status
        core.create_namespaced_pod_binding("other", "default", {**binding, "metadata": {"name": "other"}})


def test_binding_a_gated_pod_is_a_conflict(kubeapi, kube_client):
    gated = objects.pod("job")
    gated["spec"]["schedulingGates"] = [{"name": "nvke.io/placement"}]
    kubeapi.create(gated)
    binding = {"metadata": {"name": "job"}, "target": {"kind": "Node", "name": "gpu-1"}}
    with pytest.raises(ApiException) as caught:
        client.CoreV1Api(kube_client).create_namespaced_pod_binding(
            "job", "default", binding, _preload_content=False
        )
    assert caught.value.status == 409 and "non-empty .spec.schedulingGates" in caught.value.body
