"""The kubelet's side of starting a pod on its node: admission, then preparing its DRA claims.

Admission follows kubernetes/kubernetes pkg/kubelet/lifecycle/predicate.go (Admit, generalFilter,
removeMissingExtendedResources): extended resources the node does not advertise are dropped from the
pod's requests, not refused; then resources (reason OutOf<resource>), node affinity (NodeAffinity) and
NoExecute taints (TaintToleration) are checked, and a pod that fails is set Failed with that reason.
Preparing DRA claims follows pkg/kubelet/cm/dra/manager.go (PrepareResources): every claim must exist
and list the pod in `reservedFor`, and its driver's kubelet plugin must prepare it; until then the pod
stays Pending (ContainerCreating) and an event FailedPrepareDynamicResources says why. Device plugins'
resources are allocated at admission by the node's device manager (device_manager.py), where a test
started one, before the checks above (pkg/kubelet/kubelet.go NewMainKubelet adds the container
manager's resource-allocating admit handler before the predicate one)."""

from __future__ import annotations

from typing import Any

from . import dra_kubelet_plugin
from .device_manager import DeviceManager
from .kube_scheduler import (
    affinity_matches,
    claim_names,
    extended,
    insufficient,
    quantity,
    requests,
    reserved_for,
    untolerated,
)


def admission(
    pod: dict[str, Any], node: dict[str, Any], admitted: list[dict[str, Any]]
) -> tuple[str, str] | None:
    """(reason, message) where the kubelet refuses the pod beside the pods it `admitted`, else None."""
    allocatable = node.get("status", {}).get("allocatable") or {}
    asked = {k: v for k, v in requests(pod).items() if not extended(k) or k in allocatable}
    if short := insufficient(asked, node, admitted):
        name = short[0]
        used = sum(requests(other).get(name, 0) for other in admitted) if name != "pods" else len(admitted)
        wanted = asked.get(name, 1) if name != "pods" else 1
        message = (
            f"Node didn't have enough resource: {name}, requested: {wanted:g}, used: {used:g}, "
            f"capacity: {quantity(allocatable.get(name, 110 if name == 'pods' else 0)):g}"
        )
        return f"OutOf{name}", message
    if not affinity_matches(pod, node):
        return (
            "NodeAffinity",
            "Predicate NodeAffinity failed: node(s) didn't match Pod's node affinity/selector",
        )
    if untolerated(pod, node, ("NoExecute",)):
        return (
            "TaintToleration",
            "Predicate TaintToleration failed: node(s) had taints that the pod didn't tolerate",
        )
    return None


def prepare_claims(pod: dict[str, Any], find_claim, published: set[str], gates: set[str]) -> str:
    """Why the pod's claims cannot be prepared on its node ("" when they are). `find_claim(name)` reads
    a ResourceClaim in the pod's namespace."""
    meta = pod["metadata"]
    for ref, name in zip(pod["spec"].get("resourceClaims") or [], claim_names(pod), strict=True):
        if name is None:
            return f"waiting for the ResourceClaim of {ref['name']} to be generated"
        claim = find_claim(name)
        if claim is None:
            return f'fetch ResourceClaim {name}: resourceclaims.resource.k8s.io "{name}" not found'
        if not reserved_for(claim, pod):
            return (
                f"pod {meta['name']} ({meta['uid']}) is not allowed to use ResourceClaim {name} "
                f"({claim['metadata']['uid']})"
            )
        try:
            dra_kubelet_plugin.prepare(claim, published, gates)
        except dra_kubelet_plugin.PrepareError as error:
            return f"NodePrepareResources failed for ResourceClaim {name}: prepare devices failed: {error}"
    return ""


def device_outcome(pod: dict[str, Any], manager: DeviceManager | None) -> dict[str, Any] | None:
    """The pod's status while its device plugins are asked (unchanged), or once they refused (Failed,
    UnexpectedAdmissionError); None where it asks no registered device or they answered."""
    if manager is None or not manager.asks(pod):
        return None
    outcome = manager.outcome(pod)
    if outcome is None:
        return {**pod["status"], "phase": "Pending"}  # no container status: what NVKE's plugin looks for
    if isinstance(outcome, str):
        return {
            "phase": "Failed",
            "reason": "UnexpectedAdmissionError",
            "message": f"Pod was rejected: {outcome}",
        }
    return None


def advertised(node: dict[str, Any], manager: DeviceManager) -> dict[str, Any] | None:
    """The node's status with its device plugins' resources (the device manager's GetCapacity, which
    the kubelet's node status setter reports), or None where it says so already."""
    status = node.get("status") or {}
    capacity, allocatable = dict(status.get("capacity") or {}), dict(status.get("allocatable") or {})
    for resource, (total, healthy) in manager.capacity().items():
        capacity[resource], allocatable[resource] = str(total), str(healthy)
    if capacity == (status.get("capacity") or {}) and allocatable == (status.get("allocatable") or {}):
        return None
    return {**status, "capacity": capacity, "allocatable": allocatable}
