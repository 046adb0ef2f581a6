"""The interface every provider implements, in two halves.

`Infrastructure` makes and removes machines: a cluster's control plane, its node pools, its add-ons (what
a cloud or Cluster API does). It knows clusters by name. `ClusterOperations` acts on one cluster that
exists, bound to a `ClusterRef` (its API endpoint, bearer token and CA): list nodes, cordon, drain,
labels, drivers (what a Kubernetes client does). The control plane never reads provider state except
through these calls, and no ORM object crosses the seam.

Every call is idempotent, and the control plane makes them outside its transactions: it records what it
wants, commits, calls, and observes the result on its next pass (a call lost in a crash is made again)."""

from abc import ABC, abstractmethod
from dataclasses import dataclass, field


class ProviderError(Exception):
    """An operation the provider refused or failed; `reason` is a CamelCase condition reason. A provider
    that speaks HTTP also gives the answer's `status` code (0 when there was no answer)."""

    def __init__(self, reason: str, message: str, *, status: int = 0):
        super().__init__(message)
        self.reason = reason
        self.message = message
        self.status = status

    def __reduce__(self):
        # Exception pickles as cls(*args), args being (message,) alone: Celery could not carry it as a
        # task's result or exception without the reason and status.
        return (_rebuild, (type(self), self.reason, self.message, self.status))


def _rebuild(cls: type[ProviderError], reason: str, message: str, status: int) -> ProviderError:
    return cls(reason, message, status=status)


class ProvisioningInProgress(ProviderError):
    """Provisioning was asked for and is under way, nothing failed: the call is to be made again later
    (Cluster API brings a control plane up in minutes). `reason` and `message` say what it waits for."""


@dataclass(frozen=True)
class GpuInfo:
    index: int
    uuid: str
    memory_mib: int
    nvlink_domain: str = ""
    healthy: bool | None = True  # None: the provider cannot tell; NVKE's own verdict (telemetry) stands


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
    kubelet_version: str = ""  # status.nodeInfo.kubeletVersion: v1.34.2
    node_image: str = ""  # its machine's image (the catalog's name), where the provider knows it
    preflight: dict = field(default_factory=dict)  # sharing preflight facts it knows (nvke.agent.preflight)


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
    """What a provider needs to know to build a pool's nodes."""

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
    gpu_product: str = ""  # as NVML names it (NVIDIA H100 80GB HBM3): how an attached node is matched
    node_selector: dict[str, str] = field(default_factory=dict)  # attached clusters: which nodes may join
    kubernetes_version: str = ""  # the kubelet's minor version (1.34), for providers that make machines
    node_image: str = ""  # the catalog's image for its machines; "" the provider's own
    min_nodes: int = 0  # the bounds a cluster autoscaler may scale the pool within
    max_nodes: int = 0
    # Nodes to take out first when the pool shrinks (NVKE's autoscaler drained them); providers whose
    # `removes_chosen_nodes` is True honour it.
    remove_first: tuple[str, ...] = ()


@dataclass(frozen=True)
class ClusterAccess:
    """What provisioning hands back: the API endpoint, a cluster-admin bearer token and the CA bundle
    that signs the endpoint's certificate (PEM; empty when the endpoint's certificate is publicly
    trusted). The token is a secret: the control plane stores it encrypted (Cluster.admin_token)."""

    endpoint: str
    token: str = field(repr=False)
    ca_bundle: str = field(default="", repr=False)


@dataclass(frozen=True)
class ClusterRef:
    """One cluster as operations reach it: its name, API endpoint, bearer token and CA bundle, and the
    provider that drives it (the one that provisioned it, "kubernetes" for a cluster a tenant attached;
    empty: the one NVKE_PROVIDER names). Neither the token nor the CA bundle appears in a repr, so a ref in a
    log line or a traceback leaks nothing."""

    name: str
    endpoint: str
    token: str = field(repr=False)
    ca_bundle: str = field(default="", repr=False)
    provider: str = ""


@dataclass(frozen=True)
class AddonStatus:
    """One add-on of the cluster's GPU stack as the provider reports it after an install."""

    name: str
    version: str
    status: str  # "installed", "installing" or "failed"
    message: str = ""


@dataclass(frozen=True)
class DriverStatus:
    """A node's driver (or, in a Kubernetes upgrade, its kubelet) as the provider sees it during an
    upgrade."""

    version: str
    busy: bool = False  # the last operation on the node (cordon, drain, install) is still running
    failure: str = ""  # why the last install (or replacement) failed; empty when it did not
    gpus_healthy: bool = True
    ready: bool = True
    replaced_by: str = ""  # a replacement's node, where it has a name of its own (MachineStatus)


@dataclass(frozen=True)
class MachineStatus:
    """A node's machine as the provider sees it while it is being replaced."""

    kubelet_version: str
    image: str = ""
    busy: bool = False  # the replacement is still running
    failure: str = ""
    gpus_healthy: bool = True
    ready: bool = True
    # The new machine's node where it got a name of its own (Cluster API's machines do): the fields above
    # are that node's. Empty where the node keeps its name (the simulator).
    replaced_by: str = ""


