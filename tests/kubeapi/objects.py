"""Builders of seed objects: GPU nodes with GPU Feature Discovery's labels, DRA ResourceSlices, pods, PDBs,
and the GPU Operator's install (namespace, Deployment, CRDs, ClusterPolicy)."""

from __future__ import annotations

import uuid
from typing import Any

from . import crds

OPERATOR_NAMESPACE = "gpu-operator"
VALIDATOR_IMAGE = "nvcr.io/nvidia/cloud-native/gpu-operator-validator:v25.10.0"
FAMILIES = {
    "H100": "hopper",
    "H200": "hopper",
    "GH200": "hopper",
    "A100": "ampere",
    "B200": "blackwell",
    "L40S": "ada-lovelace",
}


def driver_version_labels(version: str) -> dict[str, str]:
    """GFD's driver labels, current and deprecated, for a version such as 570.133.20."""
    major, minor, revision = ([*version.split("."), "", ""])[:3]
    return {
        "nvidia.com/cuda.driver-version.full": version,
        "nvidia.com/cuda.driver-version.major": major,
        "nvidia.com/cuda.driver-version.minor": minor,
        "nvidia.com/cuda.driver-version.revision": revision,
        "nvidia.com/cuda.driver.major": major,
        "nvidia.com/cuda.driver.minor": minor,
        "nvidia.com/cuda.driver.rev": revision,
    }


def namespace(name: str, labels: dict[str, str] | None = None) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name, "labels": labels or {}}}


def gpu_node(
    name: str,
    *,
    product: str = "NVIDIA-H100-80GB-HBM3",
    count: int = 8,
    memory_mib: int = 81559,
    driver: str = "570.133.20",
    ready: bool = True,
    unschedulable: bool = False,
    labels: dict[str, str] | None = None,
) -> dict[str, Any]:
    family = next((f for model, f in FAMILIES.items() if f"-{model}-" in f"-{product}-"), "hopper")
    node_labels = {
        "kubernetes.io/hostname": name,
        "kubernetes.io/os": "linux",
        "kubernetes.io/arch": "amd64",
        "feature.node.kubernetes.io/pci-10de.present": "true",
        "nvidia.com/gpu.present": "true",
        "nvidia.com/gpu.product": product,
        "nvidia.com/gpu.count": str(count),
        "nvidia.com/gpu.memory": str(memory_mib),
        "nvidia.com/gpu.replicas": "1",
        "nvidia.com/gpu.family": family,
        "nvidia.com/gpu.sharing-strategy": "none",
        "nvidia.com/mig.strategy": "none",
        **driver_version_labels(driver),
        **(labels or {}),
    }
    resources = {"cpu": "208", "memory": "2113856828Ki", "nvidia.com/gpu": str(count), "pods": "110"}
    ready_condition = {
        "type": "Ready",
        "status": "True" if ready else "False",
        "reason": "KubeletReady" if ready else "KubeletNotReady",
        "message": "kubelet is posting ready status" if ready else "container runtime is down",
        "lastHeartbeatTime": "2026-01-01T00:00:00Z",
        "lastTransitionTime": "2026-01-01T00:00:00Z",
    }
    node_info = {
        "architecture": "amd64",
        "bootID": str(uuid.uuid5(uuid.NAMESPACE_DNS, f"boot.{name}")),
        "containerRuntimeVersion": "containerd://2.1.4",
        "kernelVersion": "6.8.0-60-generic",
        "kubeProxyVersion": "",
        "kubeletVersion": "v1.34.2",
        "machineID": uuid.uuid5(uuid.NAMESPACE_DNS, f"machine.{name}").hex,
        "operatingSystem": "linux",
        "osImage": "Ubuntu 22.04.5 LTS",
        "systemUUID": str(uuid.uuid5(uuid.NAMESPACE_DNS, f"system.{name}")),
    }
    node: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": node_labels},
        "spec": {},
        "status": {
            "capacity": resources,
            "allocatable": resources,
            "conditions": [ready_condition],
            "addresses": [{"type": "Hostname", "address": name}],
            "nodeInfo": node_info,
        },
    }
    if unschedulable:
        node["spec"]["unschedulable"] = True
    return node


def cpu_node(name: str) -> dict[str, Any]:
    """A node without GPUs (GPU Feature Discovery labels none), as every cluster has for its other pods."""
    node = gpu_node(name)
    node["metadata"]["labels"] = {
        k: v for k, v in node["metadata"]["labels"].items() if k.startswith("kubernetes.io/")
    }
    resources = {"cpu": "16", "memory": "65851340Ki", "pods": "110"}
    node["status"]["capacity"] = node["status"]["allocatable"] = resources
    return node


