"""The Cluster API objects of a cluster and of a GPU pool, built from NVKE's names and specs (pure).

A cluster `<key>` is a Cluster referencing an infrastructure cluster made from the operator's cluster
template and a KubeadmControlPlane `<key>-control-plane`. A pool `<pool>` is, all named `<key>-<pool>`:
a KubeadmConfigTemplate whose kubelets register with the pool's labels and NVKE's NoSchedule taint (what
the Kubernetes provider's operations select a pool's nodes by), a MachineDeployment on the GPU model's
machine template with the cluster autoscaler's size annotations, and a MachineHealthCheck (auto-repair).
Field names are Cluster API v1beta2's (cluster.x-k8s.io, controlplane.cluster.x-k8s.io and
bootstrap.cluster.x-k8s.io, all v1beta2)."""

from typing import Any

import yaml

from nvke.providers.base import PoolSpec
from nvke.providers.kubernetes.gpus import NODE_IMAGE_LABEL as NODE_IMAGE
from nvke.providers.kubernetes.gpus import POOL_LABEL

from .addons import Chart
from .management import TemplateRef

VERSION = "v1beta2"
CORE = f"cluster.x-k8s.io/{VERSION}"
CONTROL_PLANE = f"controlplane.cluster.x-k8s.io/{VERSION}"
BOOTSTRAP = f"bootstrap.cluster.x-k8s.io/{VERSION}"
ADDONS = "addons.cluster.x-k8s.io/v1alpha1"  # Cluster API's add-on provider for Helm (CAAPH)
CHART_PROXY = "helmreleaseproxy.addons.cluster.x-k8s.io/helmchartproxy-name"  # on a HelmReleaseProxy
CLUSTER_NAME = "cluster.x-k8s.io/cluster-name"
DEPLOYMENT_NAME = "cluster.x-k8s.io/deployment-name"  # Cluster API labels a MachineDeployment's Machines
NVKE_CLUSTER = "nvke.io/cluster"  # on every object NVKE makes: the cluster's key
POOL = POOL_LABEL
GPU_MODEL = "nvke.io/gpu-model"
REMEDIATE = "cluster.x-k8s.io/remediate-machine"  # a Machine a MachineHealthCheck is to replace
DELETE_MACHINE = "cluster.x-k8s.io/delete-machine"  # removed first when its MachineSet shrinks
REPLACES = "nvke.io/replaces"  # on a Machine: the node whose replacement it is (ClusterAPIOperations)
AUTOSCALER_MIN = "cluster.x-k8s.io/cluster-api-autoscaler-node-group-min-size"
AUTOSCALER_MAX = "cluster.x-k8s.io/cluster-api-autoscaler-node-group-max-size"
# A node that stops reporting, or never joins, is replaced; a GPU node's first boot installs its driver.
NODE_STARTUP_TIMEOUT_S = 1800
UNHEALTHY_AFTER_S = 300
MAX_UNHEALTHY = "40%"  # more unhealthy at once looks like an outage: remediation waits for a person


def control_plane_name(key: str) -> str:
    return f"{key}-control-plane"


def pool_name(key: str, pool: str) -> str:
    return f"{key}-{pool}"


def _meta(name: str, namespace: str, labels: dict[str, str], **extra: Any) -> dict[str, Any]:
    return {"name": name, "namespace": namespace, "labels": labels, **extra}


def infrastructure_cluster(key: str, namespace: str, template: dict[str, Any]) -> dict[str, Any]:
    """The cluster's infrastructure object: the operator's cluster template's spec, as ClusterClass would
    make it (kind FooClusterTemplate gives a FooCluster)."""
    return {
        "apiVersion": template["apiVersion"],
        "kind": template["kind"].removesuffix("Template"),
        "metadata": _meta(key, namespace, {NVKE_CLUSTER: key}),
        "spec": template["spec"]["template"]["spec"],
    }


def control_plane(
    key: str, namespace: str, replicas: int, release: str, machines: TemplateRef
) -> dict[str, Any]:
    return {
        "apiVersion": CONTROL_PLANE,
        "kind": "KubeadmControlPlane",
        "metadata": _meta(control_plane_name(key), namespace, {NVKE_CLUSTER: key}),
        "spec": {
            "replicas": replicas,
            "version": release,
            "machineTemplate": {"spec": {"infrastructureRef": machines.ref}},
            # v1beta2 refuses an empty kubeadmConfigSpec (minProperties: 1): the control plane's kubelets,
            # the first and those that join, register with the cluster's key as pool nodes do.
            "kubeadmConfigSpec": {
                part: {"nodeRegistration": {"kubeletExtraArgs": [_node_labels({NVKE_CLUSTER: key})]}}
                for part in ("initConfiguration", "joinConfiguration")
            },
        },
    }


def cluster(key: str, namespace: str, infrastructure: dict[str, Any]) -> dict[str, Any]:
    group = infrastructure["apiVersion"].partition("/")[0]
    return {
        "apiVersion": CORE,
        "kind": "Cluster",
        "metadata": _meta(key, namespace, {NVKE_CLUSTER: key}),
        "spec": {
            "infrastructureRef": {"apiGroup": group, "kind": infrastructure["kind"], "name": key},
            "controlPlaneRef": {
                "apiGroup": CONTROL_PLANE.partition("/")[0],
                "kind": "KubeadmControlPlane",
                "name": control_plane_name(key),
            },
        },
    }


