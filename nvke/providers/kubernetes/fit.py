"""Whether the node NVKE placed a pod's GPU claim on will take the pod: the checks kube-scheduler makes
before binding and the kubelet makes again when admitting (a pod that fails the kubelet's goes Failed).

Each follows kubernetes/kubernetes:
- pkg/scheduler/framework/plugins/tainttoleration/taint_toleration.go: a NoSchedule or NoExecute taint
  the pod does not tolerate (k8s.io/api core/v1 toleration.go ToleratesTaint);
- pkg/scheduler/framework/plugins/nodeaffinity/node_affinity.go with k8s.io/component-helpers
  scheduling/corev1/nodeaffinity: `nodeSelector` and required node affinity;
- pkg/scheduler/framework/plugins/noderesources/fit.go: pods, CPU, memory, ephemeral storage and
  extended resources against allocatable, beside the requests of the pods bound there
  (pkg/api/v1/resource PodRequests: containers summed, init containers at their largest, overhead);
- pkg/kubelet/lifecycle/predicate.go removeMissingExtendedResources: an extended resource the node does
  not advertise (`nvidia.com/gpu-memory`) is dropped, not refused, as the kubelet does.
Reasons are kube-scheduler's ("Insufficient cpu", "node(s) had untolerated taint {k: v}"); the kubelet's
admission reasons for the same checks are in REFUSALS."""

import datetime
import hashlib
import json

from nvke import quantity

# Reasons the kubelet sets on a pod it refuses to admit (pkg/kubelet/lifecycle/predicate.go Admit: the
# OutOf<resource> ones and its predicate names; the device manager's failures are
# UnexpectedAdmissionError).
REFUSALS = {
    "NodeAffinity",
    "TaintToleration",
    "UnexpectedAdmissionError",
    "PodOSSelectorNodeLabelDoesNotMatch",
    "PodOSNotSupported",
    "InvalidNodeInfo",
    "UnknownReason",
    "UnexpectedPredicateFailureType",
}
NATIVE = ("cpu", "memory", "ephemeral-storage")
DEFAULT_PODS = 110  # the kubelet's --max-pods default, where a node does not say


def refused_by_kubelet(pod: dict) -> bool:
    status = pod.get("status") or {}
    reason = status.get("reason") or ""
    return status.get("phase") == "Failed" and (reason.startswith("OutOf") or reason in REFUSALS)


def active(pod: dict) -> bool:
    """Holds its node's resources: not finished (a terminating pod still does until it is gone)."""
    return (pod.get("status") or {}).get("phase") not in ("Succeeded", "Failed")


def _amount(value: object) -> float:
    try:
        return quantity.parse(str(value))
    except ValueError:
        return 0.0  # not a quantity NVKE reads: the kubelet is the judge of it


def requests(pod: dict) -> dict[str, float]:
    """What the pod requests: its containers summed, or an init container's where larger, plus its
    overhead; a container's limit stands for a request it does not set (the API server's defaulting)."""

    def of(container: dict) -> dict[str, float]:
        resources = container.get("resources") or {}
        asked = {**(resources.get("limits") or {}), **(resources.get("requests") or {})}
        return {name: _amount(value) for name, value in asked.items()}

    spec = pod.get("spec") or {}
    total: dict[str, float] = {}
    for container in spec.get("containers") or []:
        for name, value in of(container).items():
            total[name] = total.get(name, 0) + value
    for container in spec.get("initContainers") or []:
        for name, value in of(container).items():
            total[name] = max(total.get(name, 0), value)
    for name, value in (spec.get("overhead") or {}).items():
        total[name] = total.get(name, 0) + _amount(value)
    return total


def _extended(name: str) -> bool:
    """v1helper.IsExtendedResourceName: a qualified name outside kubernetes.io."""
    return "/" in name and not name.split("/")[0].endswith("kubernetes.io")


def tolerates(tolerations: list[dict], taint: dict) -> bool:
    """ToleratesTaint: an empty effect or key matches any; Exists ignores the value."""
    for toleration in tolerations:
        if toleration.get("effect") and toleration["effect"] != taint["effect"]:
            continue
        if toleration.get("key") and toleration["key"] != taint["key"]:
            continue
        if toleration.get("operator", "Equal") == "Exists":
            return True
        if toleration.get("value", "") == taint.get("value", ""):
            return True
    return False


def _requirement(requirement: dict, value: str | None) -> bool:
    operator, values = requirement["operator"], requirement.get("values") or []
    if operator == "In":
        return value in values
    if operator == "NotIn":
        return value not in values
    if operator == "Exists":
        return value is not None
    if operator == "DoesNotExist":
        return value is None
    try:
        number, bound = int(value), int(values[0])  # Gt and Lt: integers, a missing label fails
    except (TypeError, ValueError, IndexError):
        return False
    return number > bound if operator == "Gt" else number < bound


