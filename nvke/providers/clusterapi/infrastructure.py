"""Clusters and GPU pools as Cluster API objects in the management cluster (see manifests).

Every call is one idempotent step: it creates what is missing (an object that exists is kept, so a
repeated step costs reads only), brings what NVKE owns to the wanted size, and reports what Cluster
API's status says now. Provisioning raises
ProvisioningInProgress until the control plane is available and NVKE's service account token is issued;
a pool reports its ready machines, so the pool waits `pending` until they are up."""

from typing import Any

from nvke.providers.base import (
    AddonStatus,
    ClusterAccess,
    Infrastructure,
    PoolSpec,
    ProviderError,
    ProvisioningInProgress,
    ScaleResult,
)

from . import access, manifests, status
from .addons import CHART_OF, Chart
from .management import Management, TemplateRef, load
from .models import MachineReplacement


def machine_template(
    m: Management, gpu_model: str, image: str = "", exact: bool = False
) -> tuple[TemplateRef, str]:
    """The operator's machine template for a GPU model's machines, labelled nvke.io/gpu-model, and the
    catalog image it boots: the one also labelled nvke.io/node-image=`image` where there is one, else
    (unless `exact`: a node image upgrade needs that image) one labelled with no image, booting the
    infrastructure's own (returned as "")."""
    kind = m.control_plane_template.kind
    found = m.list(m.infrastructure, kind, label_selector=f"{manifests.GPU_MODEL}={gpu_model}")
    labels = [(t, t["metadata"].get("labels") or {}) for t in found]
    with_image = [t for t, them in labels if image and them.get(manifests.NODE_IMAGE) == image]
    plain = [t for t, them in labels if manifests.NODE_IMAGE not in them]
    chosen, booted = (with_image, image) if with_image else ([] if exact else plain, "")
    if not chosen:
        wanted = f"{manifests.GPU_MODEL}={gpu_model}" + (f",{manifests.NODE_IMAGE}={image}" if exact else "")
        raise ProviderError(
            "NoMachineTemplate", f"The management cluster has no {kind} labelled {wanted} in {m.namespace}."
        )
    return TemplateRef(m.infrastructure, kind, sorted(t["metadata"]["name"] for t in chosen)[0]), booted


def template_patch(
    deployment: dict, release: str, machines: TemplateRef | None, image: str = ""
) -> dict[str, Any]:
    """The change to a MachineDeployment's machine template for its new machines to run `release` and,
    given `machines`, be made from that machine template, booting `image` (the Machines' label); {}
    when they would already. Under OnDelete it replaces no machine that exists."""
    template = deployment["spec"]["template"]
    patch: dict[str, Any] = {}
    if template["spec"].get("version") != release:
        patch["spec"] = {"version": release}
    if machines is not None and template["spec"]["infrastructureRef"] != machines.ref:
        patch.setdefault("spec", {})["infrastructureRef"] = machines.ref
        patch["metadata"] = {"labels": {manifests.NODE_IMAGE: image or None}}  # None: no label
    return patch