def gpu_uuid(node: str, index: int) -> str:
    return f"GPU-{uuid.uuid5(uuid.NAMESPACE_DNS, f'{node}.gpu{index}')}"


def resource_slice(
    node: dict[str, Any] | str, gpus: int = 8, *, generation: int = 1, consumable: bool = False
) -> dict[str, Any]:
    """The NVIDIA DRA driver's slice for a node (a gpu_node() object, or a name for H100 defaults): one pool
    named after the node, devices gpu-<i>. `consumable`: as the driver publishes them with
    `--consumable-shares=memory`: several claims may each consume part of a device's memory, in 1Mi steps."""
    labels = node["metadata"]["labels"] if isinstance(node, dict) else {}
    name = node["metadata"]["name"] if isinstance(node, dict) else node
    product = labels.get("nvidia.com/gpu.product", "NVIDIA-H100-80GB-HBM3").replace("-", " ")
    memory = labels.get("nvidia.com/gpu.memory", "81559")
    driver = labels.get("nvidia.com/cuda.driver-version.full", "570.133.20")
    devices = [
        {
            "name": f"gpu-{i}",
            "attributes": {
                "type": {"string": "gpu"},
                "uuid": {"string": gpu_uuid(name, i)},
                "productName": {"string": product},
                "driverVersion": {"version": driver},
                "index": {"int": i},
            },
            "capacity": {"memory": {"value": f"{memory}Mi"}},
        }
        for i in range(gpus)
    ]
    if consumable:
        for device in devices:
            device["allowMultipleAllocations"] = True
            device["capacity"]["memory"]["requestPolicy"] = {"validRange": {"min": "1Mi", "step": "1Mi"}}
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "metadata": {"name": f"{name}-gpu.nvidia.com"},
        "spec": {
            "driver": "gpu.nvidia.com",
            "nodeName": name,
            "pool": {"name": name, "generation": generation, "resourceSliceCount": 1},
            "devices": devices,
        },
    }


def device_class(name: str = "gpu.nvidia.com") -> dict[str, Any]:
    expression = "device.driver == 'gpu.nvidia.com' && device.attributes['gpu.nvidia.com'].type == 'gpu'"
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "DeviceClass",
        "metadata": {"name": name},
        "spec": {"selectors": [{"cel": {"expression": expression}}]},
    }


def pod(
    name: str,
    *,
    namespace: str = "default",
    node: str | None = None,
    labels: dict[str, str] | None = None,
    annotations: dict[str, str] | None = None,
    gpus: int = 0,
    image: str = "nvcr.io/nvidia/pytorch:25.01-py3",
    owner_kind: str | None = None,
    phase: str | None = None,
) -> dict[str, Any]:
    """A pod; owner_kind adds a controller ownerReference (DaemonSet, ReplicaSet, StatefulSet, Job)."""
    container: dict[str, Any] = {"name": "main", "image": image}
    if gpus:
        container["resources"] = {"limits": {"nvidia.com/gpu": str(gpus)}}
    metadata: dict[str, Any] = {"name": name, "namespace": namespace, "labels": labels or {}}
    if annotations:
        metadata["annotations"] = annotations
    if owner_kind:
        group = "batch/v1" if owner_kind == "Job" else "apps/v1"
        owner = {
            "apiVersion": group,
            "kind": owner_kind,
            "name": f"{name}-owner",
            "uid": str(uuid.uuid4()),
            "controller": True,
        }
        metadata["ownerReferences"] = [owner]
    obj: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": metadata,
        "spec": {"containers": [container]},
    }
    if node:
        obj["spec"]["nodeName"] = node
    if phase:
        obj["status"] = {"phase": phase}
    return obj


def pdb(
    name: str,
    *,
    selector: dict[str, str],
    namespace: str = "default",
    min_available: int | str | None = None,
    max_unavailable: int | str | None = None,
) -> dict[str, Any]:
    spec: dict[str, Any] = {"selector": {"matchLabels": selector}}
    if min_available is not None:
        spec["minAvailable"] = min_available
    if max_unavailable is not None:
        spec["maxUnavailable"] = max_unavailable
    return {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": {"name": name, "namespace": namespace},
        "spec": spec,
    }


