"""The GPU stack on a Cluster API cluster: Helm charts that Cluster API's add-on provider for Helm
(CAAPH, addons.cluster.x-k8s.io) installs. One HelmChartProxy per chart and cluster, selecting that
cluster alone and owned by its Cluster (deleted with it); CAAPH makes a HelmReleaseProxy for it, whose
Ready condition says how the install went.

The GPU Operator's chart brings Node Feature Discovery, the container toolkit and the DCGM exporter as
its operands, at the versions that chart pins; NVIDIA's DRA driver is a chart of its own, which takes
the device plugin's place (see CHARTS). Drivers come from the NVIDIADriver objects NVKE writes per pool,
as on an attached cluster (docs/operations.md), so the operator's own default driver is off."""

from dataclasses import dataclass, field
from typing import Any

from nvke.providers.kubernetes.gpus import POOL_LABEL

NVIDIA_CHARTS = "https://helm.ngc.nvidia.com/nvidia"


@dataclass(frozen=True)
class Chart:
    name: str  # the chart's, its release's and (after the cluster's key) its HelmChartProxy's
    namespace: str  # where it is released in the cluster
    addons: tuple[str, ...]  # the catalog add-ons it installs (clusters/addons.py); the first is the chart
    values: dict[str, Any] = field(default_factory=dict)
    repository: str = NVIDIA_CHARTS


# A pool's nodes carry NVKE's `nvke.io/pool` NoSchedule taint (manifests.config_template): the node
# agents of the GPU stack must tolerate it besides the charts' own defaults, or they never run there.
_GPU_NODES = [
    {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"},
    {"key": POOL_LABEL, "operator": "Exists", "effect": "NoSchedule"},
]
_CONTROL_PLANE = [
    {"key": "node-role.kubernetes.io/control-plane", "operator": "Exists", "effect": "NoSchedule"}
]

# NVKE allocates every GPU of a Cluster API cluster (Kubernetes 1.34+) as a DRA device, so the DRA driver
# publishes them and the GPU Operator's device plugin stays off: the DRA driver's chart refuses to render
# with its GPU resources on unless `gpuResourcesEnabledOverride` says no device plugin shares their nodes
# (its templates/validation.yaml), and both advertising the same GPUs would let kube-scheduler hand a GPU
# out twice. The catalog's device plugin add-on is therefore reported by the DRA driver's release.
# The kubelet plugin's MPSSupport and TimeSlicingSettings gates (alpha, off by default) are on: it
# refuses a GpuConfig with MPS or time-slicing without them, and the gates are chart-wide (one
# DaemonSet), so a pool of either mode added later finds them on.
DRA_FEATURE_GATES = {"MPSSupport": True, "TimeSlicingSettings": True}

CHARTS = (
    Chart(
        "gpu-operator",
        "gpu-operator",
        ("gpu-operator", "node-feature-discovery", "nvidia-container-toolkit", "dcgm-exporter"),
        {
            "driver": {"nvidiaDriverCRD": {"enabled": True, "deployDefaultCR": False}},
            "devicePlugin": {"enabled": False},
            "daemonsets": {"tolerations": _GPU_NODES},
            "node-feature-discovery": {"worker": {"tolerations": _CONTROL_PLANE + _GPU_NODES}},
        },
    ),
    # The driver's files are where the GPU Operator's driver container puts them.
    Chart(
        "nvidia-dra-driver-gpu",
        "nvidia-dra-driver-gpu",
        ("nvidia-dra-driver-gpu", "nvidia-device-plugin"),
        {
            "nvidiaDriverRoot": "/run/nvidia/driver",
            "gpuResourcesEnabledOverride": True,
            "featureGates": DRA_FEATURE_GATES,
            "kubeletPlugin": {"tolerations": _GPU_NODES},
        },
    ),
)

CHART_OF = {addon: chart for chart in CHARTS for addon in chart.addons}
