"""The stand-in's kubelet admission, NVIDIA's kubelet plugin preparing claims, the resource claim
controller's generated claims, and the DRA fields each minor serves."""

import pytest

from tests.kubeapi import objects
from tests.kubeapi.server import FakeKubeApi


def status(server, name: str) -> dict:
    return server.get("v1", "Pod", name)["status"]


def events(server, name: str) -> list[tuple[str, str]]:
    return [
        (e["reason"], e["message"]) for e in server.list("v1", "Event") if e["involvedObject"]["name"] == name
    ]


def test_the_kubelet_refuses_what_does_not_fit_and_drops_extended_resources_it_does_not_know(kubeapi):
    kubeapi.create(objects.cpu_node("cpu-1"))
    unknown = objects.pod("fraction", node="cpu-1")
    unknown["spec"]["containers"][0]["resources"] = {"limits": {"nvidia.com/gpu-memory": "4Gi"}}
    kubeapi.create(unknown)
    assert status(kubeapi, "fraction")["phase"] == "Running"  # dropped, not refused
    big = objects.pod("big", node="cpu-1")
    big["spec"]["containers"][0]["resources"] = {"requests": {"cpu": "17"}}
    kubeapi.create(big)
    assert (status(kubeapi, "big")["phase"], status(kubeapi, "big")["reason"]) == ("Failed", "OutOfcpu")
    assert "requested: 17, used: 0, capacity: 16" in status(kubeapi, "big")["message"]
    elsewhere = objects.pod("elsewhere", node="cpu-1")
    elsewhere["spec"]["nodeSelector"] = {"nvidia.com/gpu.present": "true"}
    kubeapi.create(elsewhere)
    assert status(kubeapi, "elsewhere")["reason"] == "NodeAffinity"
    kubeapi.patch_merge(
        "v1", "Node", "cpu-1", {"spec": {"taints": [{"key": "maintenance", "effect": "NoExecute"}]}}
    )
    kubeapi.create(objects.pod("late", node="cpu-1"))
    assert status(kubeapi, "late")["reason"] == "TaintToleration"
    assert status(kubeapi, "fraction")["phase"] == "Running"  # admitted before: the taint manager's work


def allocated(server, name: str, config: dict | None = None, device: str = "gpu-0") -> dict:
    result = {"request": "gpu", "driver": "gpu.nvidia.com", "pool": "gpu-1", "device": device}
    allocation: dict = {"devices": {"results": [result]}}
    if config is not None:
        opaque = {"driver": "gpu.nvidia.com", "parameters": config}
        allocation["devices"]["config"] = [{"source": "FromClaim", "requests": ["gpu"], "opaque": opaque}]
    request = {"name": "gpu", "exactly": {"deviceClassName": "gpu.nvidia.com"}}
    body = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": name},
        "spec": {"devices": {"requests": [request]}},
    }
    server.create(body)
    return server.patch_merge(
        "resource.k8s.io/v1", "ResourceClaim", name, {"status": {"allocation": allocation}}
    )


def on_gpu_1(server, name: str, claim: str, reserve: bool = True) -> None:
    pod = objects.pod(name, node="gpu-1")
    pod["spec"]["resourceClaims"] = [{"name": "gpu", "resourceClaimName": claim}]
    pod["spec"]["containers"][0]["resources"] = {"claims": [{"name": "gpu"}]}
    uid = server.create(pod)["metadata"]["uid"]
    if reserve:
        reserved = {"status": {"reservedFor": [{"resource": "pods", "name": name, "uid": uid}]}}
        server.patch_merge("resource.k8s.io/v1", "ResourceClaim", claim, reserved)


def prepare_failures(server, name: str) -> list[str]:
    """What the plugin said (the pods are reserved just after they are made: "not allowed" comes first)."""
    return [m for _, m in events(server, name) if "NodePrepareResources failed" in m]


MPS = {
    "apiVersion": "resource.nvidia.com/v1beta1",
    "kind": "GpuConfig",
    "sharing": {"strategy": "MPS", "mpsConfig": {"defaultActiveThreadPercentage": 50}},
}


@pytest.fixture
def gpu_1(kubeapi):
    node = kubeapi.create(objects.gpu_node("gpu-1", count=2))
    kubeapi.create(objects.resource_slice(node, 2))
    return kubeapi


