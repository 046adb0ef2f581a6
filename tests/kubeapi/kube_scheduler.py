"""kube-scheduler's default profile, for pods whose schedulerName is default-scheduler (others are left to
their own scheduler). One pass places every pending pod in creation order, deterministically.

Each behaviour follows kubernetes/kubernetes:
- pkg/scheduler/framework/plugins/schedulinggates/scheduling_gates.go: a gated pod is not scheduled
  (PodScheduled False, reason SchedulingGated);
- pkg/scheduler/framework/plugins/nodeunschedulable/node_unschedulable.go: a cordoned node takes no pod
  that does not tolerate node.kubernetes.io/unschedulable:NoSchedule;
- pkg/scheduler/framework/plugins/tainttoleration/taint_toleration.go: NoSchedule and NoExecute taints;
- pkg/scheduler/framework/plugins/nodeaffinity/node_affinity.go: nodeSelector and required node affinity;
- pkg/scheduler/framework/plugins/noderesources/fit.go: CPU, memory, pods and extended resources;
- pkg/scheduler/framework/plugins/dynamicresources/dynamicresources.go: an allocated claim's
  `status.allocation.nodeSelector` is a filter; unallocated claims are allocated from the node's
  ResourceSlices by DeviceClass (k8s.io/dynamic-resource-allocation structured allocator); PostFilter
  deallocates an allocated claim no other pod reserves when no node passes; PreBind writes the allocation
  (with the resource.kubernetes.io/delete-protection finalizer) and adds the pod to `reservedFor`.
The framework runs a node's filters in that order and stops at the first that fails
(pkg/scheduler/framework/runtime/framework.go RunFilterPlugins)."""

from __future__ import annotations

import re
from typing import Any

import celpy

from .store import Store, timestamp

DEFAULT_SCHEDULER = "default-scheduler"
DELETE_PROTECTION = "resource.kubernetes.io/delete-protection"
UNSCHEDULABLE_TAINT = "node.kubernetes.io/unschedulable"
SUFFIXES = {
    "m": 0.001, "k": 1e3, "M": 1e6, "G": 1e9, "T": 1e12, "P": 1e15, "E": 1e18,
    "Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60,
}  # fmt: skip
QUANTITY = re.compile(r"^([+-]?[0-9.]+(?:[eE][+-]?[0-9]+)?)([a-zA-Z]*)$")
_CEL = celpy.Environment()
_programs: dict[str, Any] = {}


def quantity(text: object) -> float:
    """A resource quantity ("500m", "4Gi", "2") as a number."""
    number, suffix = QUANTITY.match(str(text)).groups()
    return float(number) * SUFFIXES.get(suffix, 1)


def labels(obj: dict[str, Any]) -> dict[str, str]:
    return obj["metadata"].get("labels") or {}


# ---- predicates shared with the kubelet's admission ------------------------------------------------------


def tolerates(tolerations: list[dict[str, Any]], taint: dict[str, Any]) -> bool:
    """k8s.io/api core/v1 toleration.go ToleratesTaint: empty key with Exists matches every key, empty
    effect every effect."""
    for toleration in tolerations or []:
        if toleration.get("effect") and toleration["effect"] != taint["effect"]:
            continue
        if toleration.get("key") and toleration["key"] != taint["key"]:
            continue
        operator = toleration.get("operator", "Equal")
        if operator == "Exists" or (
            operator == "Equal" and toleration.get("value", "") == taint.get("value", "")
        ):
            return True
    return False


def untolerated(pod: dict[str, Any], node: dict[str, Any], effects: tuple[str, ...]) -> dict[str, Any] | None:
    tolerations = pod["spec"].get("tolerations") or []
    for taint in node.get("spec", {}).get("taints") or []:
        if taint["effect"] in effects and not tolerates(tolerations, taint):
            return taint
    return None


