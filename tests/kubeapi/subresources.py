"""pods/eviction, pods/binding and SelfSubjectAccessReview, following kube-apiserver's REST handlers; and the
PodDisruptionBudget arithmetic that the eviction handler and the disruption controller share."""

from __future__ import annotations

import copy
import math
from typing import Any

from . import selectors, validation
from .authorization import Authorizer, User, review_attributes
from .errors import ApiError, bad_request, invalid, status_object
from .store import Store, timestamp

SUCCESS = status_object(201, success=True)


def condition_true(obj: dict[str, Any], kind: str) -> bool:
    conditions = obj.get("status", {}).get("conditions") or []
    return any(c.get("type") == kind and c.get("status") == "True" for c in conditions)


def pod_healthy(pod: dict[str, Any]) -> bool:
    """What the disruption controller counts: Ready and not being deleted (Running, as Ready implies)."""
    return (
        pod.get("status", {}).get("phase") == "Running"
        and condition_true(pod, "Ready")
        and "deletionTimestamp" not in pod["metadata"]
    )


def _scaled(value: int | str, total: int) -> int:
    """GetScaledValueFromIntOrPercent with rounding up."""
    if isinstance(value, str) and value.endswith("%"):
        return math.ceil(int(value[:-1]) * total / 100)
    return int(value)


def pdb_pods(store: Store, pdb: dict[str, Any]) -> list[dict[str, Any]]:
    pods = store.registry.by_kind("v1", "Pod")
    requirements = selectors.from_label_selector(pdb["spec"].get("selector"))
    return store.list(pods, pdb["metadata"]["namespace"], requirements)


def pdb_status(
    pdb: dict[str, Any], pods: list[dict[str, Any]], old: dict[str, Any], now: float
) -> dict[str, Any]:
    """PodDisruptionBudgetStatus as the disruption controller computes it."""
    spec = pdb["spec"]
    expected = len(pods)
    if all(any(r.get("controller") for r in p["metadata"].get("ownerReferences") or []) for p in pods):
        # Expected pods come from the controllers' scale, which evictions do not shrink: nothing here
        # recreates evicted pods, so the most pods seen stands in for it.
        expected = max(expected, old.get("expectedPods", 0))
    healthy = sum(pod_healthy(p) for p in pods)
    if "minAvailable" in spec:
        desired = _scaled(spec["minAvailable"], expected)
    elif "maxUnavailable" in spec:
        desired = max(0, expected - _scaled(spec["maxUnavailable"], expected))
    else:
        desired = 0
    allowed = max(0, healthy - desired)
    status = "True" if allowed > 0 else "False"
    condition = {
        "type": "DisruptionAllowed",
        "status": status,
        "reason": "SufficientPods" if allowed > 0 else "InsufficientPods",
        "message": "",
        "observedGeneration": pdb["metadata"]["generation"],
        "lastTransitionTime": timestamp(now),
    }
    for previous in old.get("conditions") or []:
        if previous.get("type") == "DisruptionAllowed" and previous.get("status") == status:
            condition["lastTransitionTime"] = previous["lastTransitionTime"]
    return {
        "observedGeneration": pdb["metadata"]["generation"],
        "disruptionsAllowed": allowed,
        "currentHealthy": healthy,
        "desiredHealthy": desired,
        "expectedPods": expected,
        "conditions": [condition],
    }


def _pod_pdbs(store: Store, pod: dict[str, Any]) -> list[dict[str, Any]]:
    pdbs = store.registry.by_kind("policy/v1", "PodDisruptionBudget")
    return [
        pdb
        for pdb in store.list(pdbs, pod["metadata"]["namespace"])
        # A PDB with an empty selector matches nothing here (unlike in the disruption controller).
        if (requirements := selectors.from_label_selector(pdb["spec"].get("selector")))
        and selectors.labels_match(requirements, pod)
    ]