def nvidia_driver(
    name: str, *, version: str, node_selector: dict[str, str] | None = None, auto_upgrade: bool = False
) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "driverType": "gpu",
        "repository": "nvcr.io/nvidia",
        "image": "driver",
        "version": version,
        "upgradePolicy": {"autoUpgrade": auto_upgrade},
    }
    if node_selector is not None:
        spec["nodeSelector"] = node_selector
    return {
        "apiVersion": "nvidia.com/v1alpha1",
        "kind": "NVIDIADriver",
        "metadata": {"name": name},
        "spec": spec,
    }


def gpu_operator(
    server, *, use_nvidia_driver_crd: bool = True, driver_version: str = "570.133.20"
) -> dict[str, Any]:
    """Install the GPU Operator's objects into a FakeKubeApi; returns the ClusterPolicy. With the operator
    actor on, NVIDIADrivers then get driver pods (ClusterPolicy spec.driver.useNvidiaDriverCRD must be
    true)."""
    crds.require()
    for path in crds.GPU_OPERATOR:
        server.create(crds.load(path))
    server.create(namespace(OPERATOR_NAMESPACE))
    labels = {"app": "gpu-operator", "app.kubernetes.io/component": "gpu-operator"}
    container = {"name": "gpu-operator", "image": "nvcr.io/nvidia/gpu-operator:v25.10.0"}
    server.create(
        {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": {"name": "gpu-operator", "namespace": OPERATOR_NAMESPACE, "labels": labels},
            "spec": {
                "replicas": 1,
                "selector": {"matchLabels": {"app": "gpu-operator"}},
                "template": {"metadata": {"labels": labels}, "spec": {"containers": [container]}},
            },
            "status": {
                "replicas": 1,
                "readyReplicas": 1,
                "availableReplicas": 1,
                "updatedReplicas": 1,
                "observedGeneration": 1,
            },
        }
    )
    driver = {
        "enabled": True,
        "useNvidiaDriverCRD": use_nvidia_driver_crd,
        "repository": "nvcr.io/nvidia",
        "image": "driver",
        "version": driver_version,
        "upgradePolicy": {"autoUpgrade": True},
    }
    policy = {
        "apiVersion": "nvidia.com/v1",
        "kind": "ClusterPolicy",
        "metadata": {"name": "cluster-policy"},
        "spec": {
            "driver": driver,
            "toolkit": {"enabled": True},
            **{
                n: {}
                for n in (
                    "operator",
                    "daemonsets",
                    "dcgm",
                    "dcgmExporter",
                    "devicePlugin",
                    "gfd",
                    "nodeStatusExporter",
                )
            },
        },
    }
    return server.create(policy)


def coscheduling_crd() -> dict[str, Any]:
    """scheduler-plugins' PodGroup CRD (kubernetes-sigs/scheduler-plugins manifests/coscheduling/crd.yaml),
    its schema trimmed to the fields NVKE reads and tests write."""
    int32 = {"type": "integer", "format": "int32"}
    schema = {
        "type": "object",
        "properties": {
            "apiVersion": {"type": "string"},
            "kind": {"type": "string"},
            "metadata": {"type": "object"},
            "spec": {
                "type": "object",
                "properties": {"minMember": int32, "scheduleTimeoutSeconds": int32},
            },
            "status": {
                "type": "object",
                "properties": {"phase": {"type": "string"}, "running": int32, "failed": int32},
            },
        },
    }
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": "podgroups.scheduling.x-k8s.io"},
        "spec": {
            "group": "scheduling.x-k8s.io",
            "names": {
                "kind": "PodGroup",
                "listKind": "PodGroupList",
                "plural": "podgroups",
                "singular": "podgroup",
            },
            "scope": "Namespaced",
            "versions": [
                {
                    "name": "v1alpha1",
                    "served": True,
                    "storage": True,
                    "schema": {"openAPIV3Schema": schema},
                    "subresources": {"status": {}},
                }
            ],
        },
    }


def coscheduling_pod_group(name: str, namespace: str, min_member: int) -> dict[str, Any]:
    return {
        "apiVersion": "scheduling.x-k8s.io/v1alpha1",
        "kind": "PodGroup",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"minMember": min_member},
    }


def workload_pod_group(name: str, namespace: str, min_count: int) -> dict[str, Any]:
    """Kubernetes' own PodGroup (scheduling.k8s.io/v1alpha2, 1.36+ with GenericWorkload on), gang policy."""
    return {
        "apiVersion": "scheduling.k8s.io/v1alpha2",
        "kind": "PodGroup",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"schedulingPolicy": {"gang": {"minCount": min_count}}},
    }
