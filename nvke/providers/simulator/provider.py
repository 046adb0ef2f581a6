import datetime
import os
import random
import secrets
import uuid

from django.db import transaction
from django.db.models import F
from django.utils import timezone

from catalog.models import NodeImage, RegionInventory

from ..base import (
    AddonStatus,
    ClusterAccess,
    ClusterOperations,
    ClusterRef,
    DrainStatus,
    DriverStatus,
    GpuInfo,
    Infrastructure,
    MachineStatus,
    NodeInfo,
    PoolSpec,
    ProviderError,
    ScaleResult,
)
from .models import SimCluster, SimFault, SimNode


def upgrade_step_seconds() -> dict[str, float]:
    """How long each upgrade operation keeps a simulated node busy: NVKE_SIM_UPGRADE_STEP_S, e.g.
    "cordon=1,evict=5,install=60,replace=90" (`evict` is a drain's, `replace` a Kubernetes upgrade's new
    machine's; unnamed operations take 0 s; read at each call, so tests can set it)."""
    spec = os.environ.get("NVKE_SIM_UPGRADE_STEP_S", "install=2,replace=3")
    pairs = (item.split("=") for item in spec.split(",") if item.strip())
    return {name.strip(): float(value) for name, value in pairs}


def driver_failure_rate() -> float:
    """The chance that a simulated driver install fails (NVKE_SIM_DRIVER_FAILURE_RATE, 0 to 1)."""
    return float(os.environ.get("NVKE_SIM_DRIVER_FAILURE_RATE", "0"))


def _busy_for(operation: str) -> datetime.datetime | None:
    seconds = upgrade_step_seconds().get(operation, 0)
    return timezone.now() + datetime.timedelta(seconds=seconds) if seconds else None


def _take_fault(operation: str, target: str) -> SimFault | None:
    """Consume one matching injected fault, if any. Faults are rare: one unlocked read finds there is
    none before a transaction is opened to take one."""
    faults = SimFault.objects.filter(operation=operation, remaining__gt=0, target__in=["", target])
    if not faults.exists():
        return None
    with transaction.atomic():
        fault = faults.select_for_update().order_by("pk").first()
        if fault is not None:
            SimFault.objects.filter(pk=fault.pk).update(remaining=F("remaining") - 1)
        return fault


def _raise_injected_fault(operation: str, target: str) -> None:
    if fault := _take_fault(operation, target):
        raise ProviderError(fault.reason, fault.message)


def _settle_install(node: SimNode) -> None:
    """A finished install takes effect: the new driver, or the old one and the failure."""
    if not node.driver_target or (node.busy_until and node.busy_until > timezone.now()):
        return
    if node.driver_outcome in ("", "unhealthy"):
        node.driver_version = node.driver_target
        node.labels["nvidia.com/cuda.driver.major"] = node.driver_target.split(".")[0]
        if node.driver_outcome == "unhealthy" and node.gpus:
            node.gpus[0]["healthy"] = False
    else:
        node.driver_failure = node.driver_outcome
    node.driver_target, node.driver_outcome = "", ""
    node.save(
        update_fields=[
            "driver_version",
            "labels",
            "gpus",
            "driver_target",
            "driver_outcome",
            "driver_failure",
        ]
    )


def _kubelet(minor: str) -> str:
    """The kubelet version a new virtual machine of Kubernetes `minor` reports: its first patch."""
    return f"v{minor}.0" if minor else ""


def _kernel(image: str) -> dict:
    """The preflight facts a machine of catalog image `image` reports: its kernel."""
    kernel = NodeImage.objects.filter(name=image).values_list("kernel_version", flat=True).first()
    return {"kernel_version": kernel} if kernel else {}


def _settle_replacement(node: SimNode) -> None:
    """A finished replacement takes effect: a fresh machine, same name, the new kubelet and image (its
    kernel), healthy GPUs."""
    if not (node.kubelet_target or node.image_target) or (
        node.busy_until and node.busy_until > timezone.now()
    ):
        return
    node.kubelet_version, node.image = node.kubelet_target or node.kubelet_version, node.image_target
    node.kubelet_target, node.image_target, node.driver_failure = "", "", ""
    node.gpus = [{**gpu, "healthy": True} for gpu in node.gpus]
    node.preflight = {**node.preflight, **_kernel(node.image)}
    node.save(
        update_fields=[
            "kubelet_version",
            "image",
            "kubelet_target",
            "image_target",
            "driver_failure",
            "gpus",
            "preflight",
        ]
    )


# A simulated node is fit for every sharing mode unless it is given other facts (SimNode.preflight, a
# fault); its MIG mode stays unknown, as the simulator cuts slices whatever the mode.
FIT_NODE = {
    "kernel_version": "6.8.0-nvke-sim",
    "iommu": True,
    "mps": True,
    "nvml_memory": True,
    "nvml_utilization": True,
}


