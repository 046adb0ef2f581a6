"""Operations on a cluster Cluster API made: the Kubernetes provider's (nodes, drains, drivers, workloads),
plus what only the management cluster can do: replace a node's Machine and follow it to its successor.

A pool's MachineDeployment rolls out `OnDelete` (manifests.machine_deployment), so a changed template
replaces nothing by itself. A run's replacement of one drained node sets the template's version (or the
machine template of the new image), then deletes the node's Machine; the deployment makes a successor
from the template, whose node has a name of its own. `machine_status` of the old node finds that
successor — a Machine of the deployment that was not there when the old one was deleted
(MachineReplacement), marked nvke.io/replaces so that no other node takes it — and reports its node."""

from dataclasses import replace
from typing import Any

from nvke.providers.base import MachineStatus, NodeInfo, ProviderError
from nvke.providers.kubernetes import gpus
from nvke.providers.kubernetes.operations import KubernetesOperations

from . import manifests
from .infrastructure import machine_template, template_patch
from .management import Management, load
from .models import MachineReplacement


def _labels(obj: dict[str, Any]) -> dict[str, str]:
    return obj["metadata"].get("labels") or {}


def _node_of(machine: dict[str, Any]) -> str:
    return (machine.get("status", {}).get("nodeRef") or {}).get("name", "")


class ClusterAPIOperations(KubernetesOperations):
    replaces_nodes = True

    def _machines(self, m: Management) -> list[dict[str, Any]]:
        selector = f"{manifests.CLUSTER_NAME}={self.cluster.name}"
        return m.list(manifests.CORE, "Machine", label_selector=selector)

    def _machine_running(self, m: Management, node: str) -> dict[str, Any]:
        found = next((x for x in self._machines(m) if _node_of(x) == node), None)
        if found is None:
            why = f"No Machine of {self.cluster.name} runs node {node}."
            raise ProviderError("NotFound", why, status=404)
        return found

    def list_nodes(self, pool: str | None = None) -> list[NodeInfo]:
        """The nodes, each with the catalog image its Machine was made with (a label of the Machine)."""
        nodes = super().list_nodes(pool)
        images = {_node_of(m): _labels(m).get(manifests.NODE_IMAGE, "") for m in self._machines(load())}
        return [replace(n, node_image=n.node_image or images.get(n.name, "")) for n in nodes]

    def replace_node(self, node: str, kubernetes_version: str, image: str = "") -> None:
        if MachineReplacement.objects.filter(cluster=self.cluster.name, node=node).exists():
            return  # an earlier call deleted its Machine: the successor is on the way
        m = load()
        machine = self._machine_running(m, node)
        name = _labels(machine).get(manifests.DEPLOYMENT_NAME, "")
        deployment = m.get(manifests.CORE, "MachineDeployment", name)
        if deployment is None:
            why = f"Node {node}'s Machine belongs to no MachineDeployment."
            raise ProviderError("NotFound", why, status=404)
        model = deployment["spec"]["template"]["metadata"]["labels"][manifests.GPU_MODEL]
        machines = machine_template(m, model, image, exact=True)[0] if image else None
        if template := template_patch(deployment, m.release(kubernetes_version), machines, image):
            m.patch(manifests.CORE, "MachineDeployment", name, {"spec": {"template": template}})
        siblings = m.list(manifests.CORE, "Machine", label_selector=f"{manifests.DEPLOYMENT_NAME}={name}")
        MachineReplacement.objects.get_or_create(
            cluster=self.cluster.name,
            node=node,
            defaults={"deployment": name, "machines_before": sorted(x["metadata"]["name"] for x in siblings)},
        )
        m.delete(manifests.CORE, "Machine", machine["metadata"]["name"])

    def machine_status(self, node: str) -> MachineStatus:
        m = load()
        replacing = MachineReplacement.objects.filter(cluster=self.cluster.name, node=node).first()
        if replacing is None:
            return self._status(self._machine_running(m, node), node)
        successor = self._successor(m, replacing)
        if successor is None or not _node_of(successor):
            return MachineStatus(kubelet_version="", busy=True)
        return self._status(successor, _node_of(successor), replaced_by=_node_of(successor))

    @staticmethod
    def _successor(m: Management, replacing: MachineReplacement) -> dict[str, Any] | None:
        """The Machine that replaces the node: the one marked so, or else the oldest new one not marked
        for another node, marked now."""
        selector = f"{manifests.DEPLOYMENT_NAME}={replacing.deployment}"
        machines = m.list(manifests.CORE, "Machine", label_selector=selector)
        marks = [(x, (x["metadata"].get("annotations") or {}).get(manifests.REPLACES)) for x in machines]
        if marked := next((x for x, mark in marks if mark == replacing.node), None):
            return marked
        new = [
            x for x, mark in marks if mark is None and x["metadata"]["name"] not in replacing.machines_before
        ]
        if not new:
            return None
        chosen = min(new, key=lambda x: (x["metadata"].get("creationTimestamp", ""), x["metadata"]["name"]))
        body = {"metadata": {"annotations": {manifests.REPLACES: replacing.node}}}
        return m.patch(manifests.CORE, "Machine", chosen["metadata"]["name"], body)

    def _status(self, machine: dict[str, Any], node: str, replaced_by: str = "") -> MachineStatus:
        try:
            found = self.node(node)
        except ProviderError as error:
            if error.status == 404:  # the Machine has its node, the cluster has not seen it join yet
                return MachineStatus(kubelet_version="", busy=True)
            raise
        return MachineStatus(
            kubelet_version=(found.get("status", {}).get("nodeInfo") or {}).get("kubeletVersion", ""),
            image=_labels(machine).get(manifests.NODE_IMAGE, ""),
            ready=gpus.is_ready(found),
            replaced_by=replaced_by,
        )