def _requirement(requirement: dict[str, Any], value: str | None) -> bool:
    operator, values = requirement["operator"], requirement.get("values") or []
    if operator == "In":
        return value in values
    if operator == "NotIn":
        return value not in values
    if operator == "Exists":
        return value is not None
    if operator == "DoesNotExist":
        return value is None
    if value is None:
        return False
    return int(value) > int(values[0]) if operator == "Gt" else int(value) < int(values[0])


def selector_matches(selector: dict[str, Any], node: dict[str, Any]) -> bool:
    """A NodeSelector (k8s.io/component-helpers scheduling/corev1/nodeaffinity): any term, all of its
    expressions (labels) and fields (metadata.name)."""
    for term in selector.get("nodeSelectorTerms") or []:
        expressions, fields = term.get("matchExpressions") or [], term.get("matchFields") or []
        if not expressions and not fields:
            continue  # an empty term matches nothing
        if all(_requirement(r, labels(node).get(r["key"])) for r in expressions) and all(
            _requirement(r, node["metadata"]["name"] if r["key"] == "metadata.name" else None) for r in fields
        ):
            return True
    return False


def affinity_matches(pod: dict[str, Any], node: dict[str, Any]) -> bool:
    spec = pod["spec"]
    if any(labels(node).get(k) != v for k, v in (spec.get("nodeSelector") or {}).items()):
        return False
    required = ((spec.get("affinity") or {}).get("nodeAffinity") or {}).get(
        "requiredDuringSchedulingIgnoredDuringExecution"
    )
    return required is None or selector_matches(required, node)


def requests(pod: dict[str, Any]) -> dict[str, float]:
    """What a pod requests (pkg/api/v1/resource helpers PodRequests): the sum of its containers, or its
    largest init container where that is more; limits stand for requests a container does not set."""

    def of(container: dict[str, Any]) -> dict[str, float]:
        resources = container.get("resources") or {}
        asked = {**(resources.get("limits") or {}), **(resources.get("requests") or {})}
        return {name: quantity(value) for name, value in asked.items()}

    total: dict[str, float] = {}
    for container in pod["spec"].get("containers") or []:
        for name, value in of(container).items():
            total[name] = total.get(name, 0) + value
    for container in pod["spec"].get("initContainers") or []:
        for name, value in of(container).items():
            total[name] = max(total.get(name, 0), value)
    return total


def extended(name: str) -> bool:
    """v1helper.IsExtendedResourceName: a qualified name outside kubernetes.io."""
    return (
        "/" in name and not name.split("/")[0].endswith("kubernetes.io") and not name.startswith("requests.")
    )


def insufficient(asked: dict[str, float], node: dict[str, Any], others: list[dict[str, Any]]) -> list[str]:
    """The resources (cpu, memory, pods, extended) the node lacks for the pod beside `others` on it."""
    allocatable = {k: quantity(v) for k, v in (node.get("status", {}).get("allocatable") or {}).items()}
    used: dict[str, float] = {}
    for other in others:
        for name, value in requests(other).items():
            used[name] = used.get(name, 0) + value
    short = []
    if len(others) + 1 > allocatable.get("pods", 110):
        short.append("pods")
    for name, value in asked.items():
        if (name in ("cpu", "memory") or extended(name)) and value > 0:
            if used.get(name, 0) + value > allocatable.get(name, 0):
                short.append(name)
    return short


def active(pod: dict[str, Any]) -> bool:
    return pod.get("status", {}).get("phase") not in ("Succeeded", "Failed")


# ---- DRA ---------------------------------------------------------------------------------------------------


def claim_names(pod: dict[str, Any]) -> list[str | None]:
    """k8s.io/dynamic-resource-allocation resourceclaim.Name: a named claim, or the one generated for a
    template (listed in the pod's status; None until then)."""
    generated = {
        s["name"]: s.get("resourceClaimName")
        for s in pod.get("status", {}).get("resourceClaimStatuses") or []
    }
    return [
        ref.get("resourceClaimName") or generated.get(ref["name"])
        for ref in pod["spec"].get("resourceClaims") or []
    ]


