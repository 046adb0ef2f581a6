"""Operations on one attached cluster's GPU nodes, through the official client.

Cordon is `spec.unschedulable`. A drain evicts, like `kubectl drain`, every pod on the node but DaemonSet
and mirror pods and finished ones, through policy/v1 Eviction, so PodDisruptionBudgets hold; it is done
once those pods are gone. A driver upgrade goes through the GPU Operator: one NVIDIADriver per pool and
version selects the nodes labelled `nvke.io/driver=<version>` (with autoUpgrade off, NVKE decides when),
so relabelling a drained node moves it to the new driver; the driver's pod, the node's validator pod and
GPU feature discovery's version label tell when it is done."""

import functools
import re

from kubernetes import client

from nvke import caches
from nvke.providers.base import (
    ClusterOperations,
    ClusterRef,
    DrainStatus,
    DriverStatus,
    NodeInfo,
    ProviderError,
    WorkloadClaim,
    WorkloadReport,
)

from . import gpus
from .client import api_client, call, read
from .labels import matches
from .workloads import WorkloadSync

MERGE = "application/merge-patch+json"
DRIVER_COMPONENT = ("app.kubernetes.io/component", "nvidia-driver")  # the GPU Operator's driver pods
VALIDATOR_APP = "nvidia-operator-validator"
MIRROR = "kubernetes.io/config.mirror"
UPGRADE_STATE_LABEL = "nvidia.com/gpu-driver-upgrade-state"
MAX_RESTARTS = 10  # the GPU Operator fails a driver pod restarted more often than this
DRIVER_GROUP, DRIVER_VERSION, DRIVERS = "nvidia.com", "v1alpha1", "nvidiadrivers"


@functools.lru_cache(maxsize=128)
def _shared_client(endpoint: str, token: str, ca_bundle: str) -> client.ApiClient:
    """One client (and its connection pool) per cluster and process: ticks reuse TLS connections."""
    return api_client(ClusterRef(name="", endpoint=endpoint, token=token, ca_bundle=ca_bundle))


caches.register(
    "nvke.providers.kubernetes.clients", "≤ 128, least recently used out", _shared_client.cache_clear
)


def driver_object_name(pool: str, version: str) -> str:
    return f"nvke-{pool}-{version.replace('.', '-')}"


def image_version(pod: dict) -> str:
    """The version in the driver image's tag: nvcr.io/nvidia/driver:570.133.20-ubuntu22.04 → 570.133.20."""
    for container in pod.get("spec", {}).get("containers") or []:
        tag = container.get("image", "").rpartition(":")[2]
        if match := re.match(r"\d+(\.\d+)+", tag):
            return match.group(0)
    return ""


def pod_ready(pod: dict) -> bool:
    return pod.get("status", {}).get("phase") == "Running" and gpus.condition(pod, "Ready")


def restarts(pod: dict) -> int:
    return max(
        (s.get("restartCount", 0) for s in pod.get("status", {}).get("containerStatuses") or []), default=0
    )


def evictable(pod: dict) -> bool:
    """What `kubectl drain --ignore-daemonsets` evicts: not a mirror pod, not a DaemonSet's, not finished."""
    meta = pod["metadata"]
    if MIRROR in (meta.get("annotations") or {}):
        return False
    if any(
        ref.get("kind") == "DaemonSet" and ref.get("controller") for ref in meta.get("ownerReferences") or []
    ):
        return False
    return pod.get("status", {}).get("phase") not in ("Succeeded", "Failed")