def test_a_pod_its_claim_is_not_reserved_for_does_not_start(gpu_1):
    allocated(gpu_1, "plain")
    on_gpu_1(gpu_1, "unreserved", "plain", reserve=False)
    assert status(gpu_1, "unreserved")["phase"] == "Pending"
    assert (
        status(gpu_1, "unreserved")["containerStatuses"][0]["state"]["waiting"]["reason"]
        == "ContainerCreating"
    )
    ((reason, message),) = events(gpu_1, "unreserved")
    assert (
        reason == "FailedPrepareDynamicResources" and "is not allowed to use ResourceClaim plain" in message
    )


def test_the_plugin_refuses_mps_until_the_nodes_driver_gate_is_on(gpu_1):
    allocated(gpu_1, "mps", MPS)
    on_gpu_1(gpu_1, "serve", "mps")
    assert status(gpu_1, "serve")["phase"] == "Pending"
    (message,) = prepare_failures(gpu_1, "serve")
    assert (
        '"MPS" is selected as the GPU sharing strategy, but the "MPSSupport" feature gate is not enabled'
        in message
    )
    gpu_1.actors.dra_driver_gates["gpu-1"].add("MPSSupport")
    gpu_1.settle()
    assert status(gpu_1, "serve")["phase"] == "Running"


@pytest.mark.parametrize(
    ("config", "device", "said"),
    [
        ({**MPS, "sharing": {**MPS["sharing"], "mpsConfg": {}}}, "gpu-0", 'unknown field "sharing.mpsConfg"'),
        ({**MPS, "kind": "GPUConfig"}, "gpu-0", 'no kind "GPUConfig" is registered'),
        (None, "gpu-7", 'allocatable not found for device "gpu-7"'),
    ],
)
def test_the_plugin_decodes_strictly_and_looks_the_device_up(gpu_1, config, device, said):
    gpu_1.actors.dra_driver_gates["gpu-1"].add("MPSSupport")
    allocated(gpu_1, "bad", config, device)
    on_gpu_1(gpu_1, "bad-pod", "bad")
    assert status(gpu_1, "bad-pod")["phase"] == "Pending"
    (message,) = prepare_failures(gpu_1, "bad-pod")
    assert said in message


def test_a_generated_claim_of_a_finished_pod_is_deleted(gpu_1):
    allocated(gpu_1, "generated")
    on_gpu_1(gpu_1, "job", "generated")
    pod = gpu_1.get("v1", "Pod", "job")
    owner = {
        "apiVersion": "v1",
        "kind": "Pod",
        "name": "job",
        "uid": pod["metadata"]["uid"],
        "controller": True,
    }
    gpu_1.patch_merge(
        "resource.k8s.io/v1", "ResourceClaim", "generated", {"metadata": {"ownerReferences": [owner]}}
    )
    assert gpu_1.get("resource.k8s.io/v1", "ResourceClaim", "generated") is not None  # reserved, running
    gpu_1.update({**pod, "status": {**pod["status"], "phase": "Succeeded"}})
    assert gpu_1.get("resource.k8s.io/v1", "ResourceClaim", "generated") is None


@pytest.mark.parametrize(
    ("version", "served"), [("1.34.2", False), ("1.35.0", False), ("1.36.0", True), ("1.37.0", True)]
)
def test_consumable_capacity_fields_are_dropped_where_the_gate_is_off(version, served):
    with FakeKubeApi(version) as server:
        node = objects.gpu_node("gpu-1", count=1)
        stored = server.create(objects.resource_slice(node, 1, consumable=True))
        device = stored["spec"]["devices"][0]
        assert ("allowMultipleAllocations" in device, "requestPolicy" in device["capacity"]["memory"]) == (
            served,
            served,
        )
        server.features.set("DRAConsumableCapacity", True)  # the cluster's --feature-gates
        stored = server.update({**stored, "metadata": {**stored["metadata"], "labels": {"a": "b"}}})
        assert ("allowMultipleAllocations" in stored["spec"]["devices"][0]) == served  # as the gate was
        fresh = server.create(
            {**objects.resource_slice(node, 1, consumable=True), "metadata": {"name": "again"}}
        )
        assert fresh["spec"]["devices"][0]["allowMultipleAllocations"] is True
