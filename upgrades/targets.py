"""What a run moves, a node at a time: the pool's driver (installed in place through the GPU Operator's
path), its Kubernetes version or its node image (for both, each node's machine replaced by one with the
new kubelet or image, the other kept). The controller asks the run's Target for every version, provider
call and record; upgrades.node_machine sees only versions, compared as strings."""

from clusters.skew import minor_of
from nodepools import nodes as node_rows
from nodepools import services as pool_services
from nodepools.models import Node
from nvke.providers.base import ClusterOperations, DriverStatus

from .models import UpgradeRun


class DriverTarget:
    what = "driver"
    replaces = False  # machines: a run may add surge nodes (max_surge) and gives new machines its target

    def __init__(self, run: UpgradeRun):
        self.run = run

    @property
    def version(self) -> str:
        return self.run.target_release.version

    def comparable(self, reported: str) -> str:
        return reported

    def node_version(self, node: Node) -> str:
        return node.driver_version

    def status(self, ops: ClusterOperations, node: str) -> DriverStatus:
        return ops.driver_status(node)

    def start(self, ops: ClusterOperations, node: str, version: str) -> None:
        ops.install_driver(node, version)

    def record(self, node: Node, status: DriverStatus) -> None:
        node_rows.record_driver(node, version=status.version, gpus_healthy=status.gpus_healthy)

    def complete(self) -> None:
        pool_services.complete_upgrade(self.run.pool_id, driver_release=self.run.target_release)

    def new_machines(self) -> dict[str, str]:
        """What the pool's new machines get while the run is live (NodePool.new_machines)."""
        return {}


class _Replacement(DriverTarget):
    """A new machine per node: what the provider reports of it (`machine_status`) is read as a driver
    install's status is, its `version` the kubelet's or the image's. Where the new machine's node has
    a name of its own (`replaced_by`), the run's row follows it (controller._follow_replacements)."""

    replaces = True

    def _reported(self, kubelet: str, image: str) -> str:
        raise NotImplementedError

    def status(self, ops: ClusterOperations, node: str) -> DriverStatus:
        machine = ops.machine_status(node)
        return DriverStatus(
            version=self._reported(machine.kubelet_version, machine.image),
            busy=machine.busy,
            failure=machine.failure,
            gpus_healthy=machine.gpus_healthy,
            ready=machine.ready,
            replaced_by=machine.replaced_by,
        )


class KubernetesTarget(_Replacement):
    """Versions are minors (1.35): a kubelet's v1.35.2 counts as 1.35, as the skew rules count it."""

    what = "Kubernetes"

    @property
    def version(self) -> str:
        return self.run.kubernetes_version

    def comparable(self, reported: str) -> str:
        try:
            major, minor = minor_of(reported)
        except ValueError:
            return ""  # not reported (yet): never the target
        return f"{major}.{minor}"

    def node_version(self, node: Node) -> str:
        return self.comparable(node.kubelet_version)

    def _reported(self, kubelet: str, image: str) -> str:
        return kubelet

    def start(self, ops: ClusterOperations, node: str, version: str) -> None:
        image = self.run.pool.node_image.name if self.run.pool.node_image_id else ""
        ops.replace_node(node, version, image)

    def record(self, node: Node, status: DriverStatus) -> None:
        node_rows.record_machine(node, kubelet_version=status.version)

    def complete(self) -> None:
        pool_services.complete_upgrade(self.run.pool_id, kubernetes_version=self.run.kubernetes_version)

    def new_machines(self) -> dict[str, str]:
        return {"kubernetes_version": self.version}


class ImageTarget(_Replacement):
    what = "image"

    @property
    def version(self) -> str:
        return self.run.node_image.name

    def node_version(self, node: Node) -> str:
        return node.node_image

    def _reported(self, kubelet: str, image: str) -> str:
        return image

    def start(self, ops: ClusterOperations, node: str, version: str) -> None:
        ops.replace_node(node, self.run.pool.kubernetes_version, version)

    def record(self, node: Node, status: DriverStatus) -> None:
        node_rows.record_machine(node, node_image=status.version)

    def complete(self) -> None:
        pool_services.complete_upgrade(self.run.pool_id, node_image=self.run.node_image)

    def new_machines(self) -> dict[str, str]:
        return {"node_image": self.version}


TARGETS = {
    UpgradeRun.Kind.DRIVER: DriverTarget,
    UpgradeRun.Kind.KUBERNETES: KubernetesTarget,
    UpgradeRun.Kind.IMAGE: ImageTarget,
}


def target_of(run: UpgradeRun) -> DriverTarget:
    return TARGETS[run.kind](run)
