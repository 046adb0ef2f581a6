"""Cluster API's controllers, simulated on a management FakeKubeApi (after `capi.install`), the way
tests/kubeapi/actors.py simulates a cluster's own components: run after every write until quiet.

- Cluster: owns its infrastructure cluster and control plane (ownerReferences, as the Cluster controller
  sets them), reports `status.initialization`, the `InfrastructureReady`, `ControlPlaneInitialized`,
  `ControlPlaneAvailable` and `Available` conditions, the control plane's replica counters and
  `spec.controlPlaneEndpoint`.
- KubeadmControlPlane: once its cluster has a workload FakeKubeApi (`workloads[name]`) and is not held
  (`hold`), it is initialized and available with all replicas, and writes the kubeconfig Secret
  `<cluster>-kubeconfig` (key `value`; a client-certificate user, which the fake accepts) owned by it.
  Its machines run `spec.version` (`status.versions`) at once, unless its cluster is `rolling`: then
  they keep the version they ran, as in the middle of a rolling update.
- MachineDeployment: one Machine per replica, named as a MachineSet names them (`<md>-<5 random
  characters>`, never reused), from the template as it is when the Machine is made; scale-down removes
  the Machines annotated `cluster.x-k8s.io/delete-machine` first, then the newest (Cluster API's
  `deletion.order: Newest`; its default, Random, would make tests depend on chance). Under the default
  `rollout.strategy.type: RollingUpdate` a Machine whose version or infrastructure template differs from
  the template's is replaced at once (a rolling update in one step); under `OnDelete` only when someone
  deletes it. Machines are owned by it, labelled with its template's labels and
  `cluster.x-k8s.io/deployment-name`; a Machine becomes a GPU Node of the Machine's name on the workload
  cluster (the infrastructure template's `gpu`, the KubeadmConfigTemplate's `node-labels` kubelet
  argument and registration taints, the Machine's version as the kubelet's) unless its deployment is in
  `pending`.
  MachineDeployments and MachineHealthChecks report their counters and conditions; a Machine annotated
  `cluster.x-k8s.io/remediate-machine` is remediated (deleted, so its MachineDeployment replaces it).
- HelmChartProxy (CAAPH, where `capi.install` served it): one HelmReleaseProxy per Cluster its selector
  matches (named `<chart>-<cluster>-<5 random characters>`, labelled with the proxy's name and the cluster's,
  owned by the proxy), its spec following the proxy's (a changed version or values is a new revision);
  Ready with Helm's `deployed` once the cluster's control plane is available (`pending-install` for a
  chart in `installing`), failed with Helm's `failed` for a chart in `failing`, else waiting for the
  cluster. A chart whose templates `fail` for the proxy's values (charts.py: the DRA driver's and the GPU
  Operator's validation templates) is not installed: `HelmInstallOrUpgradeFailed` with Helm's error and
  no release status, as CAAPH's HelmReleaseProxy controller reports an InstallOrUpgradeHelmRelease error
  (kubernetes-sigs/cluster-api-addon-provider-helm `controllers/helmreleaseproxy/
  helmreleaseproxy_controller.go`).
- Garbage collection: an object whose every owner is gone is deleted; a deleted Machine's Node goes too.

No MachineSets: Machines belong to their MachineDeployment directly (NVKE never reads MachineSets)."""

from __future__ import annotations

import base64
import random
import string
from typing import Any

import yaml

from . import capi, charts, objects
from .store import timestamp
from .tls import client_material

