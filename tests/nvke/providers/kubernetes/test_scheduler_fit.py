"""NVKE binds a `schedulerName: nvke` pod only where the node's kubelet will admit it: CPU, memory, pods
and advertised extended resources beside the pods bound there, node affinity and NoSchedule/NoExecute
taints (nvke/providers/kubernetes/fit.py). On the strict stand-in, whose kubelet sets a pod it refuses
Failed with the kubelet's reason (tests/kubeapi/kubelet.py): a node full on CPU leaves the pod pending
with the reason and nothing Failed; a pod the kubelet still refused releases its claim, says so, and its
replacement is not bound to that node again."""

import datetime

import pytest

from claims.models import Claim
from claims.workloads import sync_workloads
from nvke.agent import allocation
from nvke.providers.kubernetes import dra, fit, records
from tests.kubeapi import objects
from tests.kubeapi.server import FakeKubeApi

from .test_scheduler import gpu_pod, pod, reasons

pytestmark = pytest.mark.django_db
NODE = "a10-0"


@pytest.fixture
def server():
    with FakeKubeApi(version="1.34.2") as api:
        objects.gpu_operator(api)
        api.create(records.crd())
        api.create(objects.gpu_node(NODE, product="NVIDIA-A10", count=1, memory_mib=23028))
        api.create(objects.namespace("ml", {dra.MANAGED: "true"}))
        api.settle()
        yield api


@pytest.fixture
def attached(server, attach, sharing_pool):
    cluster = attach(server)
    sharing_pool(cluster, "time-slicing")
    return cluster


def with_cpu(pod: dict, cpu: str, owner: dict | None = None) -> dict:
    pod["spec"]["containers"][0].setdefault("resources", {})["requests"] = {"cpu": cpu}
    if owner:
        pod["metadata"]["ownerReferences"] = [owner]
    return pod


def failed(server) -> list[str]:
    return [p["metadata"]["name"] for p in server.list("v1", "Pod", "ml") if p["status"]["phase"] == "Failed"]


def test_a_node_full_on_cpu_leaves_the_pod_pending_with_the_reason_and_no_failed_loop(server, attached):
    hog = objects.pod("hog", namespace="default", node=NODE)  # not NVKE's: bound by another scheduler
    hog["spec"]["tolerations"] = [dict(dra.POOL_TOLERATION)]
    server.create(with_cpu(hog, "207"))
    assert pod(server, "hog", "default")["status"]["phase"] == "Running"
    server.create(with_cpu(gpu_pod("train", "8Gi", 70), "2"))

    for _ in range(2):  # a second pass changes nothing: no bind, no Failed pod, no new claim
        sync_workloads(attached.pk)

    assert not pod(server, "train")["spec"].get("nodeName") and failed(server) == []
    claim = Claim.objects.get(name="train")
    why = "the node cannot take the pod: Insufficient cpu: the pod requests 2, 207 of 208 allocatable"
    assert claim.workload["state"] == "waiting" and why in claim.workload["message"]
    assert claim.workload["message"].startswith("NVKE placed its GPU claim on GPU-")
    assert f"on node {NODE}" in claim.workload["message"]
    assert [m for r, m in reasons(server, "train") if r == "FailedScheduling"] == [claim.workload["message"]]

    server.delete("v1", "Pod", "hog", "default")
    sync_workloads(attached.pk)

    placed = pod(server, "train")
    assert placed["spec"]["nodeName"] == NODE and placed["status"]["phase"] == "Running"
    assert Claim.objects.get(name="train").workload["state"] == "allocated"


def test_a_pod_the_kubelet_refused_releases_its_claim_and_its_replacement_keeps_off_that_node(
    server, attached, django_capture_on_commit_callbacks
):
    owner = {
        "apiVersion": "apps/v1",
        "kind": "ReplicaSet",
        "name": "web-5d8",
        "uid": "rs-1",
        "controller": True,
    }
    server.actors.kubelet = False  # bound while the kubelet is away; the node shrinks meanwhile
    server.create(with_cpu(gpu_pod("web-1", "2Gi", 20), "8", owner))
    sync_workloads(attached.pk)
    assert pod(server, "web-1")["spec"]["nodeName"] == NODE
    node = server.get("v1", "Node", NODE)
    allocatable = dict(node["status"]["allocatable"])
    server.update({**node, "status": {**node["status"], "allocatable": {**allocatable, "cpu": "4"}}})
    server.actors.kubelet = True
    server.settle()
    refused = pod(server, "web-1")["status"]
    assert (refused["phase"], refused["reason"]) == ("Failed", "OutOfcpu")  # the stand-in kubelet's verdict

    with django_capture_on_commit_callbacks(execute=True):
        sync_workloads(attached.pk)

    assert not Claim.objects.filter(name="web-1").exists()  # its GPU is free again
    ((released,),) = [(m,) for r, m in reasons(server, "web-1") if r == "GPUClaimReleased"]
    assert f"The kubelet on {NODE} refused the pod (OutOfcpu: Pod was rejected: Node didn't have" in released

    assert fit.NODE_STATE in pod(server, "web-1")["metadata"]["annotations"]  # the node as it was seen

    # The node has not changed since: its ReplicaSet's next pod is kept off it, whatever it asks.
    server.create(with_cpu(gpu_pod("web-2", "2Gi", 20), "1", owner))
    sync_workloads(attached.pk)
    sync_workloads(attached.pk)
    assert not pod(server, "web-2")["spec"].get("nodeName") and failed(server) == ["web-1"]
    message = Claim.objects.get(name="web-2").workload["message"]
    assert "the kubelet there refused web-1 (OutOfcpu: Pod was rejected:" in message
    assert message.endswith("or until the node changes.")
    assert [m for r, m in reasons(server, "web-2") if r == "FailedScheduling"] == [message]
    server.create(with_cpu(gpu_pod("batch", "2Gi", 20), "1"))  # another owner: the node is fine for it
    sync_workloads(attached.pk)
    assert pod(server, "batch")["spec"]["nodeName"] == NODE

    # The node is back as it was: changed since the refusal, it may take web-2.
    node = server.get("v1", "Node", NODE)
    server.update({**node, "status": {**node["status"], "allocatable": allocatable}})
    sync_workloads(attached.pk)
    assert pod(server, "web-2")["spec"]["nodeName"] == NODE
    assert pod(server, "web-2")["status"]["phase"] == "Running"


