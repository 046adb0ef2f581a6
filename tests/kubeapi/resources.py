"""The resource table that drives routing and discovery: built-in kinds plus those of stored CRDs."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

READ_WRITE = ("create", "delete", "get", "list", "patch", "update", "watch")


@dataclass(frozen=True)
class ResourceType:
    group: str
    version: str
    plural: str
    kind: str
    namespaced: bool
    subresources: tuple[str, ...] = ()
    verbs: tuple[str, ...] = READ_WRITE
    short_names: tuple[str, ...] = ()
    # DELETE answers with the object (the client's typed return) rather than a Status.
    returns_deleted: bool = False
    crd: str = ""  # the CustomResourceDefinition that serves it; empty for built-in kinds
    min_minor: int = 0
    gate: str = ""  # the feature gate (features.py) without which it is not served

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    @property
    def qualified(self) -> str:
        """The resource as kube-apiserver's messages name it: pods, poddisruptionbudgets.policy."""
        return f"{self.plural}.{self.group}" if self.group else self.plural

    @property
    def key(self) -> tuple[str, str]:
        """Where objects are stored: one collection per group and resource, whatever the version."""
        return self.group, self.plural

    @property
    def custom(self) -> bool:
        return bool(self.crd)

    @property
    def has_status(self) -> bool:
        return "status" in self.subresources

    @property
    def singular(self) -> str:
        return self.kind.lower()


BUILTINS = (
    ResourceType(
        "", "v1", "namespaces", "Namespace", False, ("status",), short_names=("ns",), returns_deleted=True
    ),
    ResourceType("", "v1", "nodes", "Node", False, ("status",), short_names=("no",)),
    ResourceType(
        "",
        "v1",
        "pods",
        "Pod",
        True,
        ("status", "eviction", "binding"),
        short_names=("po",),
        returns_deleted=True,
    ),
    ResourceType("", "v1", "events", "Event", True, short_names=("ev",)),
    ResourceType("", "v1", "secrets", "Secret", True),
    ResourceType(
        "", "v1", "serviceaccounts", "ServiceAccount", True, short_names=("sa",), returns_deleted=True
    ),
    ResourceType(
        "policy", "v1", "poddisruptionbudgets", "PodDisruptionBudget", True, ("status",), short_names=("pdb",)
    ),
    ResourceType("apps", "v1", "daemonsets", "DaemonSet", True, ("status",), short_names=("ds",)),
    ResourceType("apps", "v1", "deployments", "Deployment", True, ("status",), short_names=("deploy",)),
    ResourceType("apps", "v1", "controllerrevisions", "ControllerRevision", True),
    ResourceType(
        "resource.k8s.io", "v1", "resourceslices", "ResourceSlice", False, returns_deleted=True, min_minor=34
    ),
    ResourceType(
        "resource.k8s.io",
        "v1",
        "resourceclaims",
        "ResourceClaim",
        True,
        ("status",),
        returns_deleted=True,
        min_minor=34,
    ),
    ResourceType(
        "resource.k8s.io", "v1", "deviceclasses", "DeviceClass", False, returns_deleted=True, min_minor=34
    ),
    # admissionregistration.k8s.io/v1 (kubernetes/api admissionregistration/v1/types.go, introduced=1.30
    # for ValidatingAdmissionPolicy and 1.36 for MutatingAdmissionPolicy; v1beta1 of the latter is off by
    # default in 1.34-1.35, so not served here). Evaluated by admission.py.
    ResourceType(
        "admissionregistration.k8s.io",
        "v1",
        "validatingadmissionpolicies",
        "ValidatingAdmissionPolicy",
        False,
        ("status",),
        min_minor=30,
    ),
    ResourceType(
        "admissionregistration.k8s.io",
        "v1",
        "validatingadmissionpolicybindings",
        "ValidatingAdmissionPolicyBinding",
        False,
        min_minor=30,
    ),
    ResourceType(
        "admissionregistration.k8s.io",
        "v1",
        "mutatingadmissionpolicies",
        "MutatingAdmissionPolicy",
        False,
        min_minor=36,
    ),
    ResourceType(
        "admissionregistration.k8s.io",
        "v1",
        "mutatingadmissionpolicybindings",
        "MutatingAdmissionPolicyBinding",
        False,
        min_minor=36,
    ),
    ResourceType(
        "resource.k8s.io",
        "v1",
        "resourceclaimtemplates",
        "ResourceClaimTemplate",
        True,
        returns_deleted=True,
        min_minor=34,
    ),
    # The Workload API (KEP-4671, KEP-5832): scheduling.k8s.io/v1alpha2 from 1.36, which replaced 1.35's
    # v1alpha1, served only where GenericWorkload is on (kubernetes/api scheduling/v1alpha2/types.go:
    # "Workload/PodGroup API enablement is toggled by the GenericWorkload feature gate").
    ResourceType(
        "scheduling.k8s.io", "v1alpha2", "workloads", "Workload", True, min_minor=36, gate="GenericWorkload"
    ),
    ResourceType(
        "scheduling.k8s.io",
        "v1alpha2",
        "podgroups",
        "PodGroup",
        True,
        ("status",),
        min_minor=36,
        gate="GenericWorkload",
    ),
    ResourceType(
        "authorization.k8s.io",
        "v1",
        "selfsubjectaccessreviews",
        "SelfSubjectAccessReview",
        False,
        verbs=("create",),
    ),
    # Upstream serves every verb on RBAC objects (kubernetes/kubernetes pkg/registry/rbac/clusterrole/
    # storage/storage.go, a generic registry Store); the stand-in serves those its tests use.
    ResourceType(
        "rbac.authorization.k8s.io",
        "v1",
        "clusterroles",
        "ClusterRole",
        False,
        verbs=("create", "get", "delete"),
    ),
    ResourceType(
        "rbac.authorization.k8s.io",
        "v1",
        "clusterrolebindings",
        "ClusterRoleBinding",
        False,
        verbs=("create", "get", "delete"),
    ),
    ResourceType("rbac.authorization.k8s.io", "v1", "roles", "Role", True, verbs=("create", "get")),
    ResourceType(
        "rbac.authorization.k8s.io", "v1", "rolebindings", "RoleBinding", True, verbs=("create", "get")
    ),
    ResourceType(
        "apiextensions.k8s.io",
        "v1",
        "customresourcedefinitions",
        "CustomResourceDefinition",
        False,
        ("status",),
    ),
)

