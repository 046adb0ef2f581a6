"""NVKE's claims as DRA objects (resource.k8s.io/v1), and back. Pure mapping of the API's JSON shapes.

A claim NVKE made becomes a ResourceClaim in the claim's namespace, labelled `nvke.io/claim`; a
ResourceClaim a user made in a namespace NVKE manages is read as a request to adopt. NVKE allocates
either itself, as KEP-4381 lets a custom scheduler do: the allocation names NVIDIA's DRA driver, the
node as the pool and `gpu-<index>` as the device, selects the node by name, and carries the driver's
`GpuConfig` for the pool's sharing (MPS: the claim's compute ceiling as the active-thread percentage and
its memory as the pinned-memory limit; time-slicing). Where the device allows several allocations
(consumable capacity, KEP-5075) each share carries its own `shareID` and the memory it consumes."""

import dataclasses
import datetime
import uuid

from nvke import quantity
from nvke.providers.base import DeviceShare, FoundWorkload, WorkloadClaim

from . import gpus

GROUP_VERSION = "resource.k8s.io/v1"
DEVICE_CLASS = "gpu.nvidia.com"  # the NVIDIA DRA driver's class of whole GPUs
MIG_DEVICE_CLASS = "mig.nvidia.com"
CLAIM_LABEL = "nvke.io/claim"  # on the ResourceClaims NVKE made
ADOPTED = "nvke.io/adopted"  # annotation on a user's ResourceClaim that NVKE allocates
COMPUTE = "nvke.io/gpu-utilization"  # annotation: a user's claim's compute ceiling ("50%")
MANAGED = "nvke.io/managed"  # namespace label: NVKE places the GPU requests made in it
TENANT = "nvke.io/tenant"  # namespace label: the one tenant (slug) whose NVKE places requests made in it
# On the ResourceClaims whose allocation NVKE wrote. Not resource.kubernetes.io/delete-protection: that one
# is kube-scheduler's, and the resource claim controller deallocates the claims carrying it once their
# last pod goes (kubernetes/kubernetes pkg/controller/resourceclaim/controller.go).
FINALIZER = "nvke.io/allocation"
GATE = "nvke.io/placement"  # pods wait on it until NVKE has allocated their claims
POOL_TOLERATION = {"key": gpus.POOL_LABEL, "operator": "Exists", "effect": "NoSchedule"}
PRIORITY = "nvke.io/priority"  # annotation on a pod or ResourceClaim: its claim's priority
PRIORITIES = range(-32768, 32768)  # what a claim's priority takes, as through NVKE's API
REQUEST = "gpu"
GPU_CONFIG = "resource.nvidia.com/v1beta1"


def admitted_pod_fields() -> dict:
    """What NVKE's admission sets on a pod that uses GPU claims in a namespace NVKE manages: its scheduling
    gate, so kube-scheduler leaves the pod (and its claims) to NVKE until NVKE has allocated them, and the
    toleration of NVKE's pool taint, so kube-scheduler can then bind it to the pool node its claims select
    (without it, kube-scheduler's DynamicResources PostFilter clears the allocation)."""
    return {"schedulingGates": [{"name": GATE}], "tolerations": [dict(POOL_TOLERATION)]}


def tolerates(tolerations: list[dict], taint: dict) -> bool:
    """Whether a pod's tolerations tolerate a node's taint (Kubernetes' ToleratesTaint)."""
    for toleration in tolerations:
        if toleration.get("effect") and toleration["effect"] != taint["effect"]:
            continue
        if toleration.get("key") and toleration["key"] != taint["key"]:
            continue
        operator = toleration.get("operator", "Equal")
        if operator == "Exists" or toleration.get("value", "") == taint.get("value", ""):
            return True
    return False


def untolerated(pod: dict, node: dict) -> list[dict]:
    """The node's NoSchedule and NoExecute taints the pod does not tolerate: kube-scheduler would not
    bind it there."""
    tolerations = pod.get("spec", {}).get("tolerations") or []
    return [
        taint
        for taint in node.get("spec", {}).get("taints") or []
        if taint["effect"] in ("NoSchedule", "NoExecute") and not tolerates(tolerations, taint)
    ]


