"""Feature gates per Kubernetes minor, and the fields a disabled gate drops on write.

Defaults follow the versioned specs in kubernetes/kubernetes pkg/features/kube_features.go
(defaultVersionedKubernetesFeatureGates), kept to the gates NVKE's objects touch. What a disabled gate
drops follows the registry strategies' dropDisabledFields: pkg/registry/resource/resourceclaim/strategy.go
and pkg/registry/resource/resourceslice/strategy.go. As there, a field the stored object already uses is
kept (an update must not lose what an older server wrote)."""

from __future__ import annotations

from typing import Any

# gate -> (minor it takes this default from, default), oldest first.
VERSIONED: dict[str, tuple[tuple[int, bool], ...]] = {
    "DRAConsumableCapacity": ((34, False), (36, True)),  # KEP-5075: alpha 1.34, beta 1.36
    "GenericWorkload": ((35, False),),  # KEP-4671: alpha (off) 1.35, and 1.36 (beta, still off, 1.37)
}


def default(gate: str, minor: int) -> bool:
    enabled = False
    for since, value in VERSIONED[gate]:
        if minor >= since:
            enabled = value
    return enabled


class FeatureGates:
    """A cluster's gates: its minor's defaults, with what the cluster's --feature-gates set."""

    def __init__(self, minor: int) -> None:
        self.minor = minor
        self.overrides: dict[str, bool] = {}

    def enabled(self, gate: str) -> bool:
        return self.overrides.get(gate, default(gate, self.minor))

    def set(self, gate: str, value: bool) -> None:
        if gate not in VERSIONED:
            raise KeyError(f"unknown feature gate {gate}")
        self.overrides[gate] = value

    def drop_disabled_fields(self, kind: str, old: dict[str, Any] | None, new: dict[str, Any]) -> None:
        """What the kind's strategy drops from `new` for the gates that are off."""
        if kind == "ResourceClaim" and not self.enabled("DRAConsumableCapacity"):
            if old is None or not _claim_uses_capacity(old):
                _drop_claim_capacity(new)
        if kind == "Pod" and not self.enabled("GenericWorkload"):
            # PodSpec.SchedulingGroup is `+featureGate=GenericWorkload` (kubernetes/api core/v1/types.go):
            # dropped on write while the gate is off, unless the stored pod already has it
            if old is None or "schedulingGroup" not in (old.get("spec") or {}):
                (new.get("spec") or {}).pop("schedulingGroup", None)
        if kind == "ResourceSlice" and not self.enabled("DRAConsumableCapacity"):
            if old is None or not _slice_uses_capacity(old):
                _drop_slice_capacity(new)


def _requests(claim: dict[str, Any]) -> list[dict[str, Any]]:
    requests = ((claim.get("spec") or {}).get("devices") or {}).get("requests") or []
    exact = [r["exactly"] for r in requests if r.get("exactly")]
    return exact + [sub for r in requests for sub in r.get("firstAvailable") or []]


def _results(claim: dict[str, Any]) -> list[dict[str, Any]]:
    allocation = (claim.get("status") or {}).get("allocation") or {}
    return (allocation.get("devices") or {}).get("results") or []


def _claim_uses_capacity(claim: dict[str, Any]) -> bool:
    return any("capacity" in r for r in _requests(claim)) or any(
        "shareID" in r or "consumedCapacity" in r for r in _results(claim)
    )


def _drop_claim_capacity(claim: dict[str, Any]) -> None:
    # dropDisabledDRAConsumableCapacityFields: requests' capacity, results' shareID and consumedCapacity
    for request in _requests(claim):
        request.pop("capacity", None)
    for result in _results(claim):
        result.pop("shareID", None)
        result.pop("consumedCapacity", None)


def _devices(resource_slice: dict[str, Any]) -> list[dict[str, Any]]:
    return (resource_slice.get("spec") or {}).get("devices") or []


def _slice_uses_capacity(resource_slice: dict[str, Any]) -> bool:
    return any(
        "allowMultipleAllocations" in d
        or any("requestPolicy" in c for c in (d.get("capacity") or {}).values())
        for d in _devices(resource_slice)
    )


def _drop_slice_capacity(resource_slice: dict[str, Any]) -> None:
    # devices' allowMultipleAllocations and their capacities' requestPolicy
    for device in _devices(resource_slice):
        device.pop("allowMultipleAllocations", None)
        for capacity in (device.get("capacity") or {}).values():
            capacity.pop("requestPolicy", None)