@dataclass(frozen=True)
class DrainStatus:
    """How far a node's drain is: `done` once no evictable pod is left on it. While not done, `pods_left`
    counts the pods still there and `reason` says why they stay when an eviction is refused
    (`DisruptionBudget`: a PodDisruptionBudget answers 429; the drain is retried, not failed)."""

    done: bool
    pods_left: int = 0
    reason: str = ""
    message: str = ""

    @property
    def blocked(self) -> bool:
        return not self.done and bool(self.reason)


@dataclass(frozen=True)
class DeviceShare:
    """One GPU's part of a placement: which GPU, the memory held and the compute ceiling and guarantee."""

    index: int
    uuid: str
    memory_mib: int
    ceiling_percent: int
    guaranteed_percent: int
    exclusive: bool = False
    mig_profile: str = ""
    mig_start: int | None = None  # the slice's placement start on the GPU's memory-slice axis


@dataclass(frozen=True)
class WorkloadClaim:
    """A claim as the cluster's workloads see it. `source` says what stands for it there: "api" (NVKE
    made it: a ResourceClaim NVKE creates), "resourceclaim" (a ResourceClaim a user made, adopted) or
    "pod" (a pod scheduled by NVKE without DRA). Placed when `node` is set; else `pending_reason` says
    why not. `sharing_mode` and `isolation` are the pool's and the allocation's."""

    namespace: str
    name: str
    source: str
    kind: str
    gpus: int
    node: str = ""
    shares: tuple[DeviceShare, ...] = ()
    sharing_mode: str = ""
    isolation: str = ""
    pending_reason: str = ""
    environment: tuple[tuple[str, str], ...] = ()  # what its containers are to start with (MPS limits)
    group: str = ""  # "namespace/name" of its claim group (a gang), if any
    preempted_by: str = ""  # the claim that last took its GPUs, if any


@dataclass(frozen=True)
class FoundWorkload:
    """A GPU request NVKE did not make, found in a namespace it manages (a ResourceClaim or a pod with
    `schedulerName: nvke`): the control plane adopts it as a claim. `refusal` says why it cannot be
    (a request NVKE does not understand), which the provider reports on the object itself."""

    namespace: str
    name: str
    source: str
    kind: str = "whole"
    gpus: int = 1
    gpu_memory_mib: int | None = None
    compute_percent: int | None = None
    mig_profile: str = ""
    priority: int = 0
    refusal: str = ""
    group: str = ""  # the gang (PodGroup) its pod belongs to: adopted into that claim group
    group_min: int = 0  # the gang's minimum: NVKE places at least this many of its members at once


@dataclass(frozen=True)
class WorkloadState:
    """How far a claim's workload is on the cluster: `state` is "allocated" (the ResourceClaim carries
    NVKE's allocation, or the pod is bound), "waiting" (nothing placed yet, `message` says why),
    "conflict" (the cluster holds something NVKE did not write; nothing was overwritten) or "gone" (the
    user deleted the adopted object: the claim is to be released)."""

    namespace: str
    name: str
    state: str
    message: str = ""


@dataclass(frozen=True)
class WorkloadReport:
    states: tuple[WorkloadState, ...] = ()
    found: tuple[FoundWorkload, ...] = ()


class Infrastructure(ABC):
    """Clusters and pools as machines: create, scale, delete (a cloud's API, or Cluster API objects in
    a management cluster; on an attached cluster, adopting and releasing its nodes). Bound to the
    cluster it acts for, which a provider that reaches clusters by name alone may ignore."""

    # Whether scale_pool, shrinking, removes the nodes PoolSpec.remove_first names before any other. The
    # autoscaler scales a pool down only where it does, so no node but the one it drained is removed.
    removes_chosen_nodes: bool = False

    def __init__(self, cluster: ClusterRef):
        self.cluster = cluster

    @abstractmethod
    def provision_cluster(
        self, cluster: str, region: str, control_plane_nodes: int, kubernetes_version: str = ""
    ) -> ClusterAccess:
        """Create (or find) the cluster's control plane running `kubernetes_version` (a catalog minor,
        1.34); return its API endpoint, an admin token and CA. Idempotent: a repeated call returns the
        same access. A provider whose control plane takes a while raises ProvisioningInProgress until
        it serves."""

    @abstractmethod
    def delete_cluster(self, cluster: str) -> None:
        """Tear down the control plane. Pools are deleted first by the caller."""

    @abstractmethod
    def scale_pool(self, spec: PoolSpec, count: int) -> ScaleResult:
        """Bring the pool to `count` nodes, as far as capacity allows; shrinking, remove
        `spec.remove_first` first where the provider can (`removes_chosen_nodes`)."""

    @abstractmethod
    def delete_pool(self, cluster: str, pool: str) -> None:
        """Remove every node of the pool."""

    def install_addons(self, cluster: str, addons: dict[str, str]) -> list[AddonStatus]:
        """Install (or find installed) the GPU stack add-ons, `{name: version}`, on a provisioned cluster
        (Helm releases, or Cluster API add-on objects). Idempotent. A provider that cannot install them
        reports each as failed."""
        reason = f"{type(self).__name__} cannot install add-ons."
        return [AddonStatus(name, version, "failed", reason) for name, version in addons.items()]

    def upgrade_control_plane(self, cluster: str, kubernetes_version: str) -> str:
        """Ask the cluster's control plane to run `kubernetes_version` (a catalog minor: 1.35), one minor
        above what it runs (upgrades.control_plane checks the skew rules first); return the minor it
        runs now, which is the target once the upgrade is done. Idempotent: asking again while it runs
        only reports. A provider that does not make control planes refuses (ProviderError)."""
        raise ProviderError("Unsupported", f"{type(self).__name__} cannot upgrade control planes.")

    def repair_node(self, cluster: str, pool: str, node: str) -> bool:
        """Replace a node that stopped reporting (the pool's next scale brings a fresh one). False when
        the provider cannot: the node stays NotReady until someone repairs it."""
        return False


