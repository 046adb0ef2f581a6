"""The interface every infrastructure provider implements.

It is the seam between the control plane and the machines: the simulator implements it over a virtual
fleet, a Kubernetes provider implements the node operations through the official client (list nodes with
labels and GPU capacity, cordon, evict, set labels). The control plane never reads provider state except
through these calls."""

from abc import ABC, abstractmethod
from dataclasses import dataclass, field


class ProviderError(Exception):
    """An operation the provider refused or failed; `reason` is a CamelCase condition reason."""

    def __init__(self, reason: str, message: str):
        super().__init__(message)
        self.reason = reason
        self.message = message


@dataclass(frozen=True)
class GpuInfo:
    index: int
    uuid: str
    memory_mib: int
    nvlink_domain: str = ""
    healthy: bool = True


@dataclass(frozen=True)
class NodeInfo:
    name: str
    pool: str
    ready: bool
    unschedulable: bool
    driver_version: str
    cpu_millicores: int
    memory_mib: int
    labels: dict[str, str] = field(default_factory=dict)
    gpus: tuple[GpuInfo, ...] = ()


@dataclass(frozen=True)
class ScaleResult:
    """What a scale request achieved: the nodes that exist now and, if short, why."""

    nodes: int
    wanted: int
    reason: str = ""
    message: str = ""

    @property
    def complete(self) -> bool:
        return self.nodes == self.wanted


@dataclass(frozen=True)
class PoolSpec:
    """What a provider needs to know to build a pool's nodes; no ORM objects cross the seam."""

    cluster: str
    region: str
    name: str
    gpu_model: str
    gpu_memory_mib: int
    gpus_per_node: int
    nvlink: bool
    driver_version: str
    cpu_millicores_per_node: int
    memory_mib_per_node: int
    labels: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class ClusterAccess:
    """What provisioning hands back: the API endpoint and a cluster-admin bearer token. The token is a
    secret: the control plane stores it encrypted (Cluster.admin_token) and puts it only in kubeconfigs."""

    endpoint: str
    token: str = field(repr=False)


@dataclass(frozen=True)
class AddonStatus:
    """One add-on of the cluster's GPU stack as the provider reports it after an install."""

    name: str
    version: str
    status: str  # "installed", "installing" or "failed"
    message: str = ""


@dataclass(frozen=True)
class DriverStatus:
    """A node's driver as the provider sees it during an upgrade."""

    version: str
    busy: bool = False  # the last operation on the node (cordon, eviction, install) is still running
    failure: str = ""  # why the last driver install failed; empty when it did not
    gpus_healthy: bool = True
    ready: bool = True


class Provider(ABC):
    @abstractmethod
    def provision_cluster(self, cluster: str, region: str, control_plane_nodes: int) -> ClusterAccess:
        """Create (or find) the cluster's control plane; return its API endpoint and an admin token.
        Idempotent: a repeated call returns the same endpoint and token."""

    @abstractmethod
    def delete_cluster(self, cluster: str) -> None:
        """Tear down the control plane. Pools are deleted first by the caller."""

    @abstractmethod
    def scale_pool(self, spec: PoolSpec, count: int) -> ScaleResult:
        """Bring the pool to `count` nodes, as far as capacity allows."""

    @abstractmethod
    def delete_pool(self, cluster: str, pool: str) -> None:
        """Remove every node of the pool."""

    @abstractmethod
    def list_nodes(self, cluster: str, pool: str | None = None) -> list[NodeInfo]:
        """Nodes with labels and GPUs, optionally one pool's."""

    @abstractmethod
    def cordon(self, cluster: str, node: str) -> None: ...

    @abstractmethod
    def uncordon(self, cluster: str, node: str) -> None: ...

    @abstractmethod
    def evict(self, cluster: str, node: str, namespace: str, pod: str) -> None:
        """Evict one pod (the eviction API, honouring disruption budgets on a real cluster)."""

    @abstractmethod
    def set_node_labels(self, cluster: str, node: str, labels: dict[str, str | None]) -> None:
        """Set labels; a None value removes the label."""

    @abstractmethod
    def driver_version(self, cluster: str, node: str) -> str:
        """The NVIDIA driver version the node reports now."""

    def install_addons(self, cluster: str, addons: dict[str, str]) -> list[AddonStatus]:
        """Install (or find installed) the GPU stack add-ons, `{name: version}`, on a provisioned cluster
        (on Kubernetes: Helm releases of the GPU Operator and friends). Idempotent. A provider that cannot
        install them reports each as failed."""
        reason = f"{type(self).__name__} cannot install add-ons."
        return [AddonStatus(name, version, "failed", reason) for name, version in addons.items()]

    def install_driver(self, cluster: str, node: str, version: str) -> None:
        """Start installing driver `version` on a drained node (on Kubernetes: set the driver version and
        restart the node's driver pod). Idempotent: repeating it while it runs or after it succeeded does
        nothing. Progress is read with `driver_status`."""
        raise ProviderError("Unsupported", f"{type(self).__name__} cannot install drivers.")

    def driver_status(self, cluster: str, node: str) -> DriverStatus:
        return DriverStatus(version=self.driver_version(cluster, node))