class KubernetesOperations(ClusterOperations):
    def __init__(self, cluster: ClusterRef):
        super().__init__(cluster)
        self.api = _shared_client(cluster.endpoint, cluster.token, cluster.ca_bundle)
        self.core = client.CoreV1Api(self.api)
        self.policy = client.PolicyV1Api(self.api)
        self.custom = client.CustomObjectsApi(self.api)
        self.resource = client.ResourceV1Api(self.api)

    # --- reads ----------------------------------------------------------------------------------

    def node(self, name: str) -> dict:
        return read(self.core.read_node, name)

    def nodes(self, label_selector: str) -> list[dict]:
        return read(self.core.list_node, label_selector=label_selector)["items"]

    def pods_on(self, node: str) -> list[dict]:
        return read(self.core.list_pod_for_all_namespaces, field_selector=f"spec.nodeName={node}")["items"]

    def slices(self) -> dict[str, list[dict]]:
        """NVIDIA's DRA ResourceSlices by node; none where the cluster does not serve DRA."""
        try:
            found = read(self.resource.list_resource_slice, field_selector=f"spec.driver={gpus.DRA_DRIVER}")
        except ProviderError as error:
            if error.status == 404:  # resource.k8s.io/v1 is not served (before 1.34)
                return {}
            raise
        by_node: dict[str, list[dict]] = {}
        for piece in found["items"]:
            by_node.setdefault(piece["spec"].get("nodeName", ""), []).append(piece)
        return by_node

    def list_nodes(self, pool: str | None = None) -> list[NodeInfo]:
        selector = f"{gpus.POOL_LABEL}={pool}" if pool else gpus.PRODUCT
        slices = self.slices()
        return [
            gpus.node_info(node, slices.get(node["metadata"]["name"], [])) for node in self.nodes(selector)
        ]

    def driver_version(self, node: str) -> str:
        return gpus.driver_version(self.node(node)["metadata"].get("labels") or {})

    # --- cordon, labels, drain ------------------------------------------------------------------

    def patch_node(self, node: str, patch: dict) -> None:
        call(self.core.patch_node, node, patch, _content_type=MERGE)

    def cordon(self, node: str) -> None:
        self.patch_node(node, {"spec": {"unschedulable": True}})

    def uncordon(self, node: str) -> None:
        self.patch_node(node, {"spec": {"unschedulable": None}})

    def set_node_labels(self, node: str, labels: dict[str, str | None]) -> None:
        self.patch_node(node, {"metadata": {"labels": labels}})

    def report_upgrade_state(self, node: str, state: str) -> None:
        """Mirror the state in the GPU Operator's label, whose values NVKE's states share, for anyone
        watching with kubectl (`kubectl get nodes -L nvidia.com/gpu-driver-upgrade-state`)."""
        self.set_node_labels(node, {UPGRADE_STATE_LABEL: state})

    def drain(self, node: str) -> None:
        """Cordon, then ask for the eviction of every evictable pod not already going. Budgets that refuse
        (429) are reported together after the others were evicted; several budgets on one pod (500) stop
        the drain: no retry can succeed until someone fixes them."""
        self.cordon(node)
        refused = []
        for pod in self.pods_on(node):
            meta = pod["metadata"]
            if not evictable(pod) or meta.get("deletionTimestamp"):
                continue
            eviction = client.V1Eviction(
                api_version="policy/v1",
                kind="Eviction",
                metadata=client.V1ObjectMeta(name=meta["name"], namespace=meta["namespace"]),
            )
            try:
                call(self.core.create_namespaced_pod_eviction, meta["name"], meta["namespace"], eviction)
            except ProviderError as error:
                if error.status == 404:
                    continue  # gone already
                if error.status == 429:
                    refused.append(f"{meta['namespace']}/{meta['name']}")
                    continue
                if error.status == 500:
                    raise ProviderError("EvictionMisconfigured", error.message, status=500) from None
                raise
        if refused:
            raise ProviderError(
                "DisruptionBudget",
                f"A PodDisruptionBudget refuses to evict {', '.join(refused)} yet; retrying.",
                status=429,
            )

    def drain_status(self, node: str) -> DrainStatus:
        left = [pod for pod in self.pods_on(node) if evictable(pod)]
        if not left:
            return DrainStatus(done=True)
        waiting = [pod for pod in left if not pod["metadata"].get("deletionTimestamp")]
        budgets = self._budgets_holding(waiting) if waiting else []
        if len(budgets) == 1 and budgets[0] == "":
            return DrainStatus(
                done=False,
                pods_left=len(left),
                reason="EvictionMisconfigured",
                message="A pod on the node has more than one PodDisruptionBudget; eviction cannot proceed.",
            )
        if budgets:
            return DrainStatus(
                done=False,
                pods_left=len(left),
                reason="DisruptionBudget",
                message=f"Waiting on PodDisruptionBudget {', '.join(sorted(set(budgets)))}.",
            )
        return DrainStatus(done=False, pods_left=len(left))

    def _budgets_holding(self, pods: list[dict]) -> list[str]:
        """The budgets (namespace/name) that allow no disruption now and cover one of `pods`; [""] when
        a pod is covered by several budgets (the eviction API answers 500 for it)."""
        budgets = read(self.policy.list_pod_disruption_budget_for_all_namespaces)["items"]
        holding = []
        for pod in pods:
            meta = pod["metadata"]
            covering = [
                b
                for b in budgets
                if b["metadata"]["namespace"] == meta["namespace"]
                and matches(b["spec"].get("selector"), meta.get("labels") or {})
            ]
            if len(covering) > 1:
                return [""]
            holding += [
                f"{b['metadata']['namespace']}/{b['metadata']['name']}"
                for b in covering
                if (b.get("status") or {}).get("disruptionsAllowed", 0) < 1
            ]
        return holding

    # --- workloads -------------------------------------------------------------------------------

    def sync_workloads(
        self,
        claims: list[WorkloadClaim],
        refused: dict[tuple[str, str], str] | None = None,
        *,
        tenant: str,
    ) -> WorkloadReport:
        return WorkloadSync(self, tenant).run(claims, refused or {})

    # --- drivers --------------------------------------------------------------------------------

    def install_driver(self, node: str, version: str) -> None:
        """Make sure the pool's NVIDIADriver for `version` exists, then label the node for it: the GPU
        Operator removes the old driver's pod and starts the new one. Repeating it changes nothing."""
        pool = (self.node(node)["metadata"].get("labels") or {}).get(gpus.POOL_LABEL)
        if not pool:
            raise ProviderError("NotManaged", f"Node {node} is in no NVKE pool (no {gpus.POOL_LABEL} label).")
        name = driver_object_name(pool, version)
        body = {
            "apiVersion": f"{DRIVER_GROUP}/{DRIVER_VERSION}",
            "kind": "NVIDIADriver",
            "metadata": {"name": name, "labels": {gpus.POOL_LABEL: pool}},
            "spec": {
                "driverType": "gpu",
                "repository": "nvcr.io/nvidia",
                "image": "driver",
                "version": version,
                "nodeSelector": {gpus.POOL_LABEL: pool, gpus.DRIVER_LABEL: version},
                # The driver's pods run on the pool's nodes, which carry NVKE's NoSchedule taint.
                "tolerations": [
                    {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"},
                    {"key": gpus.POOL_LABEL, "operator": "Exists", "effect": "NoSchedule"},
                ],
                "upgradePolicy": {"autoUpgrade": False},  # the CRD defaults to true: NVKE decides when
            },
        }
        try:
            call(self.custom.create_cluster_custom_object, DRIVER_GROUP, DRIVER_VERSION, DRIVERS, body)
        except ProviderError as error:
            if error.status != 409:  # 409: it exists already
                raise
        self.set_node_labels(node, {gpus.DRIVER_LABEL: version})

    def driver_status(self, node: str) -> DriverStatus:
        found = self.node(node)
        labels = found["metadata"].get("labels") or {}
        version, wanted = gpus.driver_version(labels), labels.get(gpus.DRIVER_LABEL, "")
        status = DriverStatus(version=version, ready=gpus.is_ready(found))
        if not wanted:
            return status  # no install asked for: what GFD reports is all there is
        pods = self.pods_on(node)
        key, value = DRIVER_COMPONENT
        driver = [p for p in pods if (p["metadata"].get("labels") or {}).get(key) == value]
        for pod in driver:
            if restarts(pod) > MAX_RESTARTS:
                return DriverStatus(
                    version=version,
                    ready=status.ready,
                    failure=f"The driver pod {pod['metadata']['name']} restarted {restarts(pod)} times.",
                )
        if conflict := self._driver_conflict(labels.get(gpus.POOL_LABEL, ""), wanted):
            return DriverStatus(version=version, ready=status.ready, failure=conflict)
        new = [p for p in driver if image_version(p) == wanted and pod_ready(p)]
        validated = any(
            (p["metadata"].get("labels") or {}).get("app") == VALIDATOR_APP and pod_ready(p) for p in pods
        )
        done = bool(new) and len(driver) == 1 and validated and version == wanted
        return DriverStatus(version=version, ready=status.ready, busy=not done)

    def _driver_conflict(self, pool: str, version: str) -> str:
        try:
            driver = call(
                self.custom.get_cluster_custom_object,
                DRIVER_GROUP,
                DRIVER_VERSION,
                DRIVERS,
                driver_object_name(pool, version),
            )
        except ProviderError as error:
            if error.status == 404:
                return ""
            raise
        for condition in (driver.get("status") or {}).get("conditions") or []:
            # The operator reports it as an Error condition with that reason (older ones: as the type).
            conflicting = "ConflictingNodeSelector" in (condition.get("type"), condition.get("reason"))
            if conflicting and condition.get("status") == "True":
                return condition.get("message") or "Another NVIDIADriver selects this node too."
        return ""
