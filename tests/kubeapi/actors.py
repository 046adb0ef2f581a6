"""Simulated cluster components, run synchronously after every write (and by settle()) until nothing changes:
kube-scheduler (kube_scheduler.py), a kubelet (its admission and DRA preparation in kubelet.py, NVIDIA's
kubelet plugin in dra_kubelet_plugin.py), the GPU Operator's NVIDIADriver controller with its OnDelete
DaemonSets and validator, GPU Feature Discovery, the disruption controller and the resource claim controller
(claim_controller.py). No threads or timers, so tests are deterministic."""

from __future__ import annotations

import base64
import hashlib
import json
import secrets
from collections import defaultdict
from collections.abc import Callable
from typing import Any

from . import kubelet
from .claim_controller import ClaimController
from .device_manager import ALLOCATED, DeviceManager
from .features import FeatureGates
from .kube_scheduler import KubeScheduler
from .objects import OPERATOR_NAMESPACE, VALIDATOR_IMAGE, driver_version_labels
from .selectors import Requirement
from .store import Store, copied, parse_timestamp, timestamp
from .subresources import condition_true, pdb_pods, pdb_status

DRIVER_COMPONENT = "nvidia-driver"
VALIDATOR_APP = "nvidia-operator-validator"
OWNER_LABEL = "nvidia.com/gpu-operator.driver.owner"
GPU_PRESENT = "nvidia.com/gpu.present"
TOKEN_SECRET_TYPE = "kubernetes.io/service-account-token"
SERVICE_ACCOUNT_ANNOTATION = "kubernetes.io/service-account.name"


def _labels(obj: dict[str, Any]) -> dict[str, str]:
    return obj["metadata"].get("labels") or {}


def _is(label: str, value: str) -> list[Requirement]:
    return [Requirement(label, "in", frozenset([value]))]


def _running_ready(pod: dict[str, Any]) -> bool:
    return pod.get("status", {}).get("phase") == "Running" and condition_true(pod, "Ready")


def _owner(obj: dict[str, Any]) -> dict[str, Any]:
    meta = obj["metadata"]
    return {
        "apiVersion": obj["apiVersion"],
        "kind": obj["kind"],
        "name": meta["name"],
        "uid": meta["uid"],
        "controller": True,
        "blockOwnerDeletion": True,
    }


def image_version(image: str) -> str:
    """The driver version in an image tag such as nvcr.io/nvidia/driver:570.133.20-ubuntu22.04."""
    return image.rpartition(":")[2].split("-")[0]


