"""What NVKE placed, readable with kubectl. Each placed claim has a GPUAllocation (nvke.io/v1alpha1) in
its namespace: `kubectl get gpuallocations -o wide` lists node, devices, GPU-MEMORY, GPU-UTIL (guaranteed
/ceiling), isolation and the pods that hold it; a tenant's own RBAC decides who reads them (the
ClusterRole `nvke-gpuallocation-viewer` aggregates to `view`). Every node of an NVKE pool carries the
annotation `nvke.io/gpu-allocations` (`kubectl describe node`): per GPU the memory and compute held,
and by which claims and pods. A claim moved to other devices or resized says so in an Event on its
ResourceClaim (Moved, Resized)."""

import json

from nvke import quantity
from nvke.providers.base import ProviderError, WorkloadClaim

from .client import call, read

GROUP, VERSION, PLURAL, KIND = "nvke.io", "v1alpha1", "gpuallocations", "GPUAllocation"
SNAPSHOT = "nvke.io/gpu-allocations"  # node annotation
MANAGED_BY = {"app.kubernetes.io/managed-by": "nvke"}
MERGE = "application/merge-patch+json"

_STRING = {"type": "string"}
_SCHEMA = {
    "type": "object",
    "properties": {
        "spec": {
            "type": "object",
            "required": ["node", "devices"],
            "properties": {
                "node": _STRING,
                "devices": _STRING,
                "gpuMemory": _STRING,
                "gpuUtil": _STRING,
                "isolation": _STRING,
                "sharingMode": _STRING,
                "pods": _STRING,
                "gpus": {
                    "type": "array",
                    "items": {
                        "type": "object",
                        "properties": {
                            "index": {"type": "integer"},
                            "uuid": _STRING,
                            "memory": _STRING,
                            "guaranteedPercent": {"type": "integer"},
                            "ceilingPercent": {"type": "integer"},
                        },
                    },
                },
            },
        }
    },
}


def _column(name: str, path: str, priority: int = 0) -> dict:
    return {"name": name, "type": "string", "jsonPath": path, "priority": priority}


def crd() -> dict:
    """The GPUAllocation CustomResourceDefinition, applied with NVKE's access manifest."""
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"{PLURAL}.{GROUP}"},
        "spec": {
            "group": GROUP,
            "names": {
                "plural": PLURAL,
                "singular": KIND.lower(),
                "kind": KIND,
                "listKind": f"{KIND}List",
                "shortNames": ["gpualloc"],
            },
            "scope": "Namespaced",
            "versions": [
                {
                    "name": VERSION,
                    "served": True,
                    "storage": True,
                    "schema": {"openAPIV3Schema": _SCHEMA},
                    "additionalPrinterColumns": [
                        _column("Node", ".spec.node"),
                        _column("GPU", ".spec.devices"),
                        _column("GPU-MEMORY", ".spec.gpuMemory"),
                        _column("GPU-UTIL", ".spec.gpuUtil"),
                        _column("Isolation", ".spec.isolation", 1),
                        _column("Pods", ".spec.pods", 1),
                    ],
                }
            ],
        },
    }


def viewer_role() -> dict:
    """Reading GPU allocations, for a tenant's RoleBindings; namespace viewers get it through `view`."""
    return {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRole",
        "metadata": {
            "name": "nvke-gpuallocation-viewer",
            "labels": {"rbac.authorization.k8s.io/aggregate-to-view": "true"},
        },
        "rules": [{"apiGroups": [GROUP], "resources": [PLURAL], "verbs": ["get", "list", "watch"]}],
    }


def util(share) -> str:
    """GPU-UTIL as NVKE's API writes it: the ceiling, or guaranteed/ceiling when they differ."""
    if share.guaranteed_percent == share.ceiling_percent:
        return f"{share.ceiling_percent}%"
    return f"{share.guaranteed_percent}%/{share.ceiling_percent}%"


def record(claim: WorkloadClaim, devices: list[str], pods: list[str]) -> dict:
    """The GPUAllocation of a placed claim."""
    memory = sum(share.memory_mib for share in claim.shares)
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": KIND,
        "metadata": {"name": claim.name, "namespace": claim.namespace, "labels": dict(MANAGED_BY)},
        "spec": {
            "node": claim.node,
            "devices": ",".join(devices),
            "gpuMemory": quantity.human_mib(memory),
            "gpuUtil": ",".join(dict.fromkeys(util(share) for share in claim.shares)),
            "isolation": claim.isolation,
            "sharingMode": claim.sharing_mode,
            "pods": ",".join(pods),
            "gpus": [
                {
                    "index": share.index,
                    "uuid": share.uuid,
                    "memory": quantity.format_mib(share.memory_mib),
                    "guaranteedPercent": share.guaranteed_percent,
                    "ceilingPercent": share.ceiling_percent,
                }
                for share in claim.shares
            ],
        },
    }


