"""The stand-in's kube-scheduler: gates, cordons, taints, node selectors, resource fit and DRA, at the
minors NVKE targets."""

import pytest

from tests.kubeapi import objects
from tests.kubeapi.server import FakeKubeApi

POOL_TAINT = {"key": "nvke.io/pool", "value": "train", "effect": "NoSchedule"}


@pytest.fixture(params=["1.34.2", "1.36.0"])
def cluster(request):
    """A tainted GPU node with two published GPUs and its DeviceClass, and an untainted CPU node."""
    with FakeKubeApi(request.param) as server:
        gpu = objects.gpu_node("gpu-1", count=2)
        gpu["spec"]["taints"] = [POOL_TAINT]
        server.create(gpu)
        server.create(objects.resource_slice(gpu, 2))
        server.create(objects.device_class())
        server.create(objects.cpu_node("cpu-1"))
        yield server


def placed(server, name: str) -> str | None:
    return server.get("v1", "Pod", name)["spec"].get("nodeName")


def scheduled(server, name: str) -> dict:
    return next(
        c for c in server.get("v1", "Pod", name)["status"]["conditions"] if c["type"] == "PodScheduled"
    )


def claim(name: str = "gpu") -> dict:
    request = {"name": "gpu", "exactly": {"deviceClassName": "gpu.nvidia.com"}}
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": name},
        "spec": {"devices": {"requests": [request]}},
    }


def claiming(name: str, claim_name: str = "gpu", tolerate: bool = True) -> dict:
    pod = objects.pod(name)
    pod["spec"]["resourceClaims"] = [{"name": "gpu", "resourceClaimName": claim_name}]
    pod["spec"]["containers"][0]["resources"] = {"claims": [{"name": "gpu"}]}
    if tolerate:
        pod["spec"]["tolerations"] = [{"key": "nvke.io/pool", "operator": "Exists", "effect": "NoSchedule"}]
    return pod


def test_a_gated_pod_waits_and_another_schedulers_pod_is_left_alone(cluster):
    gated = objects.pod("gated")
    gated["spec"]["schedulingGates"] = [{"name": "nvke.io/placement"}]
    cluster.create(gated)
    theirs = objects.pod("theirs")
    theirs["spec"]["schedulerName"] = "nvke"
    cluster.create(theirs)
    assert placed(cluster, "gated") is None and scheduled(cluster, "gated")["reason"] == "SchedulingGated"
    assert (
        placed(cluster, "theirs") is None and "conditions" not in cluster.get("v1", "Pod", "theirs")["status"]
    )
    cluster.patch_merge("v1", "Pod", "gated", {"spec": {"schedulingGates": None}})
    assert placed(cluster, "gated") == "cpu-1"  # the only node it tolerates
    assert cluster.get("v1", "Pod", "gated")["status"]["phase"] == "Running"


def test_taints_cordons_selectors_and_fit_each_say_why(cluster):
    cluster.patch_merge("v1", "Node", "cpu-1", {"spec": {"unschedulable": True}})
    cluster.create(objects.pod("plain"))
    message = scheduled(cluster, "plain")["message"]
    assert message == (
        "0/2 nodes are available: 1 node(s) had untolerated taint {nvke.io/pool: train}, "
        "1 node(s) were unschedulable."
    )
    selected = objects.pod("selected")
    selected["spec"]["nodeSelector"] = {"nvidia.com/gpu.present": "true"}
    selected["spec"]["tolerations"] = [{"key": "nvke.io/pool", "operator": "Exists", "effect": "NoSchedule"}]
    selected["spec"]["containers"][0]["resources"] = {"requests": {"nvidia.com/gpu": "3"}}
    cluster.create(selected)
    assert "1 Insufficient nvidia.com/gpu" in scheduled(cluster, "selected")["message"]
    cluster.patch_merge("v1", "Node", "cpu-1", {"spec": {"unschedulable": False}})
    assert placed(cluster, "plain") == "cpu-1"
    assert placed(cluster, "selected") is None  # the CPU node fails its selector, the GPU node its fit