class Actors:
    def __init__(self, store: Store, features: FeatureGates) -> None:
        self.store = store
        self.kube_scheduler = True
        self.kubelet = True
        # The NVIDIA DRA driver's feature gates per node (its kubelet plugin's --feature-gates): none on.
        self.dra_driver_gates: dict[str, set[str]] = defaultdict(set)
        self.gpu_operator = True
        self.gfd = True
        self.crashloop_nodes: set[str] = set()
        self.validator_never_ready: set[str] = set()
        self.pod_grace_seconds = 0
        self.token_controller = True
        self.extra: list[Callable[[], None]] = []  # more simulated controllers (capi_actors.ClusterAPI)
        self.device_managers: dict[str, DeviceManager] = {}  # node → its kubelet's, where a test started one
        registry = store.registry
        self._pods = registry.by_kind("v1", "Pod")
        self._nodes = registry.by_kind("v1", "Node")
        self._daemonsets = registry.by_kind("apps/v1", "DaemonSet")
        self._revisions = registry.by_kind("apps/v1", "ControllerRevision")
        self._secrets = registry.by_kind("v1", "Secret")
        self._service_accounts = registry.by_kind("v1", "ServiceAccount")
        self._claims = registry.by_kind("resource.k8s.io/v1", "ResourceClaim")  # None before 1.34
        self._slices = registry.by_kind("resource.k8s.io/v1", "ResourceSlice")
        self._events = registry.by_kind("v1", "Event")
        self._scheduler = KubeScheduler(store, features)
        self._claim_controller = ClaimController(store)

    def reconcile(self) -> None:
        for _ in range(50):
            before = self.store.rv
            if self.gpu_operator:
                self._operator()
            if self.kube_scheduler:
                self._scheduler.run()
            if self.kubelet:
                self._kubelet()
            if self.gfd:
                self._feature_discovery()
            self._disruption()
            self._claim_controller.run()
            if self.token_controller:
                self._service_account_tokens()
            for actor in self.extra:
                actor()
            if self.store.rv == before:
                return
        raise RuntimeError("the simulated cluster components do not settle")

    # ---- kubelet (and the pod garbage collector) ---------------------------------------------------------

    def device_manager(self, node: str, directory: str) -> DeviceManager:
        """Start `node`'s kubelet device manager, its registration socket in `directory`."""
        manager = DeviceManager(directory, self._devices_allocated, self._wake).start()
        self.device_managers[node] = manager
        return manager

    def _wake(self) -> None:
        with self.store.lock:
            self.store.react()

    def _devices_allocated(self, pod: dict[str, Any], outcome: dict[str, Any] | str) -> None:
        """Record the device plugins' answers on the pod (see device_manager.py), then run the kubelet."""
        meta = pod["metadata"]
        with self.store.lock:
            current = self.store.find(self._pods, meta["namespace"], meta["name"])
            if (
                isinstance(outcome, dict)
                and outcome
                and current
                and current["metadata"]["uid"] == meta["uid"]
            ):
                answers = {ALLOCATED + name: json.dumps(a, sort_keys=True) for name, a in outcome.items()}
                annotations = {**(current["metadata"].get("annotations") or {}), **answers}
                self.store.update(
                    self._pods,
                    {**current, "metadata": {**current["metadata"], "annotations": annotations}},
                    api=False,
                )
            self.store.react()

    def _kubelet(self) -> None:
        nodes = {n["metadata"]["name"]: n for n in self.store.snapshot(self._nodes)}
        for node_name, manager in self.device_managers.items():
            on_node = self.store.snapshot(self._pods, fields=[("spec.nodeName", True, node_name)])
            manager.keep(
                {
                    p["metadata"]["uid"]
                    for p in on_node
                    if p["status"].get("phase") not in ("Succeeded", "Failed")
                }
            )
            if node_name in nodes and (status := kubelet.advertised(nodes[node_name], manager)):
                self.store.update(self._nodes, {**nodes[node_name], "status": status}, api=False)
        for pod in self.store.snapshot(self._pods):
            meta, node_name = pod["metadata"], pod.get("spec", {}).get("nodeName")
            node = nodes.get(node_name)
            if not node_name or (node is not None and not condition_true(node, "Ready")):
                continue  # unscheduled, or its node is down: nothing runs or finishes it
            if "deletionTimestamp" in meta:
                if node is None or parse_timestamp(meta["deletionTimestamp"]) <= self.store.now():
                    self.store.delete(self._pods, meta["namespace"], meta["name"], grace=0)
            elif node is not None and pod["status"].get("phase") not in ("Succeeded", "Failed"):
                status = self._admitted_status(pod, node) or self._pod_status(pod, node)
                if claims := pod["status"].get("resourceClaimStatuses"):  # the claim controller's part
                    status["resourceClaimStatuses"] = claims
                if status != pod["status"]:
                    self.store.update(self._pods, {**pod, "status": status}, api=False)

    def _admitted_status(self, pod: dict[str, Any], node: dict[str, Any]) -> dict[str, Any] | None:
        """The status of a pod the kubelet refuses (Failed) or cannot start yet (its DRA claims not
        prepared: Pending, ContainerCreating); None for a pod that runs."""
        node_name, old = node["metadata"]["name"], pod["status"]
        now = timestamp(self.store.now())
        if "startTime" not in old:
            admitted = [
                p
                for p in self.store.snapshot(self._pods, fields=[("spec.nodeName", True, node_name)])
                if "startTime" in p.get("status", {})
                and p["status"].get("phase") not in ("Succeeded", "Failed")
            ]
            # the device manager's admit handler runs before the predicates' (kubelet.go NewMainKubelet)
            if (devices := kubelet.device_outcome(pod, self.device_managers.get(node_name))) is not None:
                return devices
            if refused := kubelet.admission(pod, node, admitted):
                reason, message = refused
                return {"phase": "Failed", "reason": reason, "message": f"Pod was rejected: {message}"}
        if not pod["spec"].get("resourceClaims"):
            return None
        namespace = pod["metadata"]["namespace"]
        published = {
            device["name"]
            for piece in (
                self.store.snapshot(self._slices, fields=[("spec.nodeName", True, node_name)])
                if self._slices
                else []
            )
            for device in piece["spec"].get("devices") or []
        }
        why = kubelet.prepare_claims(
            pod,
            lambda name: self.store.stored(self._claims, namespace, name) if self._claims else None,
            published,
            self.dra_driver_gates[node_name],
        )
        if not why:
            return None
        self._event(pod, "FailedPrepareDynamicResources", f"Failed to prepare dynamic resources: {why}")
        waiting = {"waiting": {"reason": "ContainerCreating"}}
        containers = [
            {"name": c["name"], "image": c["image"], "imageID": "", "ready": False, "restartCount": 0,
             "started": False, "state": waiting}
            for c in pod["spec"]["containers"]
        ]  # fmt: skip
        return {
            "phase": "Pending",
            "conditions": [
                self._condition(old, "PodReadyToStartContainers", False),
                self._condition(old, "Initialized", True),
                self._condition(old, "Ready", False),
                self._condition(old, "ContainersReady", False),
                self._condition(old, "PodScheduled", True),
            ],
            "startTime": old.get("startTime", now),
            "containerStatuses": containers,
        }

    def _event(self, obj: dict[str, Any], reason: str, message: str) -> None:
        """A Warning event from the kubelet on `obj`, once per message (as the event recorder aggregates)."""
        meta = obj["metadata"]
        name = f"{meta['name']}.{hashlib.sha256((meta['uid'] + reason + message).encode()).hexdigest()[:10]}"
        if self.store.stored(self._events, meta["namespace"], name) is not None:
            return
        now = timestamp(self.store.now())
        event = {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {"name": name, "namespace": meta["namespace"]},
            "involvedObject": {"apiVersion": "v1", "kind": obj["kind"], "name": meta["name"],
                               "namespace": meta["namespace"], "uid": meta["uid"]},
            "reason": reason, "message": message, "type": "Warning", "source": {"component": "kubelet"},
            "firstTimestamp": now, "lastTimestamp": now, "count": 1,
        }  # fmt: skip
        self.store.create(self._events, event, api=False)

    def _condition(self, old: dict[str, Any], kind: str, true: bool) -> dict[str, Any]:
        status = "True" if true else "False"
        for condition in old.get("conditions") or []:
            if condition["type"] == kind and condition["status"] == status:
                return condition
        condition = {"type": kind, "status": status, "lastTransitionTime": timestamp(self.store.now())}
        if not true:
            condition["reason"] = "ContainersNotReady"
        return condition

    def _is_driver(self, pod: dict[str, Any]) -> bool:
        return (
            pod["metadata"]["namespace"] == OPERATOR_NAMESPACE
            and _labels(pod).get("app.kubernetes.io/component") == DRIVER_COMPONENT
        )

    def _node_driver_ready(self, node_name: str) -> bool:
        pods = self.store.snapshot(
            self._pods,
            OPERATOR_NAMESPACE,
            _is("app.kubernetes.io/component", DRIVER_COMPONENT),
            [("spec.nodeName", True, node_name)],
        )
        return any("deletionTimestamp" not in p["metadata"] and _running_ready(p) for p in pods)

    def _pod_status(self, pod: dict[str, Any], node: dict[str, Any]) -> dict[str, Any]:
        old, node_name = pod["status"], node["metadata"]["name"]
        now = timestamp(self.store.now())
        crashloop = self._is_driver(pod) and node_name in self.crashloop_nodes
        ready = not crashloop
        if pod["metadata"]["namespace"] == OPERATOR_NAMESPACE and _labels(pod).get("app") == VALIDATOR_APP:
            ready = node_name not in self.validator_never_ready and self._node_driver_ready(node_name)
        previous = {c["name"]: c for c in old.get("containerStatuses") or []}
        containers = []
        for container in pod["spec"]["containers"]:
            before = previous.get(container["name"], {})
            entry = {
                "name": container["name"],
                "image": container["image"],
                "imageID": "",
                "ready": ready,
                "restartCount": before.get("restartCount", 0),
                "started": not crashloop,
                "state": before["state"]
                if "running" in before.get("state", {})
                else {"running": {"startedAt": now}},
            }
            if crashloop:
                pod_name = pod["metadata"]["name"]
                back_off = f"back-off 5m0s restarting failed container={container['name']} pod={pod_name}"
                entry["restartCount"] = max(entry["restartCount"], 11)
                entry["state"] = {"waiting": {"reason": "CrashLoopBackOff", "message": back_off}}
                ended = {"exitCode": 1, "reason": "Error", "startedAt": now, "finishedAt": now}
                entry["lastState"] = before.get("lastState") or {"terminated": ended}
            containers.append(entry)
        status = {
            "phase": "Running",
            "conditions": [
                self._condition(old, "PodReadyToStartContainers", True),
                self._condition(old, "Initialized", True),
                self._condition(old, "Ready", ready),
                self._condition(old, "ContainersReady", ready),
                self._condition(old, "PodScheduled", True),
            ],
            "startTime": old.get("startTime", now),
            "containerStatuses": containers,
        }
        addresses = [
            a["address"] for a in node.get("status", {}).get("addresses") or [] if a["type"] == "InternalIP"
        ]
        if addresses:
            status["hostIP"], status["hostIPs"] = addresses[0], [{"ip": addresses[0]}]
        return status

    # ---- GPU Operator ------------------------------------------------------------------------------------

    def _operator(self) -> None:
        registry = self.store.registry
        drivers_rt = registry.by_kind("nvidia.com/v1alpha1", "NVIDIADriver")
        policies_rt = registry.by_kind("nvidia.com/v1", "ClusterPolicy")
        namespace = self.store.stored(registry.by_kind("v1", "Namespace"), None, OPERATOR_NAMESPACE)
        policies = self.store.snapshot(policies_rt) if policies_rt and namespace else []
        if not policies:
            return  # the operator is not installed
        nodes = self.store.snapshot(self._nodes)
        gpu_nodes = [n["metadata"]["name"] for n in nodes if _labels(n).get(GPU_PRESENT) == "true"]
        self._validators(policies[0], gpu_nodes)
        drivers = [d for d in self.store.snapshot(drivers_rt) if "deletionTimestamp" not in d["metadata"]]
        if not any(p["spec"].get("driver", {}).get("useNvidiaDriverCRD") for p in policies):
            for driver in drivers:
                message = "useNvidiaDriverCRD is not enabled in ClusterPolicy"
                self._driver_status(drivers_rt, driver, "disabled", ("Reconciled", message))
            return
        assignment, conflicts = self._assign(drivers, nodes, gpu_nodes)
        daemonsets = {d["metadata"]["name"]: self._driver_daemonset(d) for d in drivers}
        self._driver_pods(assignment, daemonsets)
        self._owner_labels(nodes, assignment)
        for driver in drivers:
            name = driver["metadata"]["name"]
            mine = [node for node, owner in assignment.items() if owner == name]
            if name in conflicts:
                self._driver_status(
                    drivers_rt, driver, "notReady", ("ConflictingNodeSelector", conflicts[name]), mine
                )
            elif all(self._node_driver_ready(node) for node in mine):
                self._driver_status(drivers_rt, driver, "ready", None, mine)
            else:
                waiting = ("DriverNotReady", "Waiting for driver pod to be ready")
                self._driver_status(drivers_rt, driver, "notReady", waiting, mine)
        ready = all(self._validator_ready(node) for node in gpu_nodes)
        policy = policies[0]
        status = {"state": "ready" if ready else "notReady", "namespace": OPERATOR_NAMESPACE}
        if policy.get("status") != status:
            self.store.update(policies_rt, {**policy, "status": status}, api=False)

    @staticmethod
    def _assign(
        drivers: list[dict], nodes: list[dict], gpu_nodes: list[str]
    ) -> tuple[dict[str, str], dict[str, str]]:
        """node -> owning NVIDIADriver for the GPU nodes selected by exactly one; driver -> conflict message.
        As the operator's validator does, overlap is judged on the selectors alone."""
        owners: dict[str, list[str]] = defaultdict(list)
        for driver in drivers:
            if driver["spec"].get("default"):
                continue
            selector = driver["spec"].get("nodeSelector") or {GPU_PRESENT: "true"}
            for node in nodes:
                if all(_labels(node).get(k) == v for k, v in selector.items()):
                    owners[node["metadata"]["name"]].append(driver["metadata"]["name"])
        conflicts: dict[str, str] = {}
        for node, names in sorted(owners.items()):
            if len(names) > 1:
                for name in names:
                    conflicts.setdefault(
                        name,
                        f"multiple NVIDIADrivers match the same node {node}: [{' '.join(sorted(names))}]",
                    )
        assignment = {node: owners[node][0] for node in gpu_nodes if len(owners.get(node, [])) == 1}
        default = next((d["metadata"]["name"] for d in drivers if d["spec"].get("default")), None)
        if default:
            assignment.update({node: default for node in gpu_nodes if node not in owners})
        return assignment, conflicts

    def _ensure_daemonset(
        self, name: str, labels: dict[str, str], pod_spec: dict, owner: dict
    ) -> dict[str, Any]:
        template = {"metadata": {"labels": labels}, "spec": pod_spec}
        spec = {
            "selector": {"matchLabels": {"app": labels["app"]}},
            "template": template,
            "updateStrategy": {"type": "OnDelete"},
        }
        existing = self.store.find(self._daemonsets, OPERATOR_NAMESPACE, name)
        if existing is None:
            metadata = {
                "name": name,
                "namespace": OPERATOR_NAMESPACE,
                "labels": labels,
                "ownerReferences": [_owner(owner)],
            }
            ds = self.store.create(
                self._daemonsets,
                {"apiVersion": "apps/v1", "kind": "DaemonSet", "metadata": metadata, "spec": spec},
                api=False,
            )
        elif existing["spec"] != spec:
            ds = self.store.update(self._daemonsets, {**existing, "spec": spec}, api=False)
        else:
            ds = existing
        template_hash = hashlib.sha256(json.dumps(template, sort_keys=True).encode()).hexdigest()[:10]
        revision_name = f"{name}-{template_hash}"
        if self.store.find(self._revisions, OPERATOR_NAMESPACE, revision_name) is None:
            others = self.store.list(self._revisions, OPERATOR_NAMESPACE, _is("app", labels["app"]))
            revision = {
                "apiVersion": "apps/v1",
                "kind": "ControllerRevision",
                "metadata": {
                    "name": revision_name,
                    "namespace": OPERATOR_NAMESPACE,
                    "labels": {"app": labels["app"], "controller-revision-hash": template_hash},
                    "ownerReferences": [_owner(ds)],
                },
                "data": {"spec": {"template": template}},
                "revision": max((r["revision"] for r in others), default=0) + 1,
            }
            self.store.create(self._revisions, revision, api=False)
        ds["template_hash"] = template_hash  # not stored: how pods made from it are labelled
        return ds

    def _driver_daemonset(self, driver: dict[str, Any]) -> dict[str, Any]:
        spec, name = driver["spec"], driver["metadata"]["name"]
        repository = spec.get("repository")
        image = f"{repository}/{spec['image']}" if repository else spec["image"]
        labels = {
            "app": f"nvidia-gpu-driver-{name}",
            "app.kubernetes.io/component": DRIVER_COMPONENT,
            "nvidia.com/driver-name": name,
        }
        pod_spec = {
            "containers": [
                {"name": "nvidia-driver-ctr", "image": f"{image}:{spec.get('version', '')}-ubuntu22.04"}
            ],
            "nodeSelector": spec.get("nodeSelector") or {GPU_PRESENT: "true"},
            "priorityClassName": "system-node-critical",
            # The operator's default, or the NVIDIADriver's own (`spec.tolerations`) in its place.
            "tolerations": spec.get("tolerations")
            or [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
        }
        return self._ensure_daemonset(labels["app"], labels, pod_spec, driver)

    def _daemon_pods(
        self, ds: dict[str, Any], nodes: set[str], requirement: list[Requirement], prefix: str
    ) -> None:
        """One pod per node from the DaemonSet's current template (OnDelete: existing pods keep theirs); pods
        on other nodes go."""
        pods = self.store.snapshot(self._pods, OPERATOR_NAMESPACE, requirement)
        for pod in pods:
            if pod["spec"].get("nodeName") not in nodes and "deletionTimestamp" not in pod["metadata"]:
                self.store.delete(
                    self._pods, OPERATOR_NAMESPACE, pod["metadata"]["name"], grace=self.pod_grace_seconds
                )
        taken = {p["metadata"]["name"] for p in self.store.snapshot(self._pods, OPERATOR_NAMESPACE)}
        template = ds["spec"]["template"]
        for node in sorted(nodes):
            name = f"{prefix}-{node}"
            if name in taken:
                continue  # running, or still terminating: the name is free once it is gone
            labels = {**template["metadata"]["labels"], "controller-revision-hash": ds["template_hash"]}
            labels["pod-template-generation"] = str(ds["metadata"]["generation"])
            metadata = {
                "name": name,
                "namespace": OPERATOR_NAMESPACE,
                "labels": labels,
                "ownerReferences": [_owner(ds)],
            }
            pod = {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": metadata,
                "spec": {**template["spec"], "nodeName": node},
            }
            self.store.create(self._pods, pod, api=False)

    def _driver_pods(self, assignment: dict[str, str], daemonsets: dict[str, dict]) -> None:
        for name, ds in daemonsets.items():
            nodes = {node for node, owner in assignment.items() if owner == name}
            self._daemon_pods(ds, nodes, _is("nvidia.com/driver-name", name), ds["metadata"]["name"])
        # DaemonSets (and so pods) of NVIDIADrivers that are gone; the garbage collector's work.
        stale = _is("app.kubernetes.io/component", DRIVER_COMPONENT)
        for pod in self.store.snapshot(self._pods, OPERATOR_NAMESPACE, stale):
            if (
                _labels(pod).get("nvidia.com/driver-name") not in daemonsets
                and "deletionTimestamp" not in pod["metadata"]
            ):
                self.store.delete(
                    self._pods, OPERATOR_NAMESPACE, pod["metadata"]["name"], grace=self.pod_grace_seconds
                )
        for ds in self.store.snapshot(self._daemonsets, OPERATOR_NAMESPACE, stale):
            if _labels(ds).get("nvidia.com/driver-name") not in daemonsets:
                self.store.delete(self._daemonsets, OPERATOR_NAMESPACE, ds["metadata"]["name"])

    def _owner_labels(self, nodes: list[dict[str, Any]], assignment: dict[str, str]) -> None:
        for node in nodes:
            labels = dict(_labels(node))
            owner = assignment.get(node["metadata"]["name"])
            if labels.get(OWNER_LABEL) != owner:
                labels.pop(OWNER_LABEL, None)
                if owner:
                    labels[OWNER_LABEL] = owner
                self.store.update(
                    self._nodes, {**node, "metadata": {**node["metadata"], "labels": labels}}, api=False
                )

    def _driver_status(
        self, rt, driver: dict, state: str, error: tuple[str, str] | None, nodes: list[str] = ()
    ) -> None:
        old = driver.get("status", {})
        now = timestamp(self.store.now())

        def condition(kind: str, true: bool, reason: str, message: str = "") -> dict[str, Any]:
            status = "True" if true else "False"
            for previous in old.get("conditions") or []:
                if (previous["type"], previous["status"], previous["reason"], previous["message"]) == (
                    kind,
                    status,
                    reason,
                    message,
                ):
                    return previous
            return {
                "type": kind,
                "status": status,
                "reason": reason,
                "message": message,
                "lastTransitionTime": now,
            }

        if error:  # as the operator's condition updater sets them: Ready False, Error True with the reason
            conditions = [condition("Ready", False, "Error"), condition("Error", True, *error)]
        else:
            conditions = [
                condition("Ready", True, "Reconciled", "All resources have been successfully reconciled"),
                condition("Error", False, "Ready"),
            ]
        status = {
            "state": state,
            "namespace": OPERATOR_NAMESPACE,
            "conditions": conditions,
        }
        if status != old:
            self.store.update(rt, {**driver, "status": status}, api=False)

    def _validators(self, policy: dict[str, Any], gpu_nodes: list[str]) -> None:
        labels = {"app": VALIDATOR_APP, "app.kubernetes.io/part-of": "gpu-operator"}
        pod_spec = {
            "containers": [{"name": VALIDATOR_APP, "image": VALIDATOR_IMAGE}],
            "nodeSelector": {GPU_PRESENT: "true"},
            "priorityClassName": "system-node-critical",
            "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
        }
        ds = self._ensure_daemonset(VALIDATOR_APP, labels, pod_spec, policy)
        self._daemon_pods(ds, set(gpu_nodes), _is("app", VALIDATOR_APP), VALIDATOR_APP)

    def _validator_ready(self, node: str) -> bool:
        pod = self.store.stored(self._pods, OPERATOR_NAMESPACE, f"{VALIDATOR_APP}-{node}")
        return pod is not None and _running_ready(pod)

    # ---- GPU Feature Discovery and the DRA driver's slices -----------------------------------------------

    def _feature_discovery(self) -> None:
        slices_rt = self.store.registry.by_kind("resource.k8s.io/v1", "ResourceSlice")
        newest: dict[str, dict] = {}
        for pod in self.store.snapshot(
            self._pods, OPERATOR_NAMESPACE, _is("app.kubernetes.io/component", DRIVER_COMPONENT)
        ):
            node = pod["spec"].get("nodeName")
            if "deletionTimestamp" not in pod["metadata"] and _running_ready(pod):
                if (
                    node not in newest
                    or pod["metadata"]["creationTimestamp"] >= newest[node]["metadata"]["creationTimestamp"]
                ):
                    newest[node] = pod
        for node_name, pod in sorted(newest.items()):
            version = image_version(pod["spec"]["containers"][0]["image"])
            node = self.store.stored(self._nodes, None, node_name)
            if node is None:
                continue
            labels = {**_labels(node), **driver_version_labels(version)}
            if labels != _labels(node):
                self.store.update(
                    self._nodes, {**node, "metadata": {**node["metadata"], "labels": labels}}, api=False
                )
            if slices_rt is None:
                continue
            fields = [("spec.nodeName", True, node_name), ("spec.driver", True, "gpu.nvidia.com")]
            for resource_slice in self.store.snapshot(slices_rt, fields=fields):
                devices = resource_slice["spec"].get("devices") or []
                if all(d.get("attributes", {}).get("driverVersion") == {"version": version} for d in devices):
                    continue
                resource_slice = copied(resource_slice)  # changed below: the stored one must not be
                devices = resource_slice["spec"].get("devices") or []
                for device in devices:
                    device.setdefault("attributes", {})["driverVersion"] = {"version": version}
                resource_slice["spec"]["pool"]["generation"] += 1  # the driver republishes its pool
                self.store.update(slices_rt, resource_slice, api=False)

    # ---- disruption controller ---------------------------------------------------------------------------

    def _disruption(self) -> None:
        pdbs = self.store.registry.by_kind("policy/v1", "PodDisruptionBudget")
        for pdb in self.store.list(pdbs):
            status = pdb_status(pdb, pdb_pods(self.store, pdb), pdb.get("status", {}), self.store.now())
            if status != pdb.get("status"):
                self.store.update(pdbs, {**pdb, "status": status}, api=False)

    # ---- the token controller ----------------------------------------------------------------------------

    def _service_account_tokens(self) -> None:
        """Fill a service-account-token Secret whose ServiceAccount exists with a token the server accepts
        (kept in `store.tokens`), the namespace and the CA, as kube-controller-manager's token controller."""
        for secret in self.store.snapshot(self._secrets):
            meta = secret["metadata"]
            account = (meta.get("annotations") or {}).get(SERVICE_ACCOUNT_ANNOTATION)
            if (
                secret.get("type") != TOKEN_SECRET_TYPE
                or not account
                or (secret.get("data") or {}).get("token")
            ):
                continue
            if self.store.stored(self._service_accounts, meta["namespace"], account) is None:
                continue
            token = secrets.token_urlsafe(24)
            self.store.tokens.add(token)
            data = {"token": token, "namespace": meta["namespace"], "ca.crt": self.store.ca_bundle}
            encoded = {k: base64.b64encode(v.encode()).decode() for k, v in data.items()}
            self.store.update(self._secrets, {**secret, "data": encoded}, api=False)