class ClusterOperations(ABC):
    """Operations on one running cluster's nodes, bound to its `ClusterRef`."""

    # Whether replace_node can give a node a new machine on another Kubernetes version or image (what a
    # pool's Kubernetes and image upgrades step through).
    replaces_nodes: bool = False

    def __init__(self, cluster: ClusterRef):
        self.cluster = cluster

    @abstractmethod
    def list_nodes(self, pool: str | None = None) -> list[NodeInfo]:
        """Nodes with labels and GPUs, optionally one pool's."""

    @abstractmethod
    def cordon(self, node: str) -> None: ...

    @abstractmethod
    def uncordon(self, node: str) -> None: ...

    @abstractmethod
    def drain(self, node: str) -> None:
        """Start (or continue) draining the node: cordon it and evict every evictable pod through the
        eviction API, which honours PodDisruptionBudgets. Idempotent; progress is `drain_status`."""

    @abstractmethod
    def drain_status(self, node: str) -> DrainStatus: ...

    @abstractmethod
    def set_node_labels(self, node: str, labels: dict[str, str | None]) -> None:
        """Set labels; a None value removes the label."""

    @abstractmethod
    def driver_version(self, node: str) -> str:
        """The NVIDIA driver version the node reports now."""

    def install_driver(self, node: str, version: str) -> None:
        """Start installing driver `version` on a drained node (on Kubernetes: through the GPU Operator).
        Idempotent: repeating it while it runs or after it succeeded does nothing. Progress is read
        with `driver_status`."""
        raise ProviderError("Unsupported", f"{type(self).__name__} cannot install drivers.")

    def driver_status(self, node: str) -> DriverStatus:
        return DriverStatus(version=self.driver_version(node))

    def replace_node(self, node: str, kubernetes_version: str, image: str = "") -> None:
        """Replace a drained node's machine with one whose kubelet runs `kubernetes_version` (a minor:
        1.35), booted from `image` (the catalog's name; "" the provider's own), keeping its place in the
        pool; the new machine's node may have another name (`MachineStatus.replaced_by`). Idempotent,
        like install_driver; progress is `machine_status`, asked by the old name. A provider that does
        not make machines refuses (an attached cluster's are the tenant's own)."""
        raise ProviderError("Unsupported", f"{type(self).__name__} cannot replace nodes.")

    def machine_status(self, node: str) -> MachineStatus:
        """The node's machine during a replacement (or, replaced, its successor's): its kubelet and
        image, and whether it is done."""
        raise ProviderError("Unsupported", f"{type(self).__name__} cannot replace nodes.")

    def report_upgrade_state(self, node: str, state: str) -> None:
        """Show a driver upgrade's state for the node where the cluster's own tools see it (the GPU
        Operator's `nvidia.com/gpu-driver-upgrade-state` label on Kubernetes). Informational: by default
        nothing."""
        return None

    def sync_workloads(
        self,
        claims: list[WorkloadClaim],
        refused: dict[tuple[str, str], str] | None = None,
        *,
        tenant: str,
    ) -> WorkloadReport:
        """Make the cluster's workloads agree with the claims of the cluster (all of them, each call:
        level-triggered) and report what it found; `refused` says, by (namespace, name), why requests
        found earlier were not adopted, for the provider to say on them. `tenant` (the cluster's
        owner's slug) is the one tenant the namespaces NVKE acts in there belong to. A provider without
        workloads (the simulator, whose claims are rows only) has nothing to do."""
        return WorkloadReport()

    def record_health(self, node: str, *, ready: bool | None = None, failed_gpu: int | None = None) -> None:
        """The control plane's verdict from telemetry (a node silent or back, a GPU with a fatal XID).
        A real cluster learns health from its own agents, so by default this does nothing; the simulator
        keeps it so that its next `list_nodes` agrees."""
        return None
