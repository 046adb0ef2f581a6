"""The GPU stack every NVKE cluster runs, installed at provisioning, in install order.

Versions are pinned here (one place to bump them); `display` and `role` are what the UI and docs show.
NVKE installs no GPU driver itself: the GPU Operator's driver manager does, on the nodes (see
reference/peers.md); node pools choose the driver version, the operator carries it out."""

from dataclasses import dataclass


@dataclass(frozen=True)
class Addon:
    name: str
    version: str
    display: str
    role: str


CATALOG: tuple[Addon, ...] = (
    Addon(
        "node-feature-discovery", "v0.17.3", "Node Feature Discovery", "Labels nodes with their PCI devices"
    ),
    Addon(
        "gpu-operator",
        "v25.3.4",
        "NVIDIA GPU Operator",
        "Driver manager and lifecycle of the GPU stack on each node",
    ),
    Addon(
        "nvidia-container-toolkit",
        "v1.17.8",
        "NVIDIA Container Toolkit",
        "GPU access for the container runtime",
    ),
    Addon(
        "nvidia-device-plugin",
        "v0.17.3",
        "NVIDIA device plugin",
        "Advertises nvidia.com/gpu and MIG resources",
    ),
    Addon(
        "nvidia-dra-driver-gpu",
        "v25.3.2",
        "NVIDIA DRA driver",
        "Publishes GPUs as DRA ResourceSlices (gpu.nvidia.com)",
    ),
    Addon("dcgm-exporter", "4.2.3-4.3.1", "DCGM exporter", "GPU metrics for Prometheus"),
)

BY_NAME = {addon.name: addon for addon in CATALOG}


def versions() -> dict[str, str]:
    """`{name: version}` in install order, as the provider takes it."""
    return {addon.name: addon.version for addon in CATALOG}