def _node_info(node: SimNode) -> NodeInfo:
    return NodeInfo(
        name=node.name,
        pool=node.pool,
        ready=node.ready,
        unschedulable=node.unschedulable,
        driver_version=node.driver_version,
        kubelet_version=node.kubelet_version,
        node_image=node.image,
        cpu_millicores=node.cpu_millicores,
        memory_mib=node.memory_mib,
        labels=dict(node.labels),
        gpus=tuple(GpuInfo(**gpu) for gpu in node.gpus),
        preflight={**FIT_NODE, **node.preflight},
    )


class SimulatorInfrastructure(Infrastructure):
    """A virtual fleet with real GPU figures from the catalog and finite regional inventory."""

    removes_chosen_nodes = True

    def provision_cluster(
        self, cluster: str, region: str, control_plane_nodes: int, kubernetes_version: str = ""
    ) -> ClusterAccess:
        _raise_injected_fault(SimFault.Operation.PROVISION_CLUSTER, cluster)
        sim, _ = SimCluster.objects.get_or_create(
            key=cluster,
            defaults={
                "region": region,
                "control_plane_nodes": control_plane_nodes,
                "endpoint": f"https://{cluster}.{region}.k8s.nvke.local:6443",
                "admin_token": secrets.token_urlsafe(32),
                "kubernetes_version": kubernetes_version,
            },
        )
        if not sim.admin_token:  # a virtual cluster made before tokens were issued
            sim.admin_token = secrets.token_urlsafe(32)
            sim.save(update_fields=["admin_token"])
        return ClusterAccess(endpoint=sim.endpoint, token=sim.admin_token)

    def install_addons(self, cluster: str, addons: dict[str, str]) -> list[AddonStatus]:
        """The virtual cluster runs whatever it is given: every add-on is installed at once."""
        if not SimCluster.objects.filter(key=cluster).exists():
            raise ProviderError("ClusterNotFound", f"Cluster {cluster} does not exist.")
        return [AddonStatus(name, version, "installed") for name, version in addons.items()]

    def delete_cluster(self, cluster: str) -> None:
        SimCluster.objects.filter(key=cluster).delete()

    def upgrade_control_plane(self, cluster: str, kubernetes_version: str) -> str:
        """The virtual control plane runs the new version at once."""
        _raise_injected_fault(SimFault.Operation.UPGRADE_CONTROL_PLANE, cluster)
        if not SimCluster.objects.filter(key=cluster).update(kubernetes_version=kubernetes_version):
            raise ProviderError("ClusterNotFound", f"Cluster {cluster} does not exist.")
        return kubernetes_version

    def scale_pool(self, spec: PoolSpec, count: int) -> ScaleResult:
        _raise_injected_fault(SimFault.Operation.SCALE_POOL, f"{spec.cluster}/{spec.name}")
        with transaction.atomic():
            sim_cluster = SimCluster.objects.filter(key=spec.cluster).first()
            if sim_cluster is None:
                raise ProviderError("ClusterNotFound", f"Cluster {spec.cluster} does not exist.")
            # One lock per region and GPU model serialises every pool drawing on that inventory.
            inventory = (
                RegionInventory.objects.select_for_update()
                .filter(region__name=spec.region, gpu_model__name=spec.gpu_model)
                .first()
            )
            nodes = list(SimNode.objects.filter(cluster=sim_cluster, pool=spec.name).order_by("-created_at"))
            if count < len(nodes):  # the chosen nodes first, then the newest
                nodes.sort(key=lambda n: n.name not in spec.remove_first)
                SimNode.objects.filter(pk__in=[n.pk for n in nodes[: len(nodes) - count]]).delete()
                return ScaleResult(nodes=count, wanted=count)
            total = inventory.total_gpus if inventory else 0
            used = sum(
                len(gpus)
                for gpus in SimNode.objects.filter(region=spec.region, gpu_model=spec.gpu_model).values_list(
                    "gpus", flat=True
                )
            )
            can_add = max(min(count - len(nodes), (total - used) // spec.gpus_per_node), 0)
            for _ in range(can_add):
                self._create_node(sim_cluster, spec)
            have = len(nodes) + can_add
            free = max(total - used - can_add * spec.gpus_per_node, 0)
        if have < count:
            return ScaleResult(
                nodes=have,
                wanted=count,
                reason="InsufficientCapacity",
                message=(
                    f"Region {spec.region} has {free} of {total} {spec.gpu_model} GPUs free; "
                    f"{count - have} of {count} nodes ({spec.gpus_per_node} GPUs each) are waiting "
                    "for capacity."
                ),
            )
        return ScaleResult(nodes=have, wanted=count)

    def _create_node(self, sim_cluster: SimCluster, spec: PoolSpec) -> SimNode:
        name = f"{spec.cluster}-{spec.name}-{secrets.token_hex(4)}"
        nvlink_domain = f"{name}-nvlink" if spec.nvlink and spec.gpus_per_node > 1 else ""
        gpus = [
            {
                "index": index,
                "uuid": f"GPU-{uuid.uuid4()}",
                "memory_mib": spec.gpu_memory_mib,
                "nvlink_domain": nvlink_domain,
                "healthy": True,
            }
            for index in range(spec.gpus_per_node)
        ]
        labels = {
            **spec.labels,
            "kubernetes.io/hostname": name,
            "topology.kubernetes.io/region": spec.region,
            "nvidia.com/gpu.product": spec.gpu_model,
            "nvidia.com/gpu.count": str(spec.gpus_per_node),
            "nvidia.com/gpu.memory": str(spec.gpu_memory_mib),
            "nvidia.com/cuda.driver.major": spec.driver_version.split(".")[0],
        }
        return SimNode.objects.create(
            cluster=sim_cluster,
            pool=spec.name,
            name=name,
            region=spec.region,
            gpu_model=spec.gpu_model,
            driver_version=spec.driver_version,
            kubelet_version=_kubelet(spec.kubernetes_version),
            image=spec.node_image,
            preflight=_kernel(spec.node_image),
            cpu_millicores=spec.cpu_millicores_per_node,
            memory_mib=spec.memory_mib_per_node,
            labels=labels,
            gpus=gpus,
        )

    def delete_pool(self, cluster: str, pool: str) -> None:
        SimNode.objects.filter(cluster__key=cluster, pool=pool).delete()

    def repair_node(self, cluster: str, pool: str, node: str) -> bool:
        """The virtual node goes; the pool's next scale creates a fresh one."""
        SimNode.objects.filter(cluster__key=cluster, pool=pool, name=node).delete()
        return True


class SimulatorOperations(ClusterOperations):
    """Operations on one virtual cluster. The ref's token must be the cluster's admin token, as a real
    API server would insist."""

    replaces_nodes = True  # a virtual machine is replaced in place, its name kept

    def __init__(self, cluster: ClusterRef):
        super().__init__(cluster)
        self._checked = False

    def _nodes(self):
        if not self._checked:
            sim = SimCluster.objects.filter(key=self.cluster.name).first()
            if sim is None:
                raise ProviderError("ClusterNotFound", f"Cluster {self.cluster.name} does not exist.")
            if not secrets.compare_digest(sim.admin_token, self.cluster.token):
                raise ProviderError("Unauthorized", f"The token for {self.cluster.name} is not valid.")
            self._checked = True
        return SimNode.objects.filter(cluster__key=self.cluster.name)

    def list_nodes(self, pool: str | None = None) -> list[NodeInfo]:
        nodes = self._nodes()
        if pool is not None:
            nodes = nodes.filter(pool=pool)
        for node in nodes:
            _settle_install(node)
        return [_node_info(node) for node in nodes]

    def _node(self, node: str, *, lock: bool = False) -> SimNode:
        nodes = self._nodes().select_for_update(of=("self",)) if lock else self._nodes()
        try:
            return nodes.get(name=node)
        except SimNode.DoesNotExist:
            raise ProviderError(
                "NodeNotFound", f"Node {node} does not exist in cluster {self.cluster.name}."
            ) from None

    def cordon(self, node: str) -> None:
        _raise_injected_fault(SimFault.Operation.CORDON, node)
        # Only a node not yet cordoned starts the cordon's simulated time: repeating it changes nothing.
        SimNode.objects.filter(pk=self._node(node).pk, unschedulable=False).update(
            unschedulable=True, busy_until=_busy_for("cordon")
        )

    def uncordon(self, node: str) -> None:
        _raise_injected_fault(SimFault.Operation.UNCORDON, node)
        # Schedulable again: workloads may land, so the next drain has work to do.
        SimNode.objects.filter(pk=self._node(node).pk).update(unschedulable=False, drain_state="")

    def drain(self, node: str) -> None:
        """Cordon, then evict for `evict` seconds of NVKE_SIM_UPGRADE_STEP_S. An injected `drain` fault
        refuses the evictions (with reason `DisruptionBudget` it stands for a PodDisruptionBudget): the
        drain stays blocked until a later call finds no fault left."""
        with transaction.atomic():
            sim = self._node(node, lock=True)
            if sim.drain_state in (SimNode.Drain.DRAINING, SimNode.Drain.DRAINED):
                return  # running or done already
            sim.unschedulable = True
            if fault := _take_fault(SimFault.Operation.DRAIN, node):
                sim.drain_state, sim.drain_reason, sim.drain_message = (
                    SimNode.Drain.BLOCKED,
                    fault.reason,
                    fault.message,
                )
            else:
                sim.busy_until = _busy_for("evict")
                sim.drain_state = SimNode.Drain.DRAINING if sim.busy_until else SimNode.Drain.DRAINED
                sim.drain_reason, sim.drain_message = "", ""
            sim.save(
                update_fields=["unschedulable", "busy_until", "drain_state", "drain_reason", "drain_message"]
            )

    def drain_status(self, node: str) -> DrainStatus:
        """The simulator has no pods: until a drain finishes, one stands for the node's workloads."""
        sim = self._node(node)
        running = sim.busy_until is not None and sim.busy_until > timezone.now()
        if sim.drain_state == SimNode.Drain.DRAINING and not running:
            SimNode.objects.filter(pk=sim.pk).update(drain_state=SimNode.Drain.DRAINED)
            sim.drain_state = SimNode.Drain.DRAINED
        if sim.drain_state == SimNode.Drain.DRAINED:
            return DrainStatus(done=True)
        if sim.drain_state == SimNode.Drain.BLOCKED:
            return DrainStatus(done=False, pods_left=1, reason=sim.drain_reason, message=sim.drain_message)
        return DrainStatus(done=False, pods_left=1)

    def set_node_labels(self, node: str, labels: dict[str, str | None]) -> None:
        with transaction.atomic():
            sim = self._node(node, lock=True)
            for key, value in labels.items():
                if value is None:
                    sim.labels.pop(key, None)
                else:
                    sim.labels[key] = value
            sim.save(update_fields=["labels"])

    def driver_version(self, node: str) -> str:
        return self._node(node).driver_version

    def install_driver(self, node: str, version: str) -> None:
        with transaction.atomic():
            sim = self._node(node, lock=True)
            _settle_install(sim)
            if sim.driver_target == version or (sim.driver_version == version and not sim.driver_failure):
                return  # running or done already
            if fault := _take_fault(SimFault.Operation.INSTALL_DRIVER, node):
                outcome = f"{fault.reason}: {fault.message}"
            elif _take_fault(SimFault.Operation.VALIDATE, node):
                outcome = "unhealthy"
            elif random.random() < driver_failure_rate():
                outcome = "SimulatedInstallFailure: the driver did not load"
            else:
                outcome = ""
            sim.driver_target, sim.driver_outcome, sim.driver_failure = version, outcome, ""
            sim.busy_until = _busy_for("install")
            sim.save(update_fields=["driver_target", "driver_outcome", "driver_failure", "busy_until"])
            _settle_install(sim)  # an install that takes no time is done at once

    def driver_status(self, node: str) -> DriverStatus:
        sim = self._node(node)
        _settle_install(sim)
        return DriverStatus(
            version=sim.driver_version,
            busy=bool(sim.busy_until and sim.busy_until > timezone.now()),
            failure=sim.driver_failure,
            gpus_healthy=all(gpu["healthy"] for gpu in sim.gpus),
            ready=sim.ready,
        )

    def replace_node(self, node: str, kubernetes_version: str, image: str = "") -> None:
        wanted = (_kubelet(kubernetes_version), image)
        with transaction.atomic():
            sim = self._node(node, lock=True)
            _settle_replacement(sim)
            if wanted in ((sim.kubelet_target, sim.image_target), (sim.kubelet_version, sim.image)):
                return  # running or done already
            _raise_injected_fault(SimFault.Operation.REPLACE_NODE, node)
            (sim.kubelet_target, sim.image_target), sim.busy_until = wanted, _busy_for("replace")
            sim.save(update_fields=["kubelet_target", "image_target", "busy_until"])
            _settle_replacement(sim)  # a replacement that takes no time is done at once

    def machine_status(self, node: str) -> MachineStatus:
        sim = self._node(node)
        _settle_replacement(sim)
        return MachineStatus(
            kubelet_version=sim.kubelet_version,
            image=sim.image,
            busy=bool(sim.busy_until and sim.busy_until > timezone.now()),
            gpus_healthy=all(gpu["healthy"] for gpu in sim.gpus),
            ready=sim.ready,
        )

    def record_health(self, node: str, *, ready: bool | None = None, failed_gpu: int | None = None) -> None:
        with transaction.atomic():
            sim = self._nodes().select_for_update().filter(name=node).first()
            if sim is None:
                return  # gone already: nothing left to agree with
            if ready is not None:
                sim.ready = ready
            if failed_gpu is not None:
                sim.gpus = [{**g, "healthy": False} if g["index"] == failed_gpu else g for g in sim.gpus]
            sim.save(update_fields=["ready", "gpus"])