def change(old: dict, new: dict) -> tuple[str, str] | None:
    """The Event a changed GPUAllocation is worth: Moved (other node or devices), Resized (other
    memory or compute), or None."""
    before, after = old["spec"], new["spec"]
    if (before.get("node"), before.get("devices")) != (after["node"], after["devices"]):
        was, now = (
            f"{before.get('devices')} on {before.get('node')}",
            f"{after['devices']} on {after['node']}",
        )
        return "Moved", f"Moved from {was} to {now}."
    if (before.get("gpuMemory"), before.get("gpuUtil")) != (after["gpuMemory"], after["gpuUtil"]):
        return (
            "Resized",
            f"Resized from {before.get('gpuMemory')} at {before.get('gpuUtil')} compute to "
            f"{after['gpuMemory']} at {after['gpuUtil']}.",
        )
    return None


def snapshot(claims: list[tuple[WorkloadClaim, list[str]]]) -> str:
    """One node's GPUs as NVKE holds them: per GPU index the memory, guaranteed compute and ceilings
    held, and by which claims and pods (`claims`: each claim with the names of the pods that hold it).
    Empty when nothing is placed on the node."""
    per_gpu: dict[int, dict] = {}
    for claim, pods in claims:
        for share in claim.shares:
            entry = per_gpu.setdefault(
                share.index,
                {
                    "gpu": share.index,
                    "uuid": share.uuid,
                    "memoryMiB": 0,
                    "guaranteed": 0,
                    "ceilings": 0,
                    "claims": [],
                    "pods": [],
                },
            )
            entry["memoryMiB"] += share.memory_mib
            entry["guaranteed"] += share.guaranteed_percent
            entry["ceilings"] += share.ceiling_percent
            entry["claims"].append(f"{claim.namespace}/{claim.name}")
            entry["pods"] += [f"{claim.namespace}/{pod}" for pod in pods]
    held = [
        {**e, "guaranteed": f"{e['guaranteed']}%", "ceilings": f"{e['ceilings']}%"}
        for _, e in sorted(per_gpu.items())
    ]
    return json.dumps(held, separators=(",", ":")) if held else ""


class RecordSync:
    """Writes the GPUAllocations and node snapshots of one pass. `say(rc_or_none, kind, reason, message)`
    records an Event on the claim's ResourceClaim. Only this tenant's (in `managed`, its namespaces) are
    written: another tenant's NVKE may share the cluster."""

    def __init__(self, ops, say, managed: set[str]):
        self.ops, self.custom, self.say, self.managed = ops, ops.custom, say, managed

    def run(
        self,
        placed: list[tuple[WorkloadClaim, list[str], list[str]]],
        claims_by_key: dict,
        pool_nodes: list[dict],
    ) -> None:
        """`placed`: (claim, devices, pods) of every claim whose workload is allocated; `pool_nodes`: the
        nodes of NVKE's pools, whose snapshots are written."""
        self._records(placed, claims_by_key)
        self._snapshots([(claim, pods) for claim, _, pods in placed], pool_nodes)

    def _records(self, placed, claims_by_key) -> None:
        try:
            found = read(
                self.custom.list_cluster_custom_object,
                GROUP,
                VERSION,
                PLURAL,
                label_selector="app.kubernetes.io/managed-by=nvke",
            )["items"]
        except ProviderError as error:
            if error.status == 404:
                return  # the CRD is not installed (NVKE's access manifest brings it)
            raise
        existing = {
            (o["metadata"]["namespace"], o["metadata"]["name"]): o
            for o in found
            if o["metadata"]["namespace"] in self.managed
        }
        for claim, devices, pods in placed:
            key = (claim.namespace, claim.name)
            wanted = record(claim, devices, pods)
            old = existing.pop(key, None)
            if old is None:
                call(
                    self.custom.create_namespaced_custom_object,
                    GROUP,
                    VERSION,
                    claim.namespace,
                    PLURAL,
                    wanted,
                )
            elif old["spec"] != wanted["spec"]:
                call(
                    self.custom.patch_namespaced_custom_object,
                    GROUP,
                    VERSION,
                    claim.namespace,
                    PLURAL,
                    claim.name,
                    {"spec": wanted["spec"]},
                    _content_type=MERGE,
                )
                if event := change(old, wanted):
                    self.say(claims_by_key.get(key), "Normal", *event)
        for namespace, name in existing:
            try:
                call(self.custom.delete_namespaced_custom_object, GROUP, VERSION, namespace, PLURAL, name)
            except ProviderError as error:
                if error.status != 404:
                    raise

    def _snapshots(self, placed: list[tuple[WorkloadClaim, list[str]]], pool_nodes: list[dict]) -> None:
        by_node: dict[str, list[tuple[WorkloadClaim, list[str]]]] = {}
        for claim, pods in placed:
            by_node.setdefault(claim.node, []).append((claim, pods))
        for node in pool_nodes:
            name = node["metadata"]["name"]
            wanted = snapshot(by_node.get(name, [])) or None
            written = (node["metadata"].get("annotations") or {}).get(SNAPSHOT)
            if written == wanted or (wanted is None and not self._mine(written)):
                continue  # as it should be, or another tenant's pool node
            self.ops.patch_node(name, {"metadata": {"annotations": {SNAPSHOT: wanted}}})

    def _mine(self, written: str | None) -> bool:
        """Whether a node's snapshot is this tenant's to clear: it names only claims in its namespaces
        (a node is in one tenant's pool, so one tenant's claims are on it)."""
        held = json.loads(written) if written else []
        return all(claim.split("/")[0] in self.managed for gpu in held for claim in gpu["claims"])
