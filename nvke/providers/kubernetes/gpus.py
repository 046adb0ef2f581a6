"""GPU nodes as NVKE sees them, read from a Node's GPU feature discovery labels and, where NVIDIA's DRA
driver runs, its ResourceSlices (device names, UUIDs, memory). Pure mapping of the API's JSON shapes."""

import re

from nvke import quantity
from nvke.providers.base import GpuInfo, NodeInfo

POOL_LABEL = "nvke.io/pool"
NODE_IMAGE_LABEL = "nvke.io/node-image"  # where a machine image says which catalog image it is
DRIVER_LABEL = "nvke.io/driver"  # the driver version NVKE wants on the node (an NVIDIADriver selects it)
DRA_DRIVER = "gpu.nvidia.com"
PRODUCT = "nvidia.com/gpu.product"
COUNT = "nvidia.com/gpu.count"
MEMORY = "nvidia.com/gpu.memory"  # MiB
DRIVER_FULL = "nvidia.com/cuda.driver-version.full"
DRIVER_DEPRECATED = (
    "nvidia.com/cuda.driver.major",
    "nvidia.com/cuda.driver.minor",
    "nvidia.com/cuda.driver.rev",
)


def product_label(product_name: str) -> str:
    """GFD's spelling of a product name: spaces become dashes, other characters it strips."""
    return re.sub(r"[^A-Za-z0-9._-]", "", product_name.replace(" ", "-"))


def base_product(label: str) -> str:
    """The product without the suffixes GFD adds for sharing and the single MIG strategy."""
    return re.sub(r"(-SHARED|-MIG-.*)$", "", label)


def driver_version(labels: dict[str, str]) -> str:
    if full := labels.get(DRIVER_FULL):
        return full
    parts = [labels.get(key, "") for key in DRIVER_DEPRECATED]
    return ".".join(p for p in parts if p)


def condition(obj: dict, type_: str) -> bool:
    """Whether an object's status condition of that type is True (Node Ready, Pod Ready, …)."""
    conditions = obj.get("status", {}).get("conditions") or []
    return any(c["type"] == type_ and c["status"] == "True" for c in conditions)


def is_ready(node: dict) -> bool:
    return condition(node, "Ready")


def node_info(node: dict, slices: list[dict]) -> NodeInfo:
    """One Node (and the DRA ResourceSlices published for it) as the provider seam's NodeInfo."""
    meta, status = node["metadata"], node.get("status", {})
    labels = meta.get("labels") or {}
    allocatable = status.get("allocatable") or {}
    return NodeInfo(
        name=meta["name"],
        pool=labels.get(POOL_LABEL, ""),
        ready=is_ready(node),
        unschedulable=bool(node.get("spec", {}).get("unschedulable")),
        driver_version=driver_version(labels),
        cpu_millicores=int(quantity.parse(allocatable.get("cpu") or "0") * 1000),
        memory_mib=int(quantity.parse(allocatable.get("memory") or "0") // 2**20),
        labels=labels,
        gpus=gpus_from_slices(slices) or gpus_from_labels(labels),
        kubelet_version=(status.get("nodeInfo") or {}).get("kubeletVersion", ""),
        node_image=labels.get(NODE_IMAGE_LABEL, ""),
    )


def gpus_from_slices(slices: list[dict]) -> tuple[GpuInfo, ...]:
    """Whole GPUs NVIDIA's DRA driver publishes (`gpu-<minor>` devices; MIG devices are left out)."""
    gpus = []
    for piece in slices:
        for device in piece.get("spec", {}).get("devices") or []:
            attributes = device.get("attributes") or {}
            if not re.fullmatch(r"gpu-\d+", device["name"]):
                continue
            index = attributes.get("index", {}).get("int", int(device["name"].split("-")[1]))
            memory = device.get("capacity", {}).get("memory", {}).get("value", "0")
            gpus.append(
                GpuInfo(
                    index=int(index),
                    uuid=attributes.get("uuid", {}).get("string", ""),
                    memory_mib=int(quantity.parse(memory) // 2**20),
                    healthy=None,  # the kubelet's view says nothing of XIDs: telemetry's verdict stands
                )
            )
    return tuple(sorted(gpus, key=lambda gpu: gpu.index))


def gpus_from_labels(labels: dict[str, str]) -> tuple[GpuInfo, ...]:
    """Without DRA only the count and memory are known; the UUIDs come from the node's nvke-agent
    (`nodes.record_gpu_uuids`), so none is given here ("": keep what NVKE has)."""
    count, memory = int(labels.get(COUNT, "0") or 0), int(labels.get(MEMORY, "0") or 0)
    return tuple(GpuInfo(index=i, uuid="", memory_mib=memory, healthy=None) for i in range(count))