def chart_proxy_name(key: str, chart: Chart) -> str:
    return f"{key}-{chart.name}"


def helm_chart_proxy(
    key: str, namespace: str, chart: Chart, version: str, owner: dict[str, Any]
) -> dict[str, Any]:
    """The chart at `version` for the cluster `key` alone (its Cluster carries nvke.io/cluster), owned
    by its Cluster. CAAPH waits for the release's resources to be ready before it calls it Ready."""
    return {
        "apiVersion": ADDONS,
        "kind": "HelmChartProxy",
        "metadata": _meta(
            chart_proxy_name(key, chart), namespace, {NVKE_CLUSTER: key}, ownerReferences=_owned_by(owner)
        ),
        "spec": {
            "clusterSelector": {"matchLabels": {NVKE_CLUSTER: key}},
            "repoURL": chart.repository,
            "chartName": chart.name,
            "version": version,
            "releaseName": chart.name,
            "namespace": chart.namespace,
            "valuesTemplate": yaml.safe_dump(chart.values, sort_keys=True) if chart.values else "",
            "options": {"wait": True, "timeout": "15m0s", "install": {"createNamespace": True}},
        },
    }


def _pool_labels(spec: PoolSpec) -> dict[str, str]:
    return {CLUSTER_NAME: spec.cluster, NVKE_CLUSTER: spec.cluster, POOL: spec.name}


def _owned_by(owner: dict[str, Any]) -> list[dict[str, Any]]:
    """Owned by the Cluster, so Kubernetes' garbage collector removes it with the cluster."""
    meta = owner["metadata"]
    return [
        {"apiVersion": owner["apiVersion"], "kind": owner["kind"], "name": meta["name"], "uid": meta["uid"]}
    ]


def _node_labels(labels: dict[str, str]) -> dict[str, str]:
    """The kubelet argument that registers a node with `labels`."""
    return {"name": "node-labels", "value": ",".join(f"{k}={v}" for k, v in sorted(labels.items()))}


def config_template(spec: PoolSpec, namespace: str, owner: dict[str, Any]) -> dict[str, Any]:
    registration = {
        "kubeletExtraArgs": [_node_labels({**spec.labels, POOL: spec.name})],
        "taints": [{"key": POOL, "value": spec.name, "effect": "NoSchedule"}],
    }
    name = pool_name(spec.cluster, spec.name)
    return {
        "apiVersion": BOOTSTRAP,
        "kind": "KubeadmConfigTemplate",
        "metadata": _meta(name, namespace, _pool_labels(spec), ownerReferences=_owned_by(owner)),
        "spec": {"template": {"spec": {"joinConfiguration": {"nodeRegistration": registration}}}},
    }


def machine_deployment(
    spec: PoolSpec, namespace: str, replicas: int, release: str, machines: TemplateRef, image: str = ""
) -> dict[str, Any]:
    """`image`: the catalog image the machine template boots (its nvke.io/node-image label), which the
    pool's Machines then carry; "" the infrastructure's own."""
    name = pool_name(spec.cluster, spec.name)
    labels = _pool_labels(spec)
    machine_labels = {**labels, GPU_MODEL: spec.gpu_model, **({NODE_IMAGE: image} if image else {})}
    metadata = _meta(name, namespace, labels)
    if spec.max_nodes:
        metadata["annotations"] = autoscaler_bounds(spec)
    return {
        "apiVersion": CORE,
        "kind": "MachineDeployment",
        "metadata": metadata,
        "spec": {
            "clusterName": spec.cluster,
            "replicas": replicas,
            # A changed template replaces a machine only when NVKE deletes it, after draining it its own
            # way (PodDisruptionBudgets, training-aware deferral, windows): Cluster API never rolls a pool.
            "rollout": {"strategy": {"type": "OnDelete"}},
            "selector": {"matchLabels": labels},
            "template": {
                "metadata": {"labels": machine_labels},
                "spec": {
                    "clusterName": spec.cluster,
                    "version": release,
                    "bootstrap": {
                        "configRef": {
                            "apiGroup": BOOTSTRAP.partition("/")[0],
                            "kind": "KubeadmConfigTemplate",
                            "name": name,
                        }
                    },
                    "infrastructureRef": machines.ref,
                },
            },
        },
    }


def autoscaler_bounds(spec: PoolSpec) -> dict[str, str]:
    return {AUTOSCALER_MIN: str(spec.min_nodes), AUTOSCALER_MAX: str(spec.max_nodes)}


def health_check(spec: PoolSpec, namespace: str, owner: dict[str, Any]) -> dict[str, Any]:
    unhealthy = [
        {"type": "Ready", "status": status, "timeoutSeconds": UNHEALTHY_AFTER_S}
        for status in ("Unknown", "False")
    ]
    return {
        "apiVersion": CORE,
        "kind": "MachineHealthCheck",
        "metadata": _meta(
            pool_name(spec.cluster, spec.name),
            namespace,
            _pool_labels(spec),
            ownerReferences=_owned_by(owner),
        ),
        "spec": {
            "clusterName": spec.cluster,
            "selector": {"matchLabels": _pool_labels(spec)},
            "checks": {
                "nodeStartupTimeoutSeconds": NODE_STARTUP_TIMEOUT_S,
                "unhealthyNodeConditions": unhealthy,
            },
            "remediation": {"triggerIf": {"unhealthyLessThanOrEqualTo": MAX_UNHEALTHY}},
        },
    }
