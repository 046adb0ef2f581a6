"""kube-controller-manager's resource claim controller (kubernetes/kubernetes
pkg/controller/resourceclaim/controller.go, syncClaim): `reservedFor` entries of pods that are gone,
replaced (another UID) or done are dropped; when the last goes from a claim carrying the scheduler's
finalizer resource.kubernetes.io/delete-protection (one kube-scheduler allocated), the allocation is
cleared and the finalizer removed; a claim being deleted with that finalizer and no consumer is released
the same way; an unreserved claim generated for a pod (its controller owner) that is done or replaced is
deleted. Claims another allocator wrote under its own finalizer keep their allocation: releasing them is
that allocator's work. A pod's claim from a ResourceClaimTemplate is generated for it (handleClaim: named
`<pod>-<claim>-<suffix>`, owned by the pod, annotated resource.kubernetes.io/pod-claim-name) and listed
in the pod's `status.resourceClaimStatuses`."""

from __future__ import annotations

from typing import Any

from .kube_scheduler import DELETE_PROTECTION
from .store import Store

POD_CLAIM_NAME = "resource.kubernetes.io/pod-claim-name"


def done(pod: dict[str, Any]) -> bool:
    """isPodDone: terminal, or deleted before it was scheduled."""
    return pod.get("status", {}).get("phase") in ("Succeeded", "Failed") or (
        "deletionTimestamp" in pod["metadata"] and not pod["spec"].get("nodeName")
    )


def owning_pod(claim: dict[str, Any]) -> tuple[str, str]:
    for owner in claim["metadata"].get("ownerReferences") or []:
        if owner.get("controller") and owner.get("apiVersion") == "v1" and owner.get("kind") == "Pod":
            return owner["name"], owner["uid"]
    return "", ""


class ClaimController:
    def __init__(self, store: Store) -> None:
        self.store = store
        self._pods = store.registry.by_kind("v1", "Pod")
        self._claims = store.registry.by_kind("resource.k8s.io/v1", "ResourceClaim")  # None before 1.34
        self._templates = store.registry.by_kind("resource.k8s.io/v1", "ResourceClaimTemplate")

    def run(self) -> None:
        if self._claims is None:
            return
        if self._templates and self.store.snapshot(self._templates):  # else no pod has a claim to generate
            for pod in self.store.snapshot(self._pods):
                if not done(pod) and "deletionTimestamp" not in pod["metadata"]:
                    self._generate(pod)
        for claim in self.store.snapshot(self._claims):
            self._sync(claim)

    def _generate(self, pod: dict[str, Any]) -> None:
        meta = pod["metadata"]
        statuses = list(pod.get("status", {}).get("resourceClaimStatuses") or [])
        listed = {s["name"] for s in statuses}
        for ref in pod["spec"].get("resourceClaims") or []:
            template_name = ref.get("resourceClaimTemplateName")
            if not template_name or ref["name"] in listed:
                continue
            template = self.store.find(self._templates, meta["namespace"], template_name)
            if template is None:
                continue  # the pod waits; a template made later is used then
            spec = template["spec"]
            owner = {"apiVersion": "v1", "kind": "Pod", "name": meta["name"], "uid": meta["uid"],
                     "controller": True, "blockOwnerDeletion": True}  # fmt: skip
            annotations = {**(spec.get("metadata") or {}).get("annotations", {}), POD_CLAIM_NAME: ref["name"]}
            claim = {
                "apiVersion": "resource.k8s.io/v1",
                "kind": "ResourceClaim",
                "metadata": {
                    "generateName": f"{meta['name'][:28]}-{ref['name'][:28]}-",
                    "namespace": meta["namespace"],
                    "ownerReferences": [owner],
                    "annotations": annotations,
                    "labels": (spec.get("metadata") or {}).get("labels") or {},
                },
                "spec": spec["spec"],
            }
            made = self.store.create(self._claims, claim, api=False)
            statuses.append({"name": ref["name"], "resourceClaimName": made["metadata"]["name"]})
            pod = self.store.find(self._pods, meta["namespace"], meta["name"])
            status = {**pod["status"], "resourceClaimStatuses": statuses}
            pod = self.store.update(self._pods, {**pod, "status": status}, api=False)

    def _pod(self, namespace: str, name: str) -> dict[str, Any] | None:
        return self.store.stored(self._pods, namespace, name)

    def _sync(self, claim: dict[str, Any]) -> None:
        meta, status = claim["metadata"], dict(claim.get("status") or {})
        reserved = status.get("reservedFor") or []
        valid = []
        for entry in reserved:
            pod = self._pod(meta["namespace"], entry["name"]) if entry.get("resource") == "pods" else None
            if pod is not None and pod["metadata"]["uid"] == entry.get("uid") and not done(pod):
                valid.append(entry)
        protected = DELETE_PROTECTION in (meta.get("finalizers") or [])
        release = protected and not valid and (len(valid) < len(reserved) or "deletionTimestamp" in meta)
        if len(valid) < len(reserved) or release:
            status["reservedFor"] = valid
            if release:
                status.pop("allocation", None)
            status = {k: v for k, v in status.items() if v}
            claim = self.store.update(self._claims, {**claim, "status": status}, api=False)
            if release:
                finalizers = [f for f in meta.get("finalizers") or [] if f != DELETE_PROTECTION]
                metadata = {**claim["metadata"], "finalizers": finalizers}
                self.store.update(self._claims, {**claim, "metadata": metadata}, api=False)
        if valid or self.store.stored(self._claims, meta["namespace"], meta["name"]) is None:
            return
        name, uid = owning_pod(claim)
        pod = self._pod(meta["namespace"], name) if name else None
        if (
            pod is not None
            and (pod["metadata"]["uid"] != uid or done(pod))
            and "deletionTimestamp" not in meta
        ):
            self.store.delete(self._claims, meta["namespace"], meta["name"])
