"""Node pools of an attached cluster: NVKE never creates or deletes a tenant's machines, it adopts them.
A pool is the nodes labelled and tainted `nvke.io/pool=<pool>` (the NoSchedule taint keeps pods NVKE
did not place off them); scaling adopts Ready, schedulable nodes that match the pool's node selector,
GPU product and GPU count, or releases nodes (label and taint removed, the Node left as it was)."""

from nvke.providers.base import (
    ClusterAccess,
    ClusterRef,
    Infrastructure,
    PoolSpec,
    ProviderError,
    ScaleResult,
)

from . import gpus
from .operations import KubernetesOperations

SHARING_LABEL = "nvke.io/sharing-mode"
CONFLICT_RETRIES = 3  # a node another writer changed between our read and our patch is read again


class KubernetesInfrastructure(Infrastructure):
    removes_chosen_nodes = True  # a shrinking pool releases the nodes PoolSpec.remove_first names first

    def __init__(self, cluster: ClusterRef):
        super().__init__(cluster)
        self.ops = KubernetesOperations(cluster)

    def provision_cluster(
        self, cluster: str, region: str, control_plane_nodes: int, kubernetes_version: str = ""
    ) -> ClusterAccess:
        raise ProviderError("Unsupported", "An attached cluster is not provisioned by NVKE.")

    def delete_cluster(self, cluster: str) -> None:
        """Detaching leaves the cluster running; its pools were released first."""

    def scale_pool(self, spec: PoolSpec, count: int) -> ScaleResult:
        mine = self.ops.nodes(f"{gpus.POOL_LABEL}={spec.name}")
        if len(mine) > count:
            # Release the nodes named first (an autoscaler drained them), then NotReady ones, then the
            # last by name, so a scale-down is predictable.
            by_name = sorted(mine, key=lambda n: n["metadata"]["name"], reverse=True)
            order = sorted(
                by_name, key=lambda n: (n["metadata"]["name"] not in spec.remove_first, gpus.is_ready(n))
            )
            for node in order[: len(mine) - count]:
                self._release(node["metadata"]["name"], spec.name)
            return ScaleResult(nodes=count, wanted=count)
        short = count - len(mine)
        candidates = self._candidates(spec)[:short]
        for node in candidates:
            self._adopt(node["metadata"]["name"], spec)
        adopted = len(mine) + len(candidates)
        if adopted < count:
            return ScaleResult(
                nodes=adopted,
                wanted=count,
                reason="InsufficientCapacity",
                message=(
                    f"The cluster has {adopted} of {count} nodes for the pool: no other Ready, schedulable "
                    f"node with {spec.gpus_per_node} × {spec.gpu_product} matches "
                    f"{_selector(spec.node_selector) or 'the pool'} outside other pools."
                ),
            )
        return ScaleResult(nodes=adopted, wanted=count)

    def delete_pool(self, cluster: str, pool: str) -> None:
        for node in self.ops.nodes(f"{gpus.POOL_LABEL}={pool}"):
            self._release(node["metadata"]["name"], pool)

    def _candidates(self, spec: PoolSpec) -> list[dict]:
        selector = ",".join(
            filter(None, [_selector(spec.node_selector), gpus.PRODUCT, f"!{gpus.POOL_LABEL}"])
        )
        product = gpus.product_label(spec.gpu_product)
        return sorted(
            (
                node
                for node in self.ops.nodes(selector)
                if gpus.is_ready(node)
                and not node.get("spec", {}).get("unschedulable")
                and gpus.base_product(node["metadata"]["labels"][gpus.PRODUCT]) == product
                and node["metadata"]["labels"].get(gpus.COUNT) == str(spec.gpus_per_node)
            ),
            key=lambda n: n["metadata"]["name"],
        )

    def _adopt(self, node: str, spec: PoolSpec) -> None:
        taint = {"key": gpus.POOL_LABEL, "value": spec.name, "effect": "NoSchedule"}
        self._retag(node, {gpus.POOL_LABEL: spec.name, **spec.labels}, lambda taints: [*taints, taint])

    def _release(self, node: str, pool: str) -> None:
        labels = {gpus.POOL_LABEL: None, SHARING_LABEL: None, gpus.DRIVER_LABEL: None}
        self._retag(node, labels, lambda taints: taints)

    def _retag(self, node: str, labels: dict[str, str | None], add_taints) -> None:
        """Set labels and NVKE's taint in one patch under the node's resourceVersion: taints are a list,
        which a merge patch replaces whole, so a taint someone added meanwhile must not be lost."""
        for attempt in range(CONFLICT_RETRIES):
            current = self.ops.node(node)
            taints = [t for t in current.get("spec", {}).get("taints") or [] if t["key"] != gpus.POOL_LABEL]
            patch = {
                "metadata": {"labels": labels, "resourceVersion": current["metadata"]["resourceVersion"]},
                "spec": {"taints": add_taints(taints) or None},
            }
            try:
                self.ops.patch_node(node, patch)
                return
            except ProviderError as error:
                if error.status != 409 or attempt == CONFLICT_RETRIES - 1:
                    raise


def _selector(labels: dict[str, str]) -> str:
    return ",".join(f"{key}={value}" for key, value in sorted(labels.items()))