def evict(
    store: Store, namespace: str, name: str, body: dict[str, Any], default_grace: int, dry_run: bool
) -> dict:
    body = {"apiVersion": "policy/v1", "kind": "Eviction", **body}  # the endpoint implies them
    validation.validate_builtin(body, store.registry.minor)
    if body.get("metadata", {}).get("name") != name:
        raise bad_request("name in URL does not match name in Eviction object")
    options = body.get("deleteOptions") or {}
    dry_run = dry_run or options.get("dryRun") == ["All"]
    grace = options.get("gracePeriodSeconds", default_grace)
    pods = store.registry.by_kind("v1", "Pod")
    with store.lock:
        pod = store.get(pods, namespace, name)
        status = pod.get("status", {})
        # Pods that are terminal, pending or already going can be deleted without consulting budgets.
        if (
            status.get("phase") not in ("Succeeded", "Failed", "Pending")
            and "deletionTimestamp" not in pod["metadata"]
        ):
            pdbs = _pod_pdbs(store, pod)
            if len(pdbs) > 1:
                message = (
                    "This pod has more than one PodDisruptionBudget, which the eviction subresource does not "
                )
                message += "support."
                raise ApiError(500, message, reason="")
            if pdbs:
                pdb = pdbs[0]
                budget = pdb_status(pdb, pdb_pods(store, pdb), pdb.get("status", {}), store.now())
                unready_allowed = not condition_true(pod, "Ready") and (
                    pdb["spec"].get("unhealthyPodEvictionPolicy") == "AlwaysAllow"
                    or budget["currentHealthy"] >= budget["desiredHealthy"] > 0
                )
                if not unready_allowed and budget["disruptionsAllowed"] < 1:
                    cause = (
                        f"The disruption budget {pdb['metadata']['name']} needs {budget['desiredHealthy']} "
                        "healthy pods"
                        f" and has {budget['currentHealthy']} currently"
                    )
                    message = "Cannot evict pod as it would violate the pod's disruption budget."
                    raise ApiError(
                        429, message, details={"causes": [{"reason": "DisruptionBudget", "message": cause}]}
                    )
        store.delete(
            pods, namespace, name, grace=grace, preconditions=options.get("preconditions"), dry_run=dry_run
        )
    return SUCCESS


def bind(store: Store, namespace: str, name: str, body: dict[str, Any], dry_run: bool) -> dict[str, Any]:
    body = {"apiVersion": "v1", "kind": "Binding", **body}
    validation.validate_builtin(body, store.registry.minor)
    if body.get("metadata", {}).get("name") != name:
        raise bad_request("name in URL does not match name in Binding object")
    target = body["target"]
    if target.get("kind", "Node") not in ("", "Node"):
        raise invalid(
            "Binding",
            name,
            [("target.kind", "FieldValueNotSupported", 'Unsupported value: "' + target["kind"] + '"')],
        )
    if not target.get("name"):
        raise invalid("Binding", name, [("target.name", "FieldValueRequired", "Required value")])
    pods = store.registry.by_kind("v1", "Pod")
    with store.lock:
        pod = store.get(pods, namespace, name)
        spec = pod["spec"]
        why = None
        if "deletionTimestamp" in pod["metadata"]:
            why = f"pod {name} is being deleted, cannot be assigned to a host"
        elif spec.get("nodeName"):
            why = f'pod {name} is already assigned to node "{spec["nodeName"]}"'
        elif spec.get("schedulingGates"):
            why = f"pod {name} has non-empty .spec.schedulingGates"
        if why:
            details = {"name": name, "kind": "pods/binding"}
            raise ApiError(
                409, f'Operation cannot be fulfilled on pods/binding "{name}": {why}', details=details
            )
        spec["nodeName"] = target["name"]
        pod["metadata"].setdefault("annotations", {}).update(body["metadata"].get("annotations") or {})
        conditions = [c for c in pod.get("status", {}).get("conditions") or [] if c["type"] != "PodScheduled"]
        scheduled = {"type": "PodScheduled", "status": "True", "lastTransitionTime": timestamp(store.now())}
        pod.setdefault("status", {})["conditions"] = [scheduled, *conditions]
        store.update(pods, pod, api=False, dry_run=dry_run)
    return SUCCESS


def access_review(authorizer: Authorizer, user: User, body: dict[str, Any], minor: int) -> dict[str, Any]:
    """SelfSubjectAccessReview: the requester's own attributes, decided by the authorizer that decides its
    requests (kubernetes/kubernetes pkg/registry/authorization/selfsubjectaccessreview/rest.go)."""
    validation.validate_builtin(body, minor)
    spec = body.get("spec") or {}
    if (spec.get("resourceAttributes") is None) == (spec.get("nonResourceAttributes") is None):
        message = "exactly one of nonResourceAttributes or resourceAttributes must be specified"
        raise invalid(
            "SelfSubjectAccessReview",
            "",
            [("spec.resourceAttributes", "FieldValueInvalid", message)],
            "authorization.k8s.io",
        )
    allowed, reason = authorizer.decide(user, review_attributes(spec))
    review = copy.deepcopy(body)
    review["metadata"] = {}
    review["status"] = {"allowed": allowed, **({"reason": reason} if reason else {})}
    return review