def resource_claim(claim: WorkloadClaim) -> dict:
    """The ResourceClaim NVKE creates for one of its claims. Without NVKE's finalizer: NVKE sets that just
    before it allocates, so the finalizer says who wrote an allocation (kube-scheduler may, for a pod that
    slipped past the gate)."""
    request: dict = {"deviceClassName": DEVICE_CLASS, "count": claim.gpus if claim.kind == "whole" else 1}
    if claim.kind == "mig":
        request["deviceClassName"] = MIG_DEVICE_CLASS
    return {
        "apiVersion": GROUP_VERSION,
        "kind": "ResourceClaim",
        "metadata": {
            "name": claim.name,
            "namespace": claim.namespace,
            "labels": {CLAIM_LABEL: claim.name, "app.kubernetes.io/managed-by": "nvke"},
        },
        "spec": {"devices": {"requests": [{"name": REQUEST, "exactly": request}]}},
    }


def request_name(resource_claim: dict) -> str:
    requests = resource_claim.get("spec", {}).get("devices", {}).get("requests") or []
    return requests[0]["name"] if requests else REQUEST


def share_id(claim: WorkloadClaim, share: DeviceShare) -> str:
    """A stable shareID per claim and GPU (a lowercase UUID, as the API requires)."""
    return str(uuid.uuid5(uuid.NAMESPACE_URL, f"nvke:{claim.namespace}/{claim.name}/{share.uuid}"))


def gpu_config(claim: WorkloadClaim, shared: bool) -> dict | None:
    """The NVIDIA driver's opaque GpuConfig for the claim, or None when the device is the claim's alone
    and exclusive. Several claims on one device (consumable shares) get none: the driver refuses MPS
    there, and its accounting does the rest."""
    if claim.kind != "fraction" or shared:
        return None
    share = claim.shares[0]
    if claim.sharing_mode == "mps":
        sharing = {
            "strategy": "MPS",
            "mpsConfig": {
                "defaultActiveThreadPercentage": share.ceiling_percent,
                "defaultPinnedDeviceMemoryLimit": quantity.format_mib(share.memory_mib),
            },
        }
    else:
        sharing = {"strategy": "TimeSlicing", "timeSlicingConfig": {"interval": "Default"}}
    return {"apiVersion": GPU_CONFIG, "kind": "GpuConfig", "sharing": sharing}


def allocation(claim: WorkloadClaim, devices: dict[str, dict], request: str, now: datetime.datetime) -> dict:
    """`status.allocation` for a placed claim. `devices`: the node's published devices by name (from
    its ResourceSlices), which say whether a device takes several allocations."""
    results, shared = [], False
    for share in claim.shares:
        name = device_name(share, devices)
        result = {"request": request, "driver": gpus.DRA_DRIVER, "pool": claim.node, "device": name}
        if consumed(share, devices):
            shared = True
            result["shareID"] = share_id(claim, share)
            result["consumedCapacity"] = {"memory": quantity.format_mib(share.memory_mib)}
        results.append(result)
    body: dict = {
        "devices": {"results": results},
        "nodeSelector": {
            "nodeSelectorTerms": [
                {"matchFields": [{"key": "metadata.name", "operator": "In", "values": [claim.node]}]}
            ]
        },
        "allocationTimestamp": now.strftime("%Y-%m-%dT%H:%M:%SZ"),
    }
    if config := gpu_config(claim, shared):
        body["devices"]["config"] = [
            {
                "source": "FromClaim",
                "requests": [request],
                "opaque": {"driver": gpus.DRA_DRIVER, "parameters": config},
            }
        ]
    return body


def consumed(share: DeviceShare, devices: dict[str, dict]) -> bool:
    """Whether the share is one of several allocations of its device (consumable capacity): then
    memory is accounted and nothing is enforced between the claims on it."""
    return (
        bool(devices.get(device_name(share, devices), {}).get("allowMultipleAllocations"))
        and not share.exclusive
    )


def as_enforced(claim: WorkloadClaim, devices: dict[str, dict]) -> WorkloadClaim:
    """The claim with the isolation its allocation gets: none where it consumes a shared device,
    whatever the pool's mode."""
    if any(consumed(share, devices) for share in claim.shares):
        return dataclasses.replace(claim, isolation="none")
    return claim


def device_name(share: DeviceShare, devices: dict[str, dict]) -> str:
    """The driver's name for the GPU (`gpu-<index>`), or for a MIG slice the published MIG device of
    that profile on that GPU (`parentUUID`) at that placement, whose name ends in its placement start
    (`gpu-<minor>-mig-<profile>-<profile id>-<start>`); "" when the node publishes none."""
    if not share.mig_profile:
        return f"gpu-{share.index}"
    for name, device in sorted(devices.items()):
        attributes = device.get("attributes") or {}
        if (
            attributes.get("type", {}).get("string") == "mig"
            and attributes.get("profile", {}).get("string") == share.mig_profile
            and attributes.get("parentUUID", {}).get("string") == share.uuid
            and (share.mig_start is None or name.endswith(f"-{share.mig_start}"))
        ):
            return name
    return ""