def reserved_for(claim: dict[str, Any], pod: dict[str, Any]) -> bool:
    reserved = (claim.get("status") or {}).get("reservedFor") or []
    return any(r.get("resource") == "pods" and r.get("uid") == pod["metadata"]["uid"] for r in reserved)


def _cel(expression: str, device: dict[str, Any]) -> bool:
    if expression not in _programs:
        _programs[expression] = _CEL.program(_CEL.compile(expression))
    try:
        return bool(_programs[expression].evaluate({"device": celpy.json_to_cel(device)}))
    except Exception:  # noqa: BLE001 - a runtime error (a missing attribute) does not select the device
        return False


def cel_device(driver: str, device: dict[str, Any]) -> dict[str, Any]:
    """A published device as CEL sees it (k8s.io/dynamic-resource-allocation cel/compile.go): attributes
    and capacity by qualified domain, unqualified names in the driver's."""

    def qualified(entries: dict[str, Any], value) -> dict[str, dict[str, Any]]:
        domains: dict[str, dict[str, Any]] = {}
        for name, entry in entries.items():
            domain, _, short = name.rpartition("/")
            domains.setdefault(domain or driver, {})[short] = value(entry)
        return domains

    return {
        "driver": driver,
        "attributes": qualified(device.get("attributes") or {}, lambda a: next(iter(a.values()))),
        "capacity": qualified(device.get("capacity") or {}, lambda c: c["value"]),
        "allowMultipleAllocations": bool(device.get("allowMultipleAllocations")),
    }


