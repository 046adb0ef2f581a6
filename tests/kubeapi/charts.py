"""The charts NVKE installs through Cluster API's add-on provider for Helm, as far as Helm's render of them
can fail: their values (the chart's values.yaml from ../shared/upstream, coalesced with the release's values
as Helm does) and the `fail` calls of their templates, for the APIs the workload cluster serves.

- NVIDIA's DRA driver: NVIDIA/k8s-dra-driver-gpu `deployments/helm/dra-driver-nvidia-gpu/templates/
  validation.yaml` (the chart is published as nvidia-dra-driver-gpu; its main branch names it
  dra-driver-nvidia-gpu), the resource API from `templates/_helpers.tpl` resourceApiVersion.
- The GPU Operator: NVIDIA/gpu-operator `deployments/gpu-operator/templates/validations.yaml`.

Helm's error for a failed render is `execution error at (<chart>/templates/<file>:<line>:<col>): <text>`;
the line is left out here."""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

from . import crds

DRA_DRIVER, GPU_OPERATOR = "nvidia-dra-driver-gpu", "gpu-operator"
VALUES = {DRA_DRIVER: crds.DRA_DRIVER_VALUES, GPU_OPERATOR: crds.GPU_OPERATOR_VALUES}


def coalesce(defaults: dict[str, Any], values: dict[str, Any]) -> dict[str, Any]:
    """Helm's merge of a release's values over the chart's: maps merge key by key, anything else replaces,
    and null deletes the chart's key (helm.sh/helm `pkg/chartutil/coalesce.go`)."""
    merged = copy.deepcopy(defaults)
    for key, value in values.items():
        if value is None:
            merged.pop(key, None)
        elif isinstance(value, dict) and isinstance(merged.get(key), dict):
            merged[key] = coalesce(merged[key], value)
        else:
            merged[key] = copy.deepcopy(value)
    return merged


def unknown_keys(values: dict[str, Any], defaults: dict[str, Any], path: str = "") -> list[str]:
    """Keys of `values` the chart's values.yaml does not have; a map that is empty there (featureGates: {},
    nodeSelector: {}) is the chart's to fill freely."""
    found = []
    for key, value in values.items():
        where = f"{path}.{key}" if path else key
        if key not in defaults:
            found.append(where)
        elif isinstance(value, dict) and isinstance(defaults[key], dict) and defaults[key]:
            found += unknown_keys(value, defaults[key], where)
    return found


def _get(values: dict[str, Any], dotted: str) -> Any:
    for key in dotted.split("."):
        values = values.get(key) if isinstance(values, dict) else None
    return values


def _dra_driver(values: dict[str, Any], namespace: str, apis: set[str]) -> tuple[str, str]:
    webhook_tls = _get(values, "webhook.tls") or {}
    mode = webhook_tls.get("mode")
    issuer = _get(values, "webhook.tls.certManager.issuerType")
    checks: list[tuple[bool, str]] = [
        (
            bool(values.get("namespace")),
            "Setting an explicit 'namespace' in values.yaml ... is no longer supported.",
        ),
        (
            (values.get("namespaceOverride") or namespace) == "default"
            and not values.get("allowDefaultNamespace"),
            "Running in the 'default' namespace is not recommended.",
        ),
        (
            bool(_get(values, "resources.gpus.enabled")) and not values.get("gpuResourcesEnabledOverride"),
            "The default value of 'resources.gpus.enabled == true'. However, when "
            "'resources.gpus.enabled=true' this DRA driver cannot be deployed alongside the standard GPU "
            "device plugin on the same node. ... If you are sure you have disabled the deployment of the "
            "standard GPU device plugin and want to remove this error and force "
            "'resources.gpus.enabled=true', you must also: --set 'gpuResourcesEnabledOverride=true'",
        ),
        (bool(values.get("nvidiaCtkPath")), "Setting a user-defined nvidiaCtkPath is no longer supported."),
        (
            bool(_get(values, "webhook.enabled")) and mode not in ("cert-manager", "secret"),
            f"Invalid webhook TLS mode: {mode}",
        ),
        (
            bool(_get(values, "webhook.enabled"))
            and mode == "cert-manager"
            and issuer not in ("selfsigned", "clusterissuer", "issuer"),
            f"Invalid cert-manager issuer type: {issuer}",
        ),
        (
            not values.get("resourceApiVersion")
            and not apis & {f"resource.k8s.io/{v}" for v in ("v1", "v1beta2", "v1beta1")},
            "No supported resource.k8s.io API version found in the cluster.",
        ),
    ]
    return "validation.yaml", next((message for failed, message in checks if failed), "")


def _gpu_operator(values: dict[str, Any], namespace: str, apis: set[str]) -> tuple[str, str]:
    cdi, plugin_config = values.get("cdi") or {}, _get(values, "devicePlugin.config") or {}
    device_classes = {f"resource.k8s.io/{v}/DeviceClass" for v in ("v1", "v1beta2", "v1beta1")}
    checks: list[tuple[bool, str]] = [
        (
            bool(_get(values, "clusterPolicy.deployCR") and _get(values, "gpuCluster.deployCR")),
            "clusterPolicy.deployCR and gpuCluster.deployCR cannot both be true; only one CR can exist",
        ),
        (
            bool(_get(values, "gpuCluster.deployCR"))
            and bool(_get(values, "driver.enabled"))
            and not _get(values, "driver.nvidiaDriverCRD.enabled"),
            "the NVIDIADriver CRD must be enabled when deploying a GPUCluster CR, set "
            "driver.nvidiaDriverCRD.enabled=true",
        ),
        (
            cdi.get("enabled") is False and cdi.get("nriPluginEnabled") is True,
            "the NRI Plugin cannot be enabled when CDI is disabled",
        ),
        (
            cdi.get("nriPluginEnabled") is True and _get(values, "toolkit.enabled") is False,
            "the NRI Plugin cannot be enabled when the Container Toolkit is disabled",
        ),
        (
            bool(plugin_config.get("create")) and not plugin_config.get("data"),
            "devicePlugin.config.data cannot be empty when devicePlugin.config.create is set to true",
        ),
        (
            bool(plugin_config.get("create")) and not plugin_config.get("name"),
            "devicePlugin.config.name cannot be empty when devicePlugin.config.create is set to true",
        ),
        (
            bool(_get(values, "gpuCluster.deployCR")) and not apis & device_classes,
            "gpuCluster.deployCR=true requires a Kubernetes cluster that supports Dynamic Resource "
            "Allocation (no resource.k8s.io DeviceClass API is served).",
        ),
    ]
    return "validations.yaml", next((message for failed, message in checks if failed), "")


_CHECKS: dict[str, Callable[[dict[str, Any], str, set[str]], tuple[str, str]]] = {
    DRA_DRIVER: _dra_driver,
    GPU_OPERATOR: _gpu_operator,
}


def render_error(chart: str, values: dict[str, Any], namespace: str, apis: set[str]) -> str:
    """Helm's error rendering `chart` with the release's `values` into `namespace` on a cluster serving
    `apis` ("group/version" and "group/version/Kind", as .Capabilities.APIVersions.Has takes them); "" when
    it renders, or for a chart not modelled here."""
    if chart not in _CHECKS:
        return ""
    merged = coalesce(crds.load(VALUES[chart]), values)
    template, message = _CHECKS[chart](merged, namespace, apis)
    return f"execution error at ({chart}/templates/{template}): {message}" if message else ""