KUBECONFIG_TYPE = "cluster.x-k8s.io/secret"
CLUSTER_LABEL = "cluster.x-k8s.io/cluster-name"
DEPLOYMENT_LABEL = "cluster.x-k8s.io/deployment-name"
REMEDIATE = "cluster.x-k8s.io/remediate-machine"
DELETE_MACHINE = "cluster.x-k8s.io/delete-machine"
CORE = f"{capi.CORE}/{capi.VERSION}"
ADDONS = f"{capi.ADDONS}/{capi.ADDONS_VERSION}"
CHART_PROXY_LABEL = "helmreleaseproxy.addons.cluster.x-k8s.io/helmchartproxy-name"
OWNED_KINDS = (
    (CORE, "Machine"),
    (CORE, "MachineDeployment"),
    (CORE, "MachineHealthCheck"),
    (f"{capi.CONTROL_PLANE}/{capi.VERSION}", "KubeadmControlPlane"),
    (f"{capi.BOOTSTRAP}/{capi.VERSION}", "KubeadmConfigTemplate"),
    (f"{capi.INFRA}/{capi.VERSION}", "FakeCluster"),
    ("v1", "Secret"),
)


def owner_ref(obj: dict[str, Any], controller: bool = True) -> dict[str, Any]:
    meta = obj["metadata"]
    return {
        "apiVersion": obj["apiVersion"],
        "kind": obj["kind"],
        "name": meta["name"],
        "uid": meta["uid"],
        "controller": controller,
        "blockOwnerDeletion": True,
    }


def _b64(text: str) -> str:
    return base64.b64encode(text.encode()).decode()


def kubeconfig(server, cluster: str) -> str:
    """What `<cluster>-kubeconfig` holds for a workload FakeKubeApi: its admin's client certificate, as
    the kubeadm control plane provider writes it."""
    certificate, key = client_material()
    user = f"{cluster}-admin"
    entry = {"server": server.url, "certificate-authority-data": _b64(server.ca_bundle)}
    credentials = {"client-certificate-data": _b64(certificate), "client-key-data": _b64(key)}
    return yaml.safe_dump(
        {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": cluster, "cluster": entry}],
            "users": [{"name": user, "user": credentials}],
            "contexts": [{"name": f"{user}@{cluster}", "context": {"cluster": cluster, "user": user}}],
            "current-context": f"{user}@{cluster}",
        }
    )