class ClusterAPIInfrastructure(Infrastructure):
    removes_chosen_nodes = True  # the delete-machine annotation on their Machines (scale_pool)

    def provision_cluster(
        self, cluster: str, region: str, control_plane_nodes: int, kubernetes_version: str = ""
    ) -> ClusterAccess:
        m = load()
        release = m.release(kubernetes_version)
        template = m.cluster_template
        source = m.get(template.api_version, template.kind, template.name)
        if source is None:
            raise ProviderError(
                "NotFound",
                f"The management cluster has no {template.kind} {m.namespace}/{template.name}.",
                status=404,
            )
        infrastructure = m.ensure(manifests.infrastructure_cluster(cluster, m.namespace, source))
        m.ensure(
            manifests.control_plane(
                cluster, m.namespace, control_plane_nodes, release, m.control_plane_template
            )
        )
        current = m.ensure(manifests.cluster(cluster, m.namespace, infrastructure))
        if "status" not in current:  # just created: read again, the controllers may have acted since
            current = m.get(manifests.CORE, "Cluster", cluster) or current
        progress = status.cluster_progress(current)
        if not progress.done:
            raise ProvisioningInProgress(progress.reason, progress.message)
        secret = m.secret(access.kubeconfig_secret(cluster))
        if secret is None:
            name = access.kubeconfig_secret(cluster)
            raise ProvisioningInProgress(
                "WaitingForKubeconfig", f"Cluster API has not written Secret {name} yet."
            )
        granted = access.service_account_access(access.admin_kubeconfig(secret))
        if granted is None:
            raise ProvisioningInProgress(
                "WaitingForToken",
                f"The cluster has not issued a token to {access.NAMESPACE}/{access.ACCOUNT} yet.",
            )
        return granted

    def install_addons(self, cluster: str, addons: dict[str, str]) -> list[AddonStatus]:
        """Make (or find) a HelmChartProxy for each chart that carries the add-ons (`addons.CHARTS`; the
        chart's version is its own add-on's in `addons`), bring its version and values to the catalog's,
        and report each add-on as its chart's HelmReleaseProxy says. An add-on the management cluster
        cannot be asked for now (no add-on provider for Helm there, or an error) is failed, saying why;
        the cluster's next step asks again (`clusters.services.refresh_addons`)."""
        m = load()
        owner = m.get(manifests.CORE, "Cluster", cluster)
        if owner is None:
            raise ProviderError(
                "NotFound", f"Cluster {cluster} does not exist in the management cluster.", status=404
            )
        charts = {CHART_OF[name].name: CHART_OF[name] for name in addons if name in CHART_OF}
        try:
            states = {
                name: self._chart_state(m, cluster, chart, addons[name], owner)
                for name, chart in charts.items()
            }
        except ProviderError as error:  # failed for now: the cluster runs, and its next step asks again
            message = error.message
            if error.status == 404:
                message = (
                    f"The management cluster does not serve HelmChartProxy ({manifests.ADDONS}): install "
                    f"Cluster API's add-on provider for Helm (CAAPH) there. {error.message}"
                )
            return [AddonStatus(name, version, "failed", message) for name, version in addons.items()]
        unknown = ("failed", "No chart NVKE installs carries it.")
        return [
            AddonStatus(name, version, *(states[CHART_OF[name].name] if name in CHART_OF else unknown))
            for name, version in addons.items()
        ]

    @staticmethod
    def _chart_state(m: Management, cluster: str, chart: Chart, version: str, owner: dict) -> tuple[str, str]:
        """The chart's HelmChartProxy made or brought to `version` and the catalog's values, and its
        release's state (`status.release_state`)."""
        wanted = manifests.helm_chart_proxy(cluster, m.namespace, chart, version, owner)
        name = wanted["metadata"]["name"]
        proxy = m.ensure(wanted)
        changed = {
            field: wanted["spec"][field]
            for field in ("version", "valuesTemplate")
            if proxy["spec"].get(field) != wanted["spec"][field]
        }
        if changed:
            m.patch(manifests.ADDONS, "HelmChartProxy", name, {"spec": changed})
        releases = m.list(
            manifests.ADDONS, "HelmReleaseProxy", label_selector=f"{manifests.CHART_PROXY}={name}"
        )
        release = releases[0] if releases else None
        if release is not None and release["spec"].get("version") != version:
            return "installing", f"HelmReleaseProxy {release['metadata']['name']}: upgrading to {version}."
        return status.release_state(release)

    def upgrade_control_plane(self, cluster: str, kubernetes_version: str) -> str:
        """Set the KubeadmControlPlane's version to the setting's release of the minor: Cluster API
        replaces its machines one at a time (its rolling update); report what they all run now."""
        m = load()
        release = m.release(kubernetes_version)
        name = manifests.control_plane_name(cluster)
        found = m.get(manifests.CONTROL_PLANE, "KubeadmControlPlane", name)
        if found is None:
            raise ProviderError(
                "NotFound",
                f"The management cluster has no KubeadmControlPlane {m.namespace}/{name}.",
                status=404,
            )
        if found["spec"].get("version") != release:
            m.patch(manifests.CONTROL_PLANE, "KubeadmControlPlane", name, {"spec": {"version": release}})
            found = m.get(manifests.CONTROL_PLANE, "KubeadmControlPlane", name) or found
        return status.control_plane_minor(found)

    def delete_cluster(self, cluster: str) -> None:
        """Delete the Cluster: Cluster API removes its control plane, machines and infrastructure, and
        Kubernetes' garbage collector what NVKE made owned by it."""
        load().delete(manifests.CORE, "Cluster", cluster)
        MachineReplacement.objects.filter(cluster=cluster).delete()

    def scale_pool(self, spec: PoolSpec, count: int) -> ScaleResult:
        m = load()
        owner = m.get(manifests.CORE, "Cluster", spec.cluster)
        if owner is None:
            raise ProviderError(
                "NotFound", f"Cluster {spec.cluster} does not exist in the management cluster.", status=404
            )
        machines, image = machine_template(m, spec.gpu_model, spec.node_image)
        release = m.release(spec.kubernetes_version)
        m.ensure(manifests.config_template(spec, m.namespace, owner))
        m.ensure(manifests.health_check(spec, m.namespace, owner))
        deployment = m.ensure(
            manifests.machine_deployment(spec, m.namespace, count, release, machines, image)
        )
        if spec.remove_first and deployment["spec"].get("replicas", count) > count:
            self._delete_first(m, spec)
        template = template_patch(deployment, release, machines, image)
        deployment = self._resize(m, deployment, spec, count, template)
        if "status" not in deployment:  # just created: read again, the controllers may have acted since
            deployment = (
                m.get(manifests.CORE, "MachineDeployment", deployment["metadata"]["name"]) or deployment
            )
        ready = min(status.ready_replicas(deployment), count)
        if ready < count:
            return ScaleResult(
                ready, count, "WaitingForMachines", status.deployment_message(deployment, count)
            )
        return ScaleResult(ready, count)

    def _resize(self, m: Management, deployment: dict, spec: PoolSpec, count: int, template: dict) -> dict:
        """The wanted replicas, autoscaler bounds and machine template (`template_patch`: while an upgrade
        replaces the pool's machines, new ones get its target) on a MachineDeployment made by an earlier
        step."""
        annotations = deployment["metadata"].get("annotations") or {}
        bounds = manifests.autoscaler_bounds(spec) if spec.max_nodes else {}
        patch: dict = {}
        if deployment["spec"].get("replicas") != count:
            patch["spec"] = {"replicas": count}
        if template:
            patch.setdefault("spec", {})["template"] = template
        if any(annotations.get(k) != v for k, v in bounds.items()):
            patch["metadata"] = {"annotations": bounds}
        if not patch:
            return deployment
        name = deployment["metadata"]["name"]
        return m.patch(manifests.CORE, "MachineDeployment", name, patch)

    @staticmethod
    def _machines(m: Management, cluster: str, pool: str) -> dict[str, str]:
        """Node name -> the name of the pool's Machine that runs it."""
        selector = f"{manifests.CLUSTER_NAME}={cluster},{manifests.POOL}={pool}"
        return {
            node: machine["metadata"]["name"]
            for machine in m.list(manifests.CORE, "Machine", label_selector=selector)
            if (node := (machine.get("status", {}).get("nodeRef") or {}).get("name"))
        }

    def _delete_first(self, m: Management, spec: PoolSpec) -> None:
        """Mark the Machines of the nodes to go with delete-machine: whatever its deletion policy, a
        MachineSet losing replicas deletes those first (what the cluster-autoscaler's Cluster API
        provider does to remove a chosen node)."""
        machines = self._machines(m, spec.cluster, spec.name)
        for node in spec.remove_first:
            if node in machines:
                patch = {"metadata": {"annotations": {manifests.DELETE_MACHINE: "yes"}}}
                m.patch(manifests.CORE, "Machine", machines[node], patch)

    def repair_node(self, cluster: str, pool: str, node: str) -> bool:
        """Have Cluster API replace the node's Machine: the remediate-machine annotation makes the pool's
        MachineHealthCheck count it unhealthy, and its MachineDeployment replaces it. False when no
        Machine of the pool runs the node."""
        m = load()
        machine = self._machines(m, cluster, pool).get(node)
        if machine is None:
            return False
        m.patch(manifests.CORE, "Machine", machine, {"metadata": {"annotations": {manifests.REMEDIATE: ""}}})
        return True

    def delete_pool(self, cluster: str, pool: str) -> None:
        """Delete the pool's MachineDeployment (Cluster API drains and deletes its machines), its health
        check and its bootstrap template."""
        m = load()
        name = manifests.pool_name(cluster, pool)
        m.delete(manifests.CORE, "MachineDeployment", name)
        m.delete(manifests.CORE, "MachineHealthCheck", name)
        m.delete(manifests.BOOTSTRAP, "KubeadmConfigTemplate", name)