def test_kube_scheduler_allocates_an_unallocated_claim_and_reserves_it_at_bind(cluster):
    cluster.create(claim())
    uid = cluster.create(claiming("user"))["metadata"]["uid"]
    assert placed(cluster, "user") == "gpu-1"
    rc = cluster.get("resource.k8s.io/v1", "ResourceClaim", "gpu")
    assert rc["metadata"]["finalizers"] == ["resource.kubernetes.io/delete-protection"]
    assert rc["status"]["allocation"]["devices"]["results"] == [
        {"request": "gpu", "driver": "gpu.nvidia.com", "pool": "gpu-1", "device": "gpu-0"}
    ]
    assert rc["status"]["reservedFor"] == [{"resource": "pods", "name": "user", "uid": uid}]
    assert cluster.get("v1", "Pod", "user")["status"]["phase"] == "Running"
    cluster.delete("v1", "Pod", "user")
    rc = cluster.get("resource.k8s.io/v1", "ResourceClaim", "gpu")  # the claim controller released it
    assert "allocation" not in rc.get("status", {}) and not rc["metadata"].get("finalizers")


def test_postfilter_clears_an_unreserved_allocation_the_pod_cannot_reach(cluster):
    cluster.create(claim())
    allocation = {
        "devices": {
            "results": [{"request": "gpu", "driver": "gpu.nvidia.com", "pool": "gpu-1", "device": "gpu-1"}]
        },
        "nodeSelector": {
            "nodeSelectorTerms": [
                {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["gpu-1"]}]}
            ]
        },
    }
    cluster.patch_merge("resource.k8s.io/v1", "ResourceClaim", "gpu", {"status": {"allocation": allocation}})
    cluster.create(claiming("untolerating", tolerate=False))
    rc = cluster.get("resource.k8s.io/v1", "ResourceClaim", "gpu")
    assert "allocation" not in rc.get("status", {})  # another allocator's work, undone
    assert placed(cluster, "untolerating") is None
    # A claim reserved for another pod is never cleared.
    cluster.delete("v1", "Pod", "untolerating")
    reserved = {"allocation": allocation, "reservedFor": [{"resource": "pods", "name": "x", "uid": "1"}]}
    cluster.actors.kube_scheduler = False
    cluster.patch_merge("resource.k8s.io/v1", "ResourceClaim", "gpu", {"status": reserved})
    cluster.create(objects.pod("x"))  # the claim controller keeps entries of pods that exist: this one's
    uid = cluster.get("v1", "Pod", "x")["metadata"]["uid"]
    reserved["reservedFor"][0]["uid"] = uid
    cluster.patch_merge("resource.k8s.io/v1", "ResourceClaim", "gpu", {"status": reserved})
    cluster.actors.kube_scheduler = True
    cluster.create(claiming("second", tolerate=False))
    assert cluster.get("resource.k8s.io/v1", "ResourceClaim", "gpu")["status"]["allocation"] == allocation


def test_a_claim_generated_from_a_template_is_allocated_and_goes_with_its_finished_pod(cluster):
    template = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaimTemplate",
        "metadata": {"name": "one-gpu"},
        "spec": {"spec": claim()["spec"]},
    }
    pod = claiming("job")
    pod["spec"]["resourceClaims"] = [{"name": "gpu", "resourceClaimTemplateName": "one-gpu"}]
    cluster.create(pod)
    assert "ResourceClaims to be generated" in scheduled(cluster, "job")["message"]  # no template yet
    cluster.create(template)
    cluster.settle()
    job = cluster.get("v1", "Pod", "job")
    (entry,) = job["status"]["resourceClaimStatuses"]
    generated = cluster.get("resource.k8s.io/v1", "ResourceClaim", entry["resourceClaimName"])
    assert entry["resourceClaimName"].startswith("job-gpu-")
    assert generated["metadata"]["annotations"]["resource.kubernetes.io/pod-claim-name"] == "gpu"
    assert generated["metadata"]["ownerReferences"][0]["uid"] == job["metadata"]["uid"]
    assert (job["spec"]["nodeName"], job["status"]["phase"]) == ("gpu-1", "Running")
    cluster.update({**job, "status": {**job["status"], "phase": "Succeeded"}})
    assert cluster.get("resource.k8s.io/v1", "ResourceClaim", entry["resourceClaimName"]) is None