# ---- the checks themselves -----------------------------------------------------------------------------


def node(taints=(), labels=None, **allocatable) -> dict:
    return {
        "metadata": {"name": "n", "labels": labels or {}},
        "spec": {"taints": list(taints)},
        "status": {"allocatable": {"cpu": "8", "memory": "32Gi", "pods": "110", **allocatable}},
    }


def a_pod(uid="p", **spec) -> dict:
    container = {"name": "main", "resources": spec.pop("resources", {})}
    return {
        "metadata": {"name": uid, "namespace": "ml", "uid": uid},
        "spec": {"containers": [container], **spec},
    }


def test_the_fit_follows_the_kubelet_and_kube_scheduler():
    taint = {"key": "maintenance", "value": "yes", "effect": "NoExecute"}
    assert fit.misfit(a_pod(), node([taint]), []) == "node(s) had untolerated taint {maintenance: yes}"
    tolerating = a_pod(tolerations=[{"key": "maintenance", "operator": "Exists"}])
    assert fit.misfit(tolerating, node([taint]), []) == ""
    assert fit.misfit(a_pod(), node([{**taint, "effect": "PreferNoSchedule"}]), []) == ""

    selector = a_pod(nodeSelector={"zone": "a"})
    assert fit.misfit(selector, node(labels={"zone": "b"}), []) == (
        "node(s) didn't match Pod's node affinity/selector"
    )
    term = {"matchExpressions": [{"key": "gpu-count", "operator": "Gt", "values": ["4"]}]}
    affinity = {
        "nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [term]}}
    }
    assert fit.misfit(a_pod(affinity=affinity), node(labels={"gpu-count": "8"}), []) == ""
    assert fit.misfit(a_pod(affinity=affinity), node(labels={"gpu-count": "2"}), []) != ""

    # An extended resource the node does not advertise is dropped (as the kubelet does); one it does counts.
    share = {"limits": {"nvidia.com/gpu-memory": "4Gi", allocation.RESOURCE: "1"}}
    assert fit.misfit(a_pod(resources=share), node(), []) == ""
    full = [a_pod(f"o{i}", resources={"limits": {allocation.RESOURCE: "1"}}) for i in range(2)]
    assert fit.misfit(a_pod(resources=share), node(**{allocation.RESOURCE: "2"}), full).startswith(
        f"Insufficient {allocation.RESOURCE}: the pod requests 1, 2 of 2"
    )
    memory = a_pod(resources={"requests": {"memory": "20Gi"}}, initContainers=[])
    others = [a_pod("o", resources={"requests": {"memory": "16Gi"}})]
    assert fit.misfit(memory, node(), others).startswith(
        "Insufficient memory: the pod requests 20Gi, 16Gi of 32Gi"
    )
    finished = [{**others[0], "status": {"phase": "Succeeded"}}]
    assert fit.misfit(memory, node(), finished) == ""
    assert (
        fit.misfit(a_pod(), node(pods="1"), [a_pod("o")]) == "Too many pods: 1 of 1 allowed are bound there"
    )


def test_a_refusal_is_remembered_for_a_while_by_the_pods_owner():
    now = datetime.datetime(2026, 12, 6, 3, 0, tzinfo=datetime.UTC)
    refused = a_pod("web-1", nodeName="n")
    refused["metadata"].update(
        creationTimestamp="2026-12-06T02:55:00Z",
        ownerReferences=[{"uid": "rs-1", "controller": True}],
    )
    refused["status"] = {"phase": "Failed", "reason": "OutOfcpu", "message": "Pod was rejected: no cpu"}
    evicted = {**refused, "status": {"phase": "Failed", "reason": "Evicted"}}  # ran, then evicted: no refusal
    nodes = {"n": node()}
    held = fit.refusals([refused, evicted], nodes, now)
    assert held == {("ml", "rs-1"): {"n": "web-1 (OutOfcpu: Pod was rejected: no cpu)"}}
    later = now + datetime.timedelta(seconds=fit.HOLD_S)
    assert fit.refusals([refused], nodes, later) == {}
    refused["metadata"]["annotations"] = {fit.NODE_STATE: fit.node_state(nodes["n"])}  # as NVKE saw it
    assert fit.refusals([refused], nodes, now) == held
    grown = {"n": node(cpu="16")}  # its allocatable changed since
    assert fit.refusals([refused], grown, now) == {}
