"""The checks a cluster passes before NVKE saves it: it answers over TLS with the CA given, the token is
accepted, the Kubernetes version is one NVKE can drive, the service account may do what NVKE needs, and
the GPU Operator and GPU feature discovery run there. Read-only: a refused attach leaves nothing behind."""

from dataclasses import dataclass

from kubernetes import client

from nvke.providers.base import ClusterRef, ProviderError

from . import rbac
from .client import api_client, call, plain

MIN_VERSION = (1, 30)  # scheduling gates (KEP-3521) are stable from here; older clusters are refused
DRA_VERSION = (1, 34)  # resource.k8s.io/v1: NVKE allocates GPUs as DRA ResourceClaims from here
GFD_PRODUCT = "nvidia.com/gpu.product"


@dataclass(frozen=True)
class Failure:
    """One check the cluster did not pass: `check` names it, `reason` is a CamelCase reason."""

    check: str
    reason: str
    message: str


@dataclass(frozen=True)
class ClusterFacts:
    """What attach found: the server's version, which features it allows, the GPU stack it runs."""

    version: str  # gitVersion, e.g. v1.34.2
    minor: tuple[int, int]
    dra: bool  # resource.k8s.io/v1 is served (1.34+)
    dra_gpu_driver: bool  # NVIDIA's DRA driver publishes ResourceSlices
    gpu_operator: str  # what the ClusterPolicy says, e.g. "cluster-policy (driver 570.133.20)"
    nvidia_driver_crd: bool  # the operator runs drivers from NVIDIADriver objects: NVKE can upgrade
    gpu_nodes: int
    gpu_products: tuple[str, ...] = ()

    @property
    def features(self) -> dict[str, bool]:
        return {
            "dra": self.dra,
            "dra_gpu_driver": self.dra_gpu_driver,
            "driver_upgrades": self.nvidia_driver_crd,
        }

    def as_json(self) -> dict:
        return {
            "version": self.version,
            "features": self.features,
            "gpu_operator": self.gpu_operator,
            "gpu_nodes": self.gpu_nodes,
            "gpu_products": list(self.gpu_products),
        }


class AttachRefused(Exception):
    def __init__(self, failures: list[Failure]):
        super().__init__("; ".join(f.message for f in failures))
        self.failures = failures


def parse_version(info: dict) -> tuple[int, int]:
    """(major, minor) from /version; a minor like "34+" (managed clouds) counts as 34."""
    return int(info["major"]), int("".join(ch for ch in info["minor"] if ch.isdigit()))


def inspect(cluster: ClusterRef) -> ClusterFacts:
    """Run every check; raise AttachRefused listing each that failed, else return the facts."""
    api = api_client(cluster)
    try:
        return _inspect(api)
    finally:
        api.close()


def _inspect(api: client.ApiClient) -> ClusterFacts:
    try:
        info = plain(api, call(client.VersionApi(api).get_code))
        minor = parse_version(info)
        groups = plain(api, call(client.ApisApi(api).get_api_versions)).get("groups") or []
    except ProviderError as error:  # nothing further can be asked of a server that does not answer
        raise AttachRefused([Failure("reachable", error.reason, error.message)]) from None
    except (KeyError, ValueError, TypeError):  # it answered, with something else than /version's shape
        message = "The endpoint answered, but not as a Kubernetes API server does (/version)."
        raise AttachRefused([Failure("reachable", "NotKubernetes", message)]) from None
    failures: list[Failure] = []
    if minor < MIN_VERSION:
        failures.append(
            Failure(
                "version",
                "UnsupportedVersion",
                f"Kubernetes {info['gitVersion']} is older than {'.'.join(map(str, MIN_VERSION))}, the "
                f"oldest NVKE drives (DRA allocation needs {'.'.join(map(str, DRA_VERSION))} or newer).",
            )
        )
    dra = minor >= DRA_VERSION and _serves(groups, "resource.k8s.io", "v1")
    failures += _access_failures(api, dra)
    operator, driver_crd = _gpu_operator(api, groups, failures)
    products, gpu_nodes = _gfd(api, failures)
    if failures:
        raise AttachRefused(failures)
    return ClusterFacts(
        version=info["gitVersion"],
        minor=minor,
        dra=dra,
        dra_gpu_driver=dra and _dra_slices(api),
        gpu_operator=operator,
        nvidia_driver_crd=driver_crd,
        gpu_nodes=gpu_nodes,
        gpu_products=products,
    )


def _serves(groups: list[dict], group: str, version: str) -> bool:
    """Whether discovery (`/apis`) lists that group and version."""
    return any(
        g["name"] == group and any(v["version"] == version for v in g.get("versions", [])) for g in groups
    )


def _access_failures(api: client.ApiClient, dra: bool) -> list[Failure]:
    """One SelfSubjectAccessReview per verb and resource NVKE needs (rbac.py); every refusal is listed."""
    try:
        refused = rbac.missing(api, dra)
    except ProviderError as error:
        return [Failure("access", error.reason, error.message)]
    return [Failure("access", "Forbidden", rbac.refusal(refused))] if refused else []


def _gpu_operator(api: client.ApiClient, groups: list[dict], failures: list[Failure]) -> tuple[str, bool]:
    """The ClusterPolicy the GPU Operator reconciles, and whether it runs drivers from NVIDIADrivers."""
    missing = Failure(
        "gpu_operator",
        "NoGpuOperator",
        "The NVIDIA GPU Operator is not installed (no nvidia.com ClusterPolicy): install it with "
        "driver.nvidiaDriverCRD.enabled=true.",
    )
    if not _serves(groups, "nvidia.com", "v1"):
        failures.append(missing)
        return "", False
    try:
        policies = call(
            client.CustomObjectsApi(api).list_cluster_custom_object, "nvidia.com", "v1", "clusterpolicies"
        )
    except ProviderError as error:
        failures.append(Failure("gpu_operator", error.reason, error.message))
        return "", False
    if not policies.get("items"):
        failures.append(missing)
        return "", False
    policy = policies["items"][0]
    driver = policy.get("spec", {}).get("driver", {})
    crd = bool(driver.get("useNvidiaDriverCRD")) and _serves(groups, "nvidia.com", "v1alpha1")
    described = policy["metadata"]["name"] + (
        f" (driver {driver['version']})" if driver.get("version") else ""
    )
    return described, crd


def _gfd(api: client.ApiClient, failures: list[Failure]) -> tuple[tuple[str, ...], int]:
    """GPU products and node count from GPU feature discovery's labels."""
    try:
        nodes = call(client.CoreV1Api(api).list_node, label_selector=GFD_PRODUCT).items
    except ProviderError as error:
        failures.append(Failure("gpu_feature_discovery", error.reason, error.message))
        return (), 0
    if not nodes:
        failures.append(
            Failure(
                "gpu_feature_discovery",
                "NoGpuNodes",
                f"No node has the {GFD_PRODUCT} label: GPU feature discovery (part of the GPU Operator) "
                "is not running or the cluster has no GPU nodes.",
            )
        )
    products = sorted({node.metadata.labels[GFD_PRODUCT] for node in nodes})
    return tuple(products), len(nodes)


def _dra_slices(api: client.ApiClient) -> bool:
    try:
        slices = call(
            client.ResourceV1Api(api).list_resource_slice,
            field_selector="spec.driver=gpu.nvidia.com",
            limit=1,
        )
    except ProviderError:
        return False  # reading slices is optional: without them GPUs come from GFD labels
    return bool(slices.items)
