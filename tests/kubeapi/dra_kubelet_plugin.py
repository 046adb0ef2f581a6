"""The NVIDIA DRA driver's kubelet plugin preparing a claim's devices on a node, as NVIDIA/k8s-dra-driver-gpu
does it (cmd/gpu-kubelet-plugin/device_state.go prepareDevices and GetOpaqueDeviceConfigs; the opaque
config's types and checks in api/nvidia.com/resource/v1beta1/: api.go StrictDecoder, gpuconfig.go,
sharing.go, validate.go; the gates in pkg/featuregates/featuregates.go, where MPSSupport and
TimeSlicingSettings are alpha and off by default). Strict decoding refuses unknown fields; a device the
node does not publish is refused; a sharing strategy whose gate is off on that node is refused.

The gates are the driver's own (its --feature-gates), so they are per node here:
`Actors.dra_driver_gates[node]`, empty by default."""

from __future__ import annotations

from typing import Any

DRIVER = "gpu.nvidia.com"
CONFIG_VERSION = "resource.nvidia.com/v1beta1"
MPS = {"defaultActiveThreadPercentage": None, "defaultPinnedDeviceMemoryLimit": None,
       "defaultPerDevicePinnedMemoryLimit": None}  # fmt: skip
SHARING = {"strategy": None, "timeSlicingConfig": {"interval": None}, "mpsConfig": MPS}
# The fields each kind's Go struct declares (json tags); anything else fails strict decoding.
KINDS = {
    "GpuConfig": {"apiVersion": None, "kind": None, "sharing": SHARING},
    "MigDeviceConfig": {"apiVersion": None, "kind": None, "sharing": {"strategy": None, "mpsConfig": MPS}},
}
GATES = {"TimeSlicing": "TimeSlicingSettings", "MPS": "MPSSupport"}
INTERVALS = ("Default", "Short", "Medium", "Long")


class PrepareError(Exception):
    pass


def _unknown(value: Any, fields: dict[str, Any] | None, path: str) -> list[str]:
    if fields is None or not isinstance(value, dict):
        return []
    found = []
    for key, inner in value.items():
        where = f"{path}.{key}" if path else key
        found += [where] if key not in fields else _unknown(inner, fields[key], where)
    return found


def decode(parameters: Any) -> dict[str, Any]:
    """runtime.Decode with the StrictDecoder: a registered kind of resource.nvidia.com/v1beta1, no
    unknown fields."""
    if not isinstance(parameters, dict):
        raise PrepareError("error decoding config parameters: couldn't get version/kind; json parse error")
    version, kind = parameters.get("apiVersion"), parameters.get("kind")
    if version != CONFIG_VERSION or kind not in KINDS:
        raise PrepareError(
            f'error decoding config parameters: no kind "{kind}" is registered for version "{version}"'
        )
    if unknown := _unknown(parameters, KINDS[kind], ""):
        fields = ", ".join(f'unknown field "{u}"' for u in unknown)
        raise PrepareError(f"error decoding config parameters: strict decoding error: {fields}")
    return parameters


def validate(config: dict[str, Any], gates: set[str]) -> None:
    """Normalize and Validate: a sharing strategy must be known and its gate on."""
    sharing = config.get("sharing")
    if sharing is None:
        return  # without TimeSlicingSettings there is nothing to normalize to
    strategy = sharing.get("strategy")
    if strategy not in GATES:
        raise PrepareError(
            f"error validating GPU config: unknown GPU sharing strategy: {strategy}, supported GPU sharing "
            "strategies: TimeSlicing, MPS"
        )
    if GATES[strategy] not in gates:
        raise PrepareError(
            f'error validating GPU config: "{strategy}" is selected as the GPU sharing strategy, but the '
            f'"{GATES[strategy]}" feature gate is not enabled'
        )
    interval = (sharing.get("timeSlicingConfig") or {}).get("interval", "Default")
    if strategy == "TimeSlicing" and interval not in INTERVALS:
        raise PrepareError(f"error validating GPU config: unknown time-slice interval: {interval}")
    percentage = (sharing.get("mpsConfig") or {}).get("defaultActiveThreadPercentage")
    if strategy == "MPS" and percentage is not None and not 0 <= percentage <= 100:
        raise PrepareError("error validating GPU config: active thread percentage must be from 0 to 100")


def prepare(claim: dict[str, Any], published: set[str], gates: set[str]) -> None:
    """Prepare the driver's devices of an allocated claim on a node publishing `published` devices;
    PrepareError says why it cannot."""
    allocation = (claim.get("status") or {}).get("allocation")
    if not allocation:
        raise PrepareError("claim not yet allocated")
    configs = []
    entries = allocation.get("devices", {}).get("config") or []
    for entry in sorted(entries, key=lambda e: e.get("source") != "FromClass"):  # class first, claim wins
        if entry.get("source") not in ("FromClass", "FromClaim"):
            raise PrepareError(f"invalid config source: {entry.get('source')}")
        opaque = entry.get("opaque")
        if opaque is None:
            raise PrepareError("only opaque parameters are supported by this driver")
        if opaque.get("driver") == DRIVER:
            try:
                configs.append(decode(opaque.get("parameters")))
            except PrepareError as error:
                raise PrepareError(f"error getting opaque device configs: {error}") from None
    for result in allocation.get("devices", {}).get("results") or []:
        if result["driver"] == DRIVER and result["device"] not in published:
            raise PrepareError(f'allocatable not found for device "{result["device"]}"')
    for config in configs:
        validate(config, gates)