def same_placement(written: dict, wanted: dict) -> bool:
    """Whether an allocation found on the cluster is the one NVKE would write (timestamps aside)."""

    def key(body: dict) -> tuple:
        results = body.get("devices", {}).get("results") or []
        return tuple(sorted((r["pool"], r["device"], r.get("shareID", "")) for r in results))

    return key(written) == key(wanted)


def published_devices(slices: list[dict]) -> dict[str, dict]:
    """A node's devices by name, from the newest generation of each of its ResourceSlices' pools."""
    newest: dict[str, int] = {}
    for piece in slices:
        pool = piece["spec"]["pool"]
        newest[pool["name"]] = max(newest.get(pool["name"], 0), pool.get("generation", 0))
    return {
        device["name"]: device
        for piece in slices
        if piece["spec"]["pool"].get("generation", 0) == newest[piece["spec"]["pool"]["name"]]
        for device in piece["spec"].get("devices") or []
    }


def found_claim(resource_claim: dict) -> FoundWorkload:
    """A user's ResourceClaim read as a request NVKE can place: one request of NVIDIA's GPU class for a
    count of whole GPUs, or for one GPU with `capacity.requests.memory` (a fraction, whose compute
    ceiling the `nvke.io/gpu-utilization` annotation may give), with the priority of its
    `nvke.io/priority` annotation. Anything else is refused, and says why."""
    meta = resource_claim["metadata"]
    found = FoundWorkload(namespace=meta["namespace"], name=meta["name"], source="resourceclaim")
    requests = resource_claim.get("spec", {}).get("devices", {}).get("requests") or []
    if len(requests) != 1 or "exactly" not in requests[0]:
        return _refused(found, "NVKE places ResourceClaims with exactly one device request.")
    exactly = requests[0]["exactly"]
    if exactly.get("allocationMode", "ExactCount") != "ExactCount":
        return _refused(found, "NVKE places ExactCount requests only (allocationMode All is not).")
    try:
        found = FoundWorkload(**{**found.__dict__, "priority": priority(meta)})
    except ValueError as error:
        return _refused(found, str(error))
    count = int(exactly.get("count", 1))
    memory = (exactly.get("capacity") or {}).get("requests", {}).get("memory")
    compute = (meta.get("annotations") or {}).get(COMPUTE)
    if memory is None and compute is None:
        return FoundWorkload(**{**found.__dict__, "kind": "whole", "gpus": count})
    if count != 1:
        return _refused(found, "A GPU fraction (capacity.requests.memory) is of one device: count 1.")
    try:
        memory_mib = quantity.parse_mib(memory) if memory is not None else None
        percent = int(compute.rstrip("%")) if compute is not None else None
    except ValueError:
        return _refused(found, f"Cannot read the request: memory {memory!r}, {COMPUTE} {compute!r}.")
    return FoundWorkload(
        **{**found.__dict__, "kind": "fraction", "gpu_memory_mib": memory_mib, "compute_percent": percent}
    )


def priority(meta: dict) -> int:
    """The claim priority a pod or ResourceClaim asks for in its annotation (0 without one): higher is
    placed first when capacity frees, as for any claim. ValueError, saying why, for one out of range."""
    value = (meta.get("annotations") or {}).get(PRIORITY, "0")
    try:
        number = int(value)
    except ValueError:
        number = None
    if number not in PRIORITIES:
        raise ValueError(f"{PRIORITY} must be a whole number from -32768 to 32767, not {value!r}.")
    return number


def _refused(found: FoundWorkload, why: str) -> FoundWorkload:
    return FoundWorkload(**{**found.__dict__, "refusal": why})


def asks_nvidia_gpus(resource_claim: dict) -> bool:
    requests = resource_claim.get("spec", {}).get("devices", {}).get("requests") or []
    classes = {
        (r.get("exactly") or {}).get("deviceClassName")
        or next(iter(r.get("firstAvailable") or [{}])).get("deviceClassName")
        for r in requests
    }
    return bool(classes & {DEVICE_CLASS, MIG_DEVICE_CLASS})
