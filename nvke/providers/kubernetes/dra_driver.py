"""NVIDIA's DRA driver as NVKE needs it on an attached cluster: its DeviceClasses, and the feature gates
its kubelet plugin runs with. NVKE's allocations carry the driver's `GpuConfig` with an MPS or
TimeSlicing sharing strategy (dra.gpu_config), which the kubelet plugin refuses unless its alpha,
off-by-default gate for that strategy is on (NVIDIA/k8s-dra-driver-gpu
api/nvidia.com/resource/v1beta1/validate.go, pkg/featuregates/featuregates.go): the pod then sits in
ContainerCreating. The chart passes `featureGates` as the `FEATURE_GATES` environment variable of the
kubelet plugin's containers, `Key=value,` pairs (deployments/helm/dra-driver-nvidia-gpu/templates/
kubeletplugin.yaml); the plugin also reads a `--feature-gates` argument (pkg/flags/featuregates.go).

Attach records what it found (`as_json`), refuses a driver without its DeviceClasses, and a pool whose
sharing needs a gate the driver lacks is refused when it is created (`pool_refusal`)."""

from dataclasses import dataclass

from kubernetes import client

from nvke.providers.base import ProviderError

from . import dra
from .client import read, said

DEVICE_CLASSES = (dra.DEVICE_CLASS, dra.MIG_DEVICE_CLASS)  # the chart's deviceclass-{gpu,mig}.yaml
# The label the chart puts on the kubelet plugin's pods whatever the release is called.
COMPONENT_LABEL, COMPONENT = "nvidia-dra-driver-gpu-component", "kubelet-plugin"
GATES_ENV, GATES_FLAG = "FEATURE_GATES", "--feature-gates="
# The gate the kubelet plugin needs for the GpuConfig NVKE writes on a pool of each sharing mode:
# fractions get MPS on MPS pools and TimeSlicing on the others (dra.gpu_config).
GATES = {"mps": "MPSSupport", "time-slicing": "TimeSlicingSettings", "fractional": "TimeSlicingSettings"}


@dataclass(frozen=True)
class Driver:
    """What attach found of the driver: whether its kubelet plugin runs, its DeviceClasses, its gates."""

    running: bool
    device_classes: tuple[str, ...] = ()
    gates: tuple[str, ...] = ()  # the feature gates that are on

    def as_json(self) -> dict:
        return {
            "running": self.running,
            "device_classes": list(self.device_classes),
            "gates": list(self.gates),
        }

    @property
    def missing_classes(self) -> list[str]:
        return [name for name in DEVICE_CLASSES if name not in self.device_classes] if self.running else []


def parse_gates(text: str) -> dict[str, bool]:
    """`A=true,B=false,` (the chart's rendering, trailing comma and all) as {gate: on}."""
    gates = {}
    for pair in text.split(","):
        key, _, value = pair.strip().partition("=")
        if key:
            gates[key.strip()] = value.strip().lower() == "true"
    return gates


def gates_of(daemon_set: dict) -> dict[str, bool]:
    """The feature gates of a kubelet plugin DaemonSet: every container's FEATURE_GATES and
    --feature-gates, later ones winning as the flag's parser does."""
    gates: dict[str, bool] = {}
    for container in daemon_set["spec"]["template"]["spec"].get("containers") or []:
        for variable in container.get("env") or []:
            if variable.get("name") == GATES_ENV:
                gates.update(parse_gates(variable.get("value", "")))
        for argument in (container.get("args") or []) + (container.get("command") or []):
            if argument.startswith(GATES_FLAG):
                gates.update(parse_gates(argument[len(GATES_FLAG) :]))
    return gates


def inspect(api: client.ApiClient) -> Driver:
    """Find the kubelet plugin's DaemonSet (any namespace) and the DeviceClasses. ProviderError when the
    cluster will not say."""
    daemon_sets = read(client.AppsV1Api(api).list_daemon_set_for_all_namespaces)["items"]
    plugins = [
        ds
        for ds in daemon_sets
        if (ds["spec"]["template"].get("metadata", {}).get("labels") or {}).get(COMPONENT_LABEL) == COMPONENT
    ]
    if not plugins:
        return Driver(running=False)
    classes = read(client.ResourceV1Api(api).list_device_class)["items"]
    gates = gates_of(plugins[0])
    return Driver(
        running=True,
        device_classes=tuple(sorted(c["metadata"]["name"] for c in classes)),
        gates=tuple(sorted(gate for gate, on in gates.items() if on)),
    )


def classes_message(driver: Driver) -> str:
    missing = ", ".join(driver.missing_classes)
    return (
        f"NVIDIA's DRA driver runs without its DeviceClasses {missing}: NVKE's ResourceClaims name them. "
        "Install the driver's chart with resources.gpus.enabled=true (it creates them)."
    )


def check(api: client.ApiClient) -> tuple[Driver, list[tuple[str, str, str]]]:
    """Attach's check of the driver: what it found, and the (check, reason, message) triples it fails."""
    try:
        driver = inspect(api)
    except ProviderError as error:
        return Driver(running=False), [("dra_driver", error.reason, said(error))]
    if driver.missing_classes:
        return driver, [("dra_driver", "NoDeviceClass", classes_message(driver))]
    return driver, []


def pool_refusal(observed: dict, sharing_mode: str) -> str | None:
    """Why a pool of that sharing mode cannot be served on a cluster whose attach found `observed`, or
    None. Only where NVIDIA's DRA driver runs: the scheduler path does not go through its plugin."""
    driver = observed.get("dra_driver") or {}
    gate = GATES.get(sharing_mode)
    if not driver.get("running") or gate is None or gate in driver.get("gates", ()):
        return None
    return (
        f"NVIDIA's DRA driver on this cluster runs without its {gate} feature gate, so its kubelet plugin "
        f"refuses the {sharing_mode} sharing NVKE configures: set featureGates.{gate}=true in the "
        "driver chart's values (helm upgrade). NVKE read the driver's gates when the cluster was attached."
    )