class ClusterAPI:
    def __init__(self, management, namespace: str = "nvke") -> None:
        self.api, self.namespace = management, namespace
        crd = ("apiextensions.k8s.io/v1", "CustomResourceDefinition", f"helmchartproxies.{capi.ADDONS}")
        helm = self.helm = management.get(*crd) is not None  # capi.install(..., helm=True)
        self.owned_kinds = OWNED_KINDS + (
            ((ADDONS, "HelmChartProxy"), (ADDONS, "HelmReleaseProxy")) if helm else ()
        )
        self.failing: set[str] = set()  # charts whose Helm install fails
        self.installing: set[str] = set()  # charts whose Helm install has not finished
        self.helm_behind = False  # the add-on provider has not acted on the latest changes yet
        self.release_names = random.Random(11)  # HelmReleaseProxy name suffixes
        self.workloads: dict[str, Any] = {}  # cluster name -> its workload FakeKubeApi
        self.hold: set[str] = set()  # clusters whose control plane never becomes available
        self.pending: set[str] = set()  # MachineDeployments whose machines never get a Node
        self.rolling: set[str] = set()  # clusters whose control plane's machines keep their version
        self.names = random.Random(7)  # Machine name suffixes
        self.born: dict[str, int] = {}  # Machine name -> the order it was made in
        self.booted: dict[str, str] = {}  # Machine name -> its cluster, once it has a Node
        management.actors.extra.append(self.reconcile)

    def _list(self, api_version: str, kind: str, **selectors: str) -> list[dict[str, Any]]:
        return self.api.list(api_version, kind, self.namespace, **selectors)

    def _get(self, api_version: str, kind: str, name: str) -> dict[str, Any] | None:
        return self.api.get(api_version, kind, name, self.namespace)

    def _update_status(self, obj: dict[str, Any], status: dict[str, Any]) -> None:
        if obj.get("status") != status:
            self.api.update({**obj, "status": status})

    def _condition(self, obj: dict[str, Any], kind: str, true: bool, reason: str, message: str = "") -> dict:
        status = "True" if true else "False"
        for old in obj.get("status", {}).get("conditions") or []:
            if old["type"] == kind and old["status"] == status and old["reason"] == reason:
                return {**old, "message": message}
        now = timestamp(self.api.store.now())
        return {
            "type": kind,
            "status": status,
            "reason": reason,
            "message": message,
            "lastTransitionTime": now,
        }

    def reconcile(self) -> None:
        self._collect_garbage()
        self._reap_nodes()
        for cluster in self._list(CORE, "Cluster"):
            if "deletionTimestamp" not in cluster["metadata"]:
                self._cluster(cluster)
        for deployment in self._list(CORE, "MachineDeployment"):
            self._deployment(deployment)
        for check in self._list(CORE, "MachineHealthCheck"):
            self._health_check(check)
        if self.helm and not self.helm_behind:
            for proxy in self._list(ADDONS, "HelmChartProxy"):
                self._chart_proxy(proxy)

    # ---- garbage collector -------------------------------------------------------------------------------

    def _collect_garbage(self) -> None:
        live = {
            obj["metadata"]["uid"]
            for api_version, kind in ((CORE, "Cluster"), *self.owned_kinds)
            for obj in self._list(api_version, kind)
        }
        for api_version, kind in self.owned_kinds:
            for obj in self._list(api_version, kind):
                owners = obj["metadata"].get("ownerReferences") or []
                if owners and not any(o["uid"] in live for o in owners):
                    if kind == "Machine":
                        self._remove_node(obj)
                    self.api.delete(api_version, kind, obj["metadata"]["name"], self.namespace)

    def _reap_nodes(self) -> None:
        """The Node of a Machine someone deleted goes with it (the Machine controller deletes it)."""
        live = {m["metadata"]["name"] for m in self._list(CORE, "Machine")}
        for name, cluster in list(self.booted.items()):
            if name not in live:
                self._remove_node({"metadata": {"name": name}, "spec": {"clusterName": cluster}})

    # ---- Cluster and KubeadmControlPlane -----------------------------------------------------------------

    def _adopt(self, ref: dict[str, Any] | None, cluster: dict[str, Any]) -> dict[str, Any] | None:
        """The referenced object, owned by the cluster (as the Cluster controller makes it)."""
        if not ref:
            return None
        obj = self._get(f"{ref['apiGroup']}/{capi.VERSION}", ref["kind"], ref["name"])
        if obj is not None and not obj["metadata"].get("ownerReferences"):
            obj["metadata"]["ownerReferences"] = [owner_ref(cluster)]
            obj = self.api.update(obj)
        return obj

    def _cluster(self, cluster: dict[str, Any]) -> None:
        name, spec = cluster["metadata"]["name"], cluster["spec"]
        infra = self._adopt(spec.get("infrastructureRef"), cluster)
        control_plane = self._adopt(spec.get("controlPlaneRef"), cluster)
        if infra is not None:
            self._update_status(infra, {"initialization": {"provisioned": True}})
        workload = self.workloads.get(name)
        if control_plane is not None:
            self._control_plane(control_plane, name, workload)
            control_plane = self._get(
                control_plane["apiVersion"], "KubeadmControlPlane", control_plane["metadata"]["name"]
            )
        if workload is not None and not spec.get("controlPlaneEndpoint"):
            endpoint = {"host": "127.0.0.1", "port": workload.port}
            cluster = self.api.update({**cluster, "spec": {**spec, "controlPlaneEndpoint": endpoint}})
        cp_status = (control_plane or {}).get("status", {})
        initialized = bool(cp_status.get("initialization", {}).get("controlPlaneInitialized"))
        available = any(
            c["type"] == "Available" and c["status"] == "True" for c in cp_status.get("conditions") or []
        )
        wanted = (control_plane or {}).get("spec", {}).get("replicas", 1)
        cp_message = (
            ""
            if available
            else f"{cp_status.get('availableReplicas', 0)} of {wanted} control plane machines are available"
        )
        conditions = [
            self._condition(
                cluster, "InfrastructureReady", infra is not None, "Ready" if infra else "DoesNotExist"
            ),
            self._condition(
                cluster,
                "ControlPlaneInitialized",
                initialized,
                "Initialized" if initialized else "NotInitialized",
            ),
            self._condition(
                cluster,
                "ControlPlaneAvailable",
                available,
                "Available" if available else "NotAvailable",
                cp_message,
            ),
            self._condition(
                cluster, "Available", available, "Available" if available else "NotAvailable", cp_message
            ),
        ]
        status = {
            "initialization": {
                "infrastructureProvisioned": infra is not None,
                "controlPlaneInitialized": initialized,
            },
            "conditions": conditions,
            "controlPlane": {
                "desiredReplicas": wanted,
                **{
                    k: cp_status.get(k, 0)
                    for k in ("replicas", "readyReplicas", "availableReplicas", "upToDateReplicas")
                },
            },
            "phase": "Provisioned"
            if infra is not None and cluster["spec"].get("controlPlaneEndpoint")
            else "Provisioning",
            "observedGeneration": cluster["metadata"]["generation"],
        }
        self._update_status(cluster, status)

    def _control_plane(self, control_plane: dict[str, Any], cluster: str, workload) -> None:
        wanted = control_plane["spec"].get("replicas", 1)
        up = workload is not None and cluster not in self.hold
        replicas = wanted if up else 0
        version = control_plane["spec"]["version"]
        if cluster in self.rolling:
            version = control_plane.get("status", {}).get("version") or version
        status = {
            "initialization": {"controlPlaneInitialized": up},
            "replicas": replicas,
            "readyReplicas": replicas,
            "availableReplicas": replicas,
            "upToDateReplicas": replicas,
            "version": version,
            "conditions": [
                self._condition(
                    control_plane,
                    "Available",
                    up,
                    "Available" if up else "NotAvailable",
                    "" if up else "Control plane not yet initialized",
                )
            ],
            "observedGeneration": control_plane["metadata"]["generation"],
        }
        if replicas:  # the versions its machines run (v1beta2 `status.versions[].replicas` minimum 1)
            status["versions"] = [{"version": version, "replicas": replicas}]
        self._update_status(control_plane, status)
        secret_name = f"{cluster}-kubeconfig"
        if up and self.api.get("v1", "Secret", secret_name, self.namespace) is None:
            value = base64.b64encode(kubeconfig(workload, cluster).encode()).decode()
            self.api.create(
                {
                    "apiVersion": "v1",
                    "kind": "Secret",
                    "type": KUBECONFIG_TYPE,
                    "metadata": {
                        "name": secret_name,
                        "namespace": self.namespace,
                        "labels": {CLUSTER_LABEL: cluster},
                        "ownerReferences": [owner_ref(control_plane)],
                    },
                    "data": {"value": value},
                }
            )

    # ---- MachineDeployment, Machines and their Nodes -----------------------------------------------------

    def _deployment(self, deployment: dict[str, Any]) -> None:
        meta, spec = deployment["metadata"], deployment["spec"]
        name, cluster = meta["name"], spec["clusterName"]
        if not meta.get("ownerReferences") and (owner := self._get(CORE, "Cluster", cluster)):
            meta["ownerReferences"] = [owner_ref(owner)]
            deployment = self.api.update(deployment)
        machines = {
            m["metadata"]["name"]: m
            for m in self._list(CORE, "Machine", label_selector=f"{DEPLOYMENT_LABEL}={name}")
            if "deletionTimestamp" not in m["metadata"]
        }
        strategy = (spec.get("rollout") or {}).get("strategy") or {}
        if strategy.get("type", "RollingUpdate") == "RollingUpdate":
            for machine in [m for m in machines.values() if self._outdated(m, spec["template"]["spec"])]:
                self._delete_machine(machines.pop(machine["metadata"]["name"]))
        wanted = spec.get("replicas", 1)
        initialized = (self._get(CORE, "Cluster", cluster) or {}).get("status", {}).get("initialization", {})
        if initialized.get("controlPlaneInitialized"):  # workers join once the API server answers
            while len(machines) < wanted:
                machine = self._create_machine(deployment, f"{name}-{self._suffix()}")
                machines[machine["metadata"]["name"]] = machine
        for extra in sorted(machines.values(), key=self._deletion_order)[: max(len(machines) - wanted, 0)]:
            self._delete_machine(machines.pop(extra["metadata"]["name"]))
        ready = 0
        for machine in machines.values():
            ready += self._machine(machine, deployment)
        available = ready >= wanted
        status = {
            "replicas": len(machines),
            "readyReplicas": ready,
            "availableReplicas": ready,
            "upToDateReplicas": len(machines),
            "selector": f"{DEPLOYMENT_LABEL}={name}",
            "phase": "Running" if available else "ScalingUp",
            "conditions": [
                self._condition(
                    deployment,
                    "Available",
                    available,
                    "Available" if available else "NotAvailable",
                    "" if available else f"{ready} available replicas, at least {wanted} required",
                )
            ],
            "observedGeneration": meta["generation"],
        }
        self._update_status(self._get(CORE, "MachineDeployment", name), status)

    def _suffix(self) -> str:
        return "".join(self.names.choice(string.ascii_lowercase + string.digits) for _ in range(5))

    @staticmethod
    def _outdated(machine: dict[str, Any], template: dict[str, Any]) -> bool:
        spec = machine["spec"]
        return (spec.get("version"), spec["infrastructureRef"]) != (
            template.get("version"),
            template["infrastructureRef"],
        )

    def _deletion_order(self, machine: dict[str, Any]) -> tuple[bool, int]:
        """Annotated delete-machine first, then the newest."""
        meta = machine["metadata"]
        return DELETE_MACHINE not in (meta.get("annotations") or {}), -self.born.get(meta["name"], 0)

    def _delete_machine(self, machine: dict[str, Any]) -> None:
        self._remove_node(machine)
        self.api.delete(CORE, "Machine", machine["metadata"]["name"], self.namespace)

    def _create_machine(self, deployment: dict[str, Any], name: str) -> dict[str, Any]:
        template = deployment["spec"]["template"]
        labels = {
            **(template.get("metadata", {}).get("labels") or {}),
            DEPLOYMENT_LABEL: deployment["metadata"]["name"],
            CLUSTER_LABEL: deployment["spec"]["clusterName"],
        }
        self.born[name] = len(self.born) + 1
        return self.api.create(
            {
                "apiVersion": CORE,
                "kind": "Machine",
                "metadata": {
                    "name": name,
                    "namespace": self.namespace,
                    "labels": labels,
                    "ownerReferences": [owner_ref(deployment)],
                },
                "spec": template["spec"],
            }
        )

    def _machine(self, machine: dict[str, Any], deployment: dict[str, Any]) -> bool:
        """Boot the machine into a Node unless its deployment is pending; True when its Node is Ready."""
        workload = self.workloads.get(deployment["spec"]["clusterName"])
        name = machine["metadata"]["name"]
        boots = workload is not None and deployment["metadata"]["name"] not in self.pending
        if boots and workload.get("v1", "Node", name) is None:
            workload.create(self._node(machine, name))
            self.booted[name] = deployment["spec"]["clusterName"]
        status = {
            "initialization": {"infrastructureProvisioned": boots, "bootstrapDataSecretCreated": True},
            "phase": "Running" if boots else "Provisioning",
            "conditions": [
                self._condition(machine, "Ready", boots, "Ready" if boots else "NotReady"),
                self._condition(machine, "NodeReady", boots, "NodeReady" if boots else "NodeDoesNotExist"),
            ],
            "observedGeneration": machine["metadata"]["generation"],
        }
        if boots:
            status["nodeRef"] = {"name": name}
        self._update_status(machine, status)
        return boots

    def _node(self, machine: dict[str, Any], name: str) -> dict[str, Any]:
        spec = machine["spec"]
        ref = spec["infrastructureRef"]
        template = self._get(f"{ref['apiGroup']}/{capi.VERSION}", ref["kind"], ref["name"]) or {}
        gpu = template.get("spec", {}).get("template", {}).get("spec", {}).get("gpu") or {}
        config_ref = spec["bootstrap"].get("configRef") or {}
        config = self._get(
            f"{capi.BOOTSTRAP}/{capi.VERSION}", "KubeadmConfigTemplate", config_ref.get("name", "")
        )
        registration = (
            (config or {})
            .get("spec", {})
            .get("template", {})
            .get("spec", {})
            .get("joinConfiguration", {})
            .get("nodeRegistration", {})
        )
        labels: dict[str, str] = {}
        for arg in registration.get("kubeletExtraArgs") or []:
            if arg["name"] == "node-labels":
                labels.update(pair.split("=", 1) for pair in arg["value"].split(",") if pair)
        node = objects.gpu_node(
            name,
            product=gpu.get("product", "NVIDIA-H100-80GB-HBM3"),
            count=gpu.get("count", 8),
            labels=labels,
        )
        node["status"]["nodeInfo"]["kubeletVersion"] = spec.get("version", "")
        if taints := registration.get("taints"):
            node["spec"]["taints"] = [{k: t[k] for k in ("key", "value", "effect") if k in t} for t in taints]
        return node

    def _remove_node(self, machine: dict[str, Any]) -> None:
        self.booted.pop(machine["metadata"]["name"], None)
        workload = self.workloads.get(machine["spec"]["clusterName"])
        if workload is not None and workload.get("v1", "Node", machine["metadata"]["name"]) is not None:
            workload.delete("v1", "Node", machine["metadata"]["name"])

    # ---- MachineHealthCheck ------------------------------------------------------------------------------

    def _health_check(self, check: dict[str, Any]) -> None:
        """Remediate what the remediate-machine annotation marks (its MachineDeployment replaces it)."""
        match = check["spec"]["selector"].get("matchLabels") or {}
        selector = ",".join(f"{k}={v}" for k, v in sorted(match.items()))
        machines = []
        for machine in self._list(CORE, "Machine", label_selector=selector):
            if REMEDIATE in (machine["metadata"].get("annotations") or {}):
                self._delete_machine(machine)
            else:
                machines.append(machine)
        healthy = [m for m in machines if m.get("status", {}).get("nodeRef")]
        status = {
            "expectedMachines": len(machines),
            "currentHealthy": len(healthy),
            "targets": sorted(m["metadata"]["name"] for m in machines),
            "conditions": [self._condition(check, "RemediationAllowed", True, "RemediationAllowed")],
            "observedGeneration": check["metadata"]["generation"],
        }
        self._update_status(check, status)

    # ---- HelmChartProxy (Cluster API's add-on provider for Helm) -----------------------------------------

    def _chart_proxy(self, proxy: dict[str, Any]) -> None:
        name, spec = proxy["metadata"]["name"], proxy["spec"]
        match = spec["clusterSelector"].get("matchLabels") or {}
        selector = ",".join(f"{k}={v}" for k, v in sorted(match.items()))
        clusters = [c for c in self._list(CORE, "Cluster", label_selector=selector) if selector]
        releases = {
            r["metadata"]["labels"][CLUSTER_LABEL]: r
            for r in self._list(ADDONS, "HelmReleaseProxy", label_selector=f"{CHART_PROXY_LABEL}={name}")
        }
        for cluster in clusters:
            self._release(proxy, cluster, releases.get(cluster["metadata"]["name"]))
        ready = all(self._released(proxy, c) for c in clusters)
        status = {
            "conditions": [
                self._condition(
                    proxy,
                    "Ready",
                    ready,
                    "Ready" if ready else "HelmReleaseProxiesNotReady",
                    "" if ready else "Not every HelmReleaseProxy is ready.",
                )
            ],
            "matchingClusters": [
                {
                    "apiVersion": CORE,
                    "kind": "Cluster",
                    "name": c["metadata"]["name"],
                    "namespace": self.namespace,
                }
                for c in clusters
            ],
            "observedGeneration": proxy["metadata"]["generation"],
        }
        self._update_status(proxy, status)

    def _released(self, proxy: dict[str, Any], cluster: dict[str, Any]) -> bool:
        selector = (
            f"{CHART_PROXY_LABEL}={proxy['metadata']['name']},{CLUSTER_LABEL}={cluster['metadata']['name']}"
        )
        found = self._list(ADDONS, "HelmReleaseProxy", label_selector=selector)
        return any(
            c["type"] == "Ready" and c["status"] == "True" for r in found for c in r["status"]["conditions"]
        )

    @staticmethod
    def _render_error(spec: dict[str, Any], workload) -> str:
        """Helm's error rendering the chart with the proxy's values on the workload cluster (charts.py)."""
        apis = {rt.api_version for rt in workload.store.registry.all()}
        apis |= {f"{rt.api_version}/{rt.kind}" for rt in workload.store.registry.all()}
        values = yaml.safe_load(spec.get("valuesTemplate") or "") or {}
        return charts.render_error(spec["chartName"], values, spec.get("namespace") or "default", apis)

    def _release(
        self, proxy: dict[str, Any], cluster: dict[str, Any], release: dict[str, Any] | None
    ) -> None:
        """The cluster's HelmReleaseProxy with the proxy's spec; Helm's outcome in its status."""
        spec, cluster_name = proxy["spec"], cluster["metadata"]["name"]
        wanted = {
            "clusterRef": {
                "apiVersion": CORE,
                "kind": "Cluster",
                "name": cluster_name,
                "namespace": self.namespace,
            },
            **{
                k: spec[k]
                for k in ("chartName", "repoURL", "releaseName", "namespace", "version")
                if k in spec
            },
            "values": spec.get("valuesTemplate", ""),
            **({"options": spec["options"]} if "options" in spec else {}),
        }
        if release is None:
            suffix = "".join(self.release_names.choices(string.ascii_lowercase + string.digits, k=5))
            release = self.api.create(
                {
                    "apiVersion": ADDONS,
                    "kind": "HelmReleaseProxy",
                    "metadata": {
                        "name": f"{spec['chartName']}-{cluster_name}-{suffix}",
                        "namespace": self.namespace,
                        "labels": {CHART_PROXY_LABEL: proxy["metadata"]["name"], CLUSTER_LABEL: cluster_name},
                        "ownerReferences": [owner_ref(proxy)],
                    },
                    "spec": wanted,
                }
            )
        elif release["spec"] != wanted:
            release = self.api.update({**release, "spec": wanted})
        revision = release.get("status", {}).get("revision", 0)
        if release.get("status", {}).get("observedGeneration") != release["metadata"]["generation"]:
            revision += 1  # Helm installs or upgrades the release again
        available = cluster_name in self.workloads and cluster_name not in self.hold
        rendered = self._render_error(spec, self.workloads[cluster_name]) if available else ""
        if rendered:  # Helm refuses before it makes a release: no status.status
            ready, reason, helm, message = False, "HelmInstallOrUpgradeFailed", "", rendered
        elif spec["chartName"] in self.failing:
            ready, reason, helm, message = (
                False,
                "HelmInstallOrUpgradeFailed",
                "failed",
                "context deadline exceeded",
            )
        elif spec["chartName"] in self.installing and available:
            ready, reason, helm, message = False, "HelmReleasePending", "pending-install", "Waiting for pods."
        elif available:
            ready, reason, helm, message = True, "Ready", "deployed", ""
        else:
            ready, reason, helm, message = False, "ClusterNotAvailable", "", "Cluster is not available yet."
        status = {
            "conditions": [self._condition(release, "Ready", ready, reason, message)],
            "revision": revision,
            "observedGeneration": release["metadata"]["generation"],
        }
        if helm:
            status["status"] = helm
        self._update_status(release, status)