def affinity_matches(pod: dict, node: dict) -> bool:
    spec, meta = pod.get("spec") or {}, node["metadata"]
    labels = meta.get("labels") or {}
    if any(labels.get(key) != value for key, value in (spec.get("nodeSelector") or {}).items()):
        return False
    affinity = ((spec.get("affinity") or {}).get("nodeAffinity") or {}).get(
        "requiredDuringSchedulingIgnoredDuringExecution"
    )
    if affinity is None:
        return True
    for term in affinity.get("nodeSelectorTerms") or []:
        expressions, fields = term.get("matchExpressions") or [], term.get("matchFields") or []
        if not expressions and not fields:
            continue  # an empty term matches no node
        if all(_requirement(r, labels.get(r["key"])) for r in expressions) and all(
            _requirement(r, meta["name"] if r["key"] == "metadata.name" else None) for r in fields
        ):
            return True
    return False


def misfit(pod: dict, node: dict, bound: list[dict]) -> str:
    """Why `node` will not take `pod` beside the active pods `bound` to it, in kube-scheduler's words
    with the figures; "" when it will."""
    tolerations = (pod.get("spec") or {}).get("tolerations") or []
    for taint in (node.get("spec") or {}).get("taints") or []:
        if taint["effect"] in ("NoSchedule", "NoExecute") and not tolerates(tolerations, taint):
            return f"node(s) had untolerated taint {{{taint['key']}: {taint.get('value', '')}}}"
    if not affinity_matches(pod, node):
        return "node(s) didn't match Pod's node affinity/selector"
    allocatable = (node.get("status") or {}).get("allocatable") or {}
    others = [p for p in bound if active(p) and p["metadata"].get("uid") != pod["metadata"].get("uid")]
    pods = int(_amount(allocatable.get("pods", DEFAULT_PODS)))
    if len(others) + 1 > pods:
        return f"Too many pods: {len(others)} of {pods} allowed are bound there"
    used: dict[str, float] = {}
    for other in others:
        for name, value in requests(other).items():
            used[name] = used.get(name, 0) + value
    for name, wanted in sorted(requests(pod).items()):
        if wanted <= 0 or not (name in NATIVE or (_extended(name) and name in allocatable)):
            continue  # extended resources the node does not advertise are dropped (the kubelet's rule)
        free = _amount(allocatable.get(name, 0)) - used.get(name, 0)
        if wanted > free:
            return (
                f"Insufficient {name}: the pod requests {_say(name, wanted)}, "
                f"{_say(name, used.get(name, 0))} of {_say(name, _amount(allocatable.get(name, 0)))} "
                f"allocatable are requested by the {len(others)} pod(s) bound there"
            )
    return ""


def _say(name: str, amount: float) -> str:
    if name in ("memory", "ephemeral-storage"):
        return quantity.human_mib(int(amount // 2**20))
    return f"{amount:g}"


# ---- nodes whose kubelet refused a pod, remembered for its replacement ---------------------------------

HOLD_S = 600  # a node that refused a pod takes no pod of the same owner for this long, or until it changes
NODE_STATE = "nvke.io/refused-node-state"  # on a refused pod: its node as NVKE saw it then (node_state)


def node_state(node: dict) -> str:
    """What of a node its kubelet's admission reads (allocatable, taints, labels), as a short digest."""
    seen = {
        "allocatable": (node.get("status") or {}).get("allocatable") or {},
        "taints": (node.get("spec") or {}).get("taints") or [],
        "labels": node["metadata"].get("labels") or {},
    }
    return hashlib.sha256(json.dumps(seen, sort_keys=True).encode()).hexdigest()[:16]


def owner(pod: dict) -> tuple[str, str]:
    """What a replacement shares with the pod it replaces: its controller, or its name (a bare pod made
    again under the same name)."""
    meta = pod["metadata"]
    for reference in meta.get("ownerReferences") or []:
        if reference.get("controller"):
            return meta["namespace"], reference["uid"]
    return meta["namespace"], meta["name"]


def refusals(
    pods: list[dict], nodes: dict[str, dict], now: datetime.datetime
) -> dict[tuple[str, str], dict[str, str]]:
    """{owner: {node: what its kubelet said}} for the pods a kubelet refused in the last HOLD_S seconds
    (a refusal comes within moments of the pod's binding, so its creation dates it) on a node that has
    not changed since NVKE saw the refusal (NODE_STATE). The refused pod itself is the record."""
    held: dict[tuple[str, str], dict[str, str]] = {}
    for pod in pods:
        node, meta = (pod.get("spec") or {}).get("nodeName"), pod["metadata"]
        created = meta.get("creationTimestamp")
        if not (node and created and refused_by_kubelet(pod)):
            continue
        if (now - datetime.datetime.fromisoformat(created)).total_seconds() >= HOLD_S:
            continue
        seen = (meta.get("annotations") or {}).get(NODE_STATE)
        if seen and node in nodes and node_state(nodes[node]) != seen:
            continue  # the node changed since: it may take the pod now
        status = pod["status"]
        said = f"{meta['name']} ({status['reason']}: {status.get('message', '')})"
        held.setdefault(owner(pod), {})[node] = said
    return held