# Subresources whose kind differs from the parent's, as discovery reports them.
SUBRESOURCE_KINDS = {"eviction": ("policy", "v1", "Eviction"), "binding": ("", "v1", "Binding")}


def _version_priority(version: str) -> tuple[int, int, int]:
    """kube-aware ordering: GA before beta before alpha, higher numbers first (v1 > v1beta2 > v1alpha1)."""
    rest = version[1:]
    for rank, word in ((1, "beta"), (0, "alpha")):
        if word in rest:
            major, _, minor = rest.partition(word)
            return rank, int(major), int(minor or 0)
    return 2, int(rest), 0


class Registry:
    """Looks resource types up by URL (group, version, plural) or by object (apiVersion, kind)."""

    def __init__(self, minor: int) -> None:
        self.minor = minor
        self._builtin = [rt for rt in BUILTINS if rt.min_minor <= minor]
        self._custom: dict[str, list[ResourceType]] = {}  # CRD name -> its served versions
        self.enabled: Callable[[str], bool] = lambda gate: False  # the server's feature gates

    def all(self) -> list[ResourceType]:
        builtin = [rt for rt in self._builtin if not rt.gate or self.enabled(rt.gate)]
        return builtin + [rt for types in self._custom.values() for rt in types]

    def by_path(self, group: str, version: str, plural: str) -> ResourceType | None:
        return next(
            (rt for rt in self.all() if (rt.group, rt.version, rt.plural) == (group, version, plural)), None
        )

    def by_kind(self, api_version: str, kind: str) -> ResourceType | None:
        return next((rt for rt in self.all() if (rt.api_version, rt.kind) == (api_version, kind)), None)

    def crd_types(self, crd_name: str) -> list[ResourceType]:
        return self._custom.get(crd_name, [])

    def set_crd(self, crd: dict[str, Any]) -> None:
        spec = crd["spec"]
        names = spec["names"]
        self._custom[crd["metadata"]["name"]] = [
            ResourceType(
                spec["group"],
                v["name"],
                names["plural"],
                names["kind"],
                spec["scope"] == "Namespaced",
                ("status",) if "status" in v.get("subresources", {}) else (),
                short_names=tuple(names.get("shortNames", ())),
                crd=crd["metadata"]["name"],
            )
            for v in spec["versions"]
            if v.get("served", True)
        ]

    def remove_crd(self, crd_name: str) -> None:
        self._custom.pop(crd_name, None)

    def group_versions(self) -> dict[str, list[str]]:
        """group -> versions, preferred first; the core group is ""."""
        groups: dict[str, set[str]] = {}
        for rt in self.all():
            groups.setdefault(rt.group, set()).add(rt.version)
        return {g: sorted(vs, key=_version_priority, reverse=True) for g, vs in groups.items()}


def api_resource_list(registry: Registry, group: str, version: str) -> dict[str, Any] | None:
    types = [rt for rt in registry.all() if (rt.group, rt.version) == (group, version)]
    if not types:
        return None
    resources = []
    for rt in types:
        entry = {
            "name": rt.plural,
            "singularName": rt.singular,
            "namespaced": rt.namespaced,
            "kind": rt.kind,
            "verbs": list(rt.verbs),
        }
        if rt.short_names:
            entry["shortNames"] = list(rt.short_names)
        resources.append(entry)
        for sub in rt.subresources:
            sub_group, sub_version, sub_kind = SUBRESOURCE_KINDS.get(sub, (rt.group, rt.version, rt.kind))
            sub_entry = {
                "name": f"{rt.plural}/{sub}",
                "singularName": "",
                "namespaced": rt.namespaced,
                "kind": sub_kind,
                "verbs": ["create"] if sub in SUBRESOURCE_KINDS else ["get", "patch", "update"],
            }
            if sub in SUBRESOURCE_KINDS:
                sub_entry.update(group=sub_group, version=sub_version)
            resources.append(sub_entry)
    gv = f"{group}/{version}" if group else version
    return {"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": gv, "resources": resources}


def api_group(registry: Registry, name: str) -> dict[str, Any] | None:
    versions = registry.group_versions().get(name)
    if not name or not versions:
        return None
    listed = [{"groupVersion": f"{name}/{v}", "version": v} for v in versions]
    return {
        "kind": "APIGroup",
        "apiVersion": "v1",
        "name": name,
        "versions": listed,
        "preferredVersion": listed[0],
    }


def api_group_list(registry: Registry) -> dict[str, Any]:
    groups = [api_group(registry, name) for name in registry.group_versions() if name]
    return {"kind": "APIGroupList", "apiVersion": "v1", "groups": groups}