class KubeScheduler:
    def __init__(self, store: Store, features) -> None:
        self.store, self.features = store, features
        registry = store.registry
        self._pods = registry.by_kind("v1", "Pod")
        self._nodes = registry.by_kind("v1", "Node")
        self._claims = registry.by_kind("resource.k8s.io/v1", "ResourceClaim")
        self._slices = registry.by_kind("resource.k8s.io/v1", "ResourceSlice")
        self._classes = registry.by_kind("resource.k8s.io/v1", "DeviceClass")

    def run(self) -> None:
        unbound = self.store.snapshot(self._pods, fields=[("spec.nodeName", True, "")])
        pending = [
            p
            for p in unbound
            if p["spec"].get("schedulerName", DEFAULT_SCHEDULER) == DEFAULT_SCHEDULER
            and "deletionTimestamp" not in p["metadata"]
            and p.get("status", {}).get("phase", "Pending") == "Pending"
        ]
        for pod in sorted(pending, key=lambda p: (p["metadata"]["creationTimestamp"], p["metadata"]["name"])):
            if pod["spec"].get("schedulingGates"):
                self._scheduled_condition(
                    pod, "SchedulingGated", "Scheduling is blocked due to non-empty scheduling gates"
                )
            else:
                self._schedule(pod)

    # ---- one scheduling cycle ---------------------------------------------------------------------------

    def _schedule(self, pod: dict[str, Any]) -> None:
        claims, why = self._pre_filter(pod)
        if why:
            self._scheduled_condition(pod, "Unschedulable", why)
            return
        nodes = sorted(self.store.snapshot(self._nodes), key=lambda n: n["metadata"]["name"])
        reasons: dict[str, int] = {}
        unavailable: set[int] = set()  # allocated claims whose node selector some node failed
        for node in nodes:
            reason, allocations = self._filter(pod, node, claims, unavailable)
            if reason is None:
                self._bind(pod, node["metadata"]["name"], claims, allocations)
                return
            reasons[reason] = reasons.get(reason, 0) + 1
        summary = ", ".join(f"{count} {reason}" for reason, count in sorted(reasons.items()))
        message = f"0/{len(nodes)} nodes are available: {summary}."
        self._post_filter(pod, claims, unavailable)
        self._scheduled_condition(pod, "Unschedulable", message)

    def _pre_filter(self, pod: dict[str, Any]) -> tuple[list[dict[str, Any]], str]:
        claims = []
        for name in claim_names(pod):
            if name is None:  # resourceclaim.Name: the claim controller has not generated it yet
                return [], f"pod {pod['metadata']['name']}: waiting for its ResourceClaims to be generated"
            claim = (
                self.store.stored(self._claims, pod["metadata"]["namespace"], name) if self._claims else None
            )
            if claim is None:
                return [], f'resourceclaim "{name}" not found'
            if "deletionTimestamp" in claim["metadata"]:
                return [], f'resourceclaim "{name}" is being deleted'
            claims.append(claim)
        return claims, ""

    def _filter(self, pod, node, claims, unavailable) -> tuple[str | None, list[dict] | None]:
        spec = node.get("spec", {})
        if spec.get("unschedulable") and not tolerates(
            pod["spec"].get("tolerations") or [], {"key": UNSCHEDULABLE_TAINT, "effect": "NoSchedule"}
        ):
            return "node(s) were unschedulable", None
        if taint := untolerated(pod, node, ("NoSchedule", "NoExecute")):
            return f"node(s) had untolerated taint {{{taint['key']}: {taint.get('value', '')}}}", None
        if not affinity_matches(pod, node):
            return "node(s) didn't match Pod's node affinity/selector", None
        bound = [("spec.nodeName", True, node["metadata"]["name"])]  # the store's index by node
        others = [p for p in self.store.snapshot(self._pods, fields=bound) if active(p)]
        if short := insufficient(requests(pod), node, others):
            return f"Insufficient {short[0]}", None
        allocations = []
        for index, claim in enumerate(claims):
            allocation = (claim.get("status") or {}).get("allocation")
            if allocation:
                selector = allocation.get("nodeSelector")
                if selector and not selector_matches(selector, node):
                    unavailable.add(index)
                    return "node(s) cannot allocate all claims", None
                allocations.append(None)
            else:
                made = self._allocate(claim, node, claims, allocations)
                if made is None:
                    return "node(s) cannot allocate all claims", None
                allocations.append(made)
        return None, allocations

    def _post_filter(self, pod: dict[str, Any], claims: list[dict[str, Any]], unavailable: set[int]) -> None:
        """Deallocate one allocated claim that no node could take and that no other pod reserves, so that
        a later cycle may allocate it where the pod fits."""
        for index in sorted(unavailable):
            claim = claims[index]
            reserved = (claim.get("status") or {}).get("reservedFor") or []
            if not reserved or (len(reserved) == 1 and reserved_for(claim, pod)):
                status = {k: v for k, v in claim["status"].items() if k not in ("allocation", "reservedFor")}
                self.store.update(self._claims, {**claim, "status": status}, api=False)
                return

    def _bind(self, pod, node_name: str, claims, allocations) -> None:
        """PreBind (allocation and reservation of each claim), then Bind."""
        for claim, allocation in zip(claims, allocations, strict=True):
            if reserved_for(claim, pod) and allocation is None:
                continue
            meta = dict(claim["metadata"])
            status = dict(claim.get("status") or {})
            if allocation is not None:
                meta["finalizers"] = [*(meta.get("finalizers") or []), DELETE_PROTECTION]
                status["allocation"] = allocation
            reference = {"resource": "pods", "name": pod["metadata"]["name"], "uid": pod["metadata"]["uid"]}
            status["reservedFor"] = [*(status.get("reservedFor") or []), reference]
            self.store.update(self._claims, {**claim, "metadata": meta, "status": status}, api=False)
        spec = {**pod["spec"], "nodeName": node_name}
        self.store.update(self._pods, {**pod, "spec": spec}, api=False)
        bound = self.store.stored(self._pods, pod["metadata"]["namespace"], pod["metadata"]["name"])
        self._scheduled_condition(bound, "", "", true=True)

    def _scheduled_condition(
        self, pod: dict[str, Any], reason: str, message: str, *, true: bool = False
    ) -> None:
        status = dict(pod.get("status") or {})
        conditions = [c for c in status.get("conditions") or [] if c["type"] != "PodScheduled"]
        old = next((c for c in status.get("conditions") or [] if c["type"] == "PodScheduled"), None)
        condition = {"type": "PodScheduled", "status": "True" if true else "False"}
        if not true:
            condition.update(reason=reason, message=message)
        if old and {k: v for k, v in old.items() if k != "lastTransitionTime"} == condition:
            return
        condition["lastTransitionTime"] = timestamp(self.store.now())
        status["conditions"] = [*conditions, condition]
        self.store.update(self._pods, {**pod, "status": status}, api=False)

    # ---- structured allocation on one node ----------------------------------------------------------------

    def _allocate(self, claim, node, claims, earlier) -> dict[str, Any] | None:
        """The allocation of an unallocated claim from the node's published devices, or None where they
        do not suffice: each exact-count request takes the first free devices (by pool and name) that its
        DeviceClass's and its own CEL selectors select."""
        node_name = node["metadata"]["name"]
        devices = self._devices(node_name)
        taken = self._in_use() | {
            (r["pool"], r["device"]) for made in earlier if made for r in made["devices"]["results"]
        }
        results = []
        for request in (claim.get("spec") or {}).get("devices", {}).get("requests") or []:
            exactly = request.get("exactly")
            if not exactly or exactly.get("allocationMode", "ExactCount") != "ExactCount":
                return None  # firstAvailable and All are not modelled: such a claim is never placed here
            device_class = (
                self.store.stored(self._classes, None, exactly["deviceClassName"]) if self._classes else None
            )
            if device_class is None:
                return None
            expressions = [s["cel"]["expression"] for s in device_class["spec"].get("selectors") or []]
            expressions += [s["cel"]["expression"] for s in exactly.get("selectors") or []]
            wanted = int(exactly.get("count", 1))
            for driver, pool, device in devices:
                if wanted == 0:
                    break
                if (pool, device["name"]) in taken or not all(
                    _cel(e, cel_device(driver, device)) for e in expressions
                ):
                    continue
                taken.add((pool, device["name"]))
                results.append(
                    {"request": request["name"], "driver": driver, "pool": pool, "device": device["name"]}
                )
                wanted -= 1
            if wanted:
                return None
        return {
            "devices": {"results": results},
            "nodeSelector": {
                "nodeSelectorTerms": [
                    {"matchFields": [{"key": "metadata.name", "operator": "In", "values": [node_name]}]}
                ]
            },
            "allocationTimestamp": timestamp(self.store.now()),
        }

    def _devices(self, node_name: str) -> list[tuple[str, str, dict[str, Any]]]:
        """(driver, pool, device) of the newest generation of each pool published for the node."""
        if self._slices is None:
            return []
        slices = self.store.snapshot(self._slices, fields=[("spec.nodeName", True, node_name)])
        newest: dict[str, int] = {}
        for piece in slices:
            pool = piece["spec"]["pool"]
            newest[pool["name"]] = max(newest.get(pool["name"], 0), pool["generation"])
        found = [
            (piece["spec"]["driver"], piece["spec"]["pool"]["name"], device)
            for piece in slices
            if piece["spec"]["pool"]["generation"] == newest[piece["spec"]["pool"]["name"]]
            for device in piece["spec"].get("devices") or []
        ]
        return sorted(found, key=lambda f: (f[1], f[2]["name"]))

    def _in_use(self) -> set[tuple[str, str]]:
        """Devices held by allocated claims, each taken whole here: upstream may add allocations to a device
        that allows several (consumable capacity); this stand-in's allocator does not, so a claim it
        allocates never shares a device (NVKE writes its own shared allocations)."""
        return {
            (r["pool"], r["device"])
            for claim in self.store.snapshot(self._claims)
            for r in ((claim.get("status") or {}).get("allocation") or {}).get("devices", {}).get("results")
            or []
        }
