"""What a run moves, a node at a time: the pool's driver (installed in place through the GPU Operator's
path) or its Kubernetes version (each node's machine replaced by one whose kubelet runs the target).
The controller asks the run's Target for every version, provider call and record; upgrades.machine
sees only versions, compared as strings."""

from clusters.skew import minor_of
from nodepools import nodes as node_rows
from nodepools.models import Node, NodePool
from nvke.providers.base import ClusterOperations, DriverStatus

from .models import UpgradeRun


class DriverTarget:
    what = "driver"

    def version(self, run: UpgradeRun) -> str:
        return run.target_release.version

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

    def complete(self, run: UpgradeRun) -> None:
        NodePool.objects.filter(pk=run.pool_id).update(driver_release=run.target_release)


class KubernetesTarget(DriverTarget):
    """Versions are minors (1.35): a kubelet's v1.35.2 counts as 1.35, as the skew rules count it."""

    what = "Kubernetes"

    def version(self, run: UpgradeRun) -> str:
        return run.kubernetes_version

    def comparable(self, reported: str) -> str:
        try:
            major, minor = minor_of(reported)
        except ValueError:
            return ""  # not reported (yet): never the target
        return f"{major}.{minor}"

    def node_version(self, node: Node) -> str:
        return self.comparable(node.kubelet_version)

    def status(self, ops: ClusterOperations, node: str) -> DriverStatus:
        return ops.kubelet_status(node)

    def start(self, ops: ClusterOperations, node: str, version: str) -> None:
        ops.replace_node(node, version)

    def record(self, node: Node, status: DriverStatus) -> None:
        node_rows.record_kubelet(node, status.version)

    def complete(self, run: UpgradeRun) -> None:
        NodePool.objects.filter(pk=run.pool_id).update(kubernetes_version=run.kubernetes_version)


def target_of(run: UpgradeRun) -> DriverTarget:
    return KubernetesTarget() if run.kind == UpgradeRun.Kind.KUBERNETES else DriverTarget()
