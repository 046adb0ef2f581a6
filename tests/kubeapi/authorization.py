"""Authorization of every request, as kube-apiserver does it: the request's attributes from its URL
(k8s.io/apiserver endpoints/request/requestinfo.go), system:masters allowed outright (the privileged-groups
authorizer), everyone else through RBAC over the stored ClusterRoles, Roles and their bindings
(plugin/pkg/auth/authorizer/rbac/rbac.go, pkg/apis/rbac/v1/evaluation_helpers.go, the default rule resolver
of pkg/registry/rbac/validation/rule.go) plus the bootstrap roles every cluster has
(plugin/pkg/auth/authorizer/rbac/bootstrappolicy/policy.go). A refusal is the 403 the endpoint handlers
write (staging/src/k8s.io/apiserver/pkg/endpoints/handlers/responsewriters/errors.go)."""

from __future__ import annotations

import base64
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from . import selectors
from .errors import ApiError, invalid

MASTERS = "system:masters"
AUTHENTICATED = "system:authenticated"
RBAC = "rbac.authorization.k8s.io/v1"
GRANULAR_STATUS_MINOR = 36  # DRAResourceClaimGranularStatusAuthorization: beta, on by default from 1.36


@dataclass(frozen=True)
class User:
    name: str
    groups: tuple[str, ...]

    @property
    def privileged(self) -> bool:
        return MASTERS in self.groups


ADMIN = User("kubernetes-admin", (MASTERS, AUTHENTICATED))
ACCOUNT_ANNOTATION = "kubernetes.io/service-account.name"


def service_account(namespace: str, name: str) -> User:
    """The user a service account's token authenticates as (serviceaccount.UserInfo)."""
    return User(
        f"system:serviceaccount:{namespace}:{name}",
        ("system:serviceaccounts", f"system:serviceaccounts:{namespace}", AUTHENTICATED),
    )


def token_user(store, token: str) -> User | None:
    """The service account whose token Secret holds this token (the legacy token authenticator's lookup)."""
    secrets = store.registry.by_kind("v1", "Secret")
    for secret in store.list(secrets):
        data = secret.get("data") or {}
        if data.get("token") and base64.b64decode(data["token"]).decode() == token:
            meta = secret["metadata"]
            return service_account(meta["namespace"], (meta.get("annotations") or {})[ACCOUNT_ANNOTATION])
    return None


@dataclass(frozen=True)
class Attributes:
    """authorizer.Attributes of one request or one access review."""

    verb: str
    resource_request: bool
    path: str = ""
    group: str = ""
    resource: str = ""
    subresource: str = ""
    namespace: str = ""
    name: str = ""

    @property
    def combined_resource(self) -> str:
        return f"{self.resource}/{self.subresource}" if self.subresource else self.resource


VERBS = {"POST": "create", "GET": "get", "HEAD": "get", "PUT": "update", "PATCH": "patch", "DELETE": "delete"}
NAMESPACE_SUBRESOURCES = ("status", "finalize")


def request_attributes(method: str, path: str, query: dict[str, str]) -> Attributes:
    """RequestInfoFactory.NewRequestInfo: fewer than three path segments, or a prefix other than /api and
    /apis, is a non-resource request; a GET without a name is a list or a watch, a DELETE without one a
    deletecollection; a fieldSelector on metadata.name names the object."""
    parts = [p for p in path.split("/") if p]
    verb = VERBS.get(method, method.lower())
    non_resource = Attributes(verb, False, path=path)
    if len(parts) < 3 or parts[0] not in ("api", "apis"):
        return non_resource
    prefix, parts = parts[0], parts[1:]
    group = ""
    if prefix == "apis":
        if len(parts) < 3:
            return non_resource
        group, parts = parts[0], parts[1:]
    parts = parts[1:]  # the version
    namespace = ""
    if parts[0] == "namespaces" and len(parts) > 1:
        namespace = parts[1]
        if len(parts) > 2 and parts[2] not in NAMESPACE_SUBRESOURCES:
            parts = parts[2:]
    resource = parts[0]
    name = parts[1] if len(parts) > 1 else ""
    subresource = parts[2] if len(parts) > 2 else ""
    if not name and verb == "get":
        verb = "watch" if query.get("watch") in ("true", "1") else "list"
        fields = query.get("fieldSelector") or ""
        if verb in ("list", "watch") and fields.startswith("metadata.name=") and "," not in fields:
            name = fields.partition("=")[2]
    if not name and verb == "delete":
        verb = "deletecollection"
    return Attributes(verb, True, path, group, resource, subresource, namespace, name)


def review_attributes(spec: dict[str, Any]) -> Attributes:
    """What a SelfSubjectAccessReview asks about (pkg/registry/authorization/util ResourceAttributesFrom)."""
    if spec.get("resourceAttributes") is not None:
        a = spec["resourceAttributes"]
        return Attributes(
            a.get("verb", ""),
            True,
            group=a.get("group", ""),
            resource=a.get("resource", ""),
            subresource=a.get("subresource", ""),
            namespace=a.get("namespace", ""),
            name=a.get("name", ""),
        )
    a = spec.get("nonResourceAttributes") or {}
    return Attributes(a.get("verb", ""), False, path=a.get("path", ""))


# ---- rule matching: pkg/apis/rbac/v1/evaluation_helpers.go ------------------------------------------------


def _resource_matches(rule: dict[str, Any], combined: str, subresource: str) -> bool:
    for pattern in rule.get("resources") or []:
        if pattern in ("*", combined):
            return True
        # "*/scale" matches the scale subresource of every resource
        if subresource and pattern == f"*/{subresource}":
            return True
    return False


def _url_matches(rule: dict[str, Any], path: str) -> bool:
    return any(
        pattern in ("*", path) or (pattern.endswith("*") and path.startswith(pattern[:-1]))
        for pattern in rule.get("nonResourceURLs") or []
    )


def rule_allows(attributes: Attributes, rule: dict[str, Any]) -> bool:
    """rbac.RuleAllows."""
    verbs = rule.get("verbs") or []
    if "*" not in verbs and attributes.verb not in verbs:
        return False
    if not attributes.resource_request:
        return _url_matches(rule, attributes.path)
    groups = rule.get("apiGroups") or []
    names = rule.get("resourceNames") or []
    return (
        ("*" in groups or attributes.group in groups)
        and _resource_matches(rule, attributes.combined_resource, attributes.subresource)
        and (not names or attributes.name in names)
    )


# ---- the bootstrap policy: plugin/pkg/auth/authorizer/rbac/bootstrappolicy/policy.go --------------------


def _role(name: str, *rules: dict[str, Any]) -> dict[str, Any]:
    return {"apiVersion": RBAC, "kind": "ClusterRole", "metadata": {"name": name}, "rules": list(rules)}


def _group_binding(name: str, *groups: str) -> dict[str, Any]:
    return {
        "apiVersion": RBAC,
        "kind": "ClusterRoleBinding",
        "metadata": {"name": name},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": name},
        "subjects": [{"kind": "Group", "apiGroup": "rbac.authorization.k8s.io", "name": g} for g in groups],
    }


HEALTH = ["/healthz", "/livez", "/readyz", "/version", "/version/"]
BOOTSTRAP_ROLES = {
    role["metadata"]["name"]: role
    for role in (
        _role(
            "cluster-admin",
            {"apiGroups": ["*"], "resources": ["*"], "verbs": ["*"]},
            {"nonResourceURLs": ["*"], "verbs": ["*"]},
        ),
        _role(
            "system:discovery",
            {
                "nonResourceURLs": ["/api", "/api/*", "/apis", "/apis/*", "/openapi", "/openapi/*", *HEALTH],
                "verbs": ["get"],
            },
        ),
        _role("system:public-info-viewer", {"nonResourceURLs": HEALTH, "verbs": ["get"]}),
        _role(
            "system:basic-user",
            {
                "apiGroups": ["authorization.k8s.io"],
                "resources": ["selfsubjectaccessreviews", "selfsubjectrulesreviews"],
                "verbs": ["create"],
            },
            {
                "apiGroups": ["authentication.k8s.io"],
                "resources": ["selfsubjectreviews"],
                "verbs": ["create"],
            },
        ),
    )
}
BOOTSTRAP_BINDINGS = [
    _group_binding("system:discovery", AUTHENTICATED),
    _group_binding("system:public-info-viewer", AUTHENTICATED, "system:unauthenticated"),
    _group_binding("system:basic-user", AUTHENTICATED),
]


# ---- the rule resolver: pkg/registry/rbac/validation/rule.go ----------------------------------------------


def _applies_to(subject: dict[str, Any], user: User, binding_namespace: str) -> bool:
    """appliesToUser: a ServiceAccount subject without a namespace means the binding's own."""
    kind, name = subject.get("kind"), subject.get("name")
    if kind == "User":
        return name == user.name
    if kind == "Group":
        return name in user.groups
    if kind == "ServiceAccount":
        namespace = subject.get("namespace") or binding_namespace
        return user.name == f"system:serviceaccount:{namespace}:{name}"
    return False


def _describe_subject(subject: dict[str, Any], binding_namespace: str) -> str:
    """describeSubject: a service account is written "name/namespace"."""
    if subject.get("kind") == "ServiceAccount":
        return f'ServiceAccount "{subject["name"]}/{subject.get("namespace") or binding_namespace}"'
    return f'{subject.get("kind")} "{subject.get("name")}"'


class Authorizer:
    """RBAC over one FakeKubeApi's store."""

    def __init__(self, store) -> None:
        self.store = store

    def _stored(self, kind: str, namespace: str | None = None) -> list[dict[str, Any]]:
        rt = self.store.registry.by_kind(RBAC, kind)
        return self.store.list(rt, namespace) if rt is not None else []

    def _cluster_role(self, name: str) -> dict[str, Any] | None:
        rt = self.store.registry.by_kind(RBAC, "ClusterRole")
        return self.store.find(rt, None, name) or BOOTSTRAP_ROLES.get(name)

    def _role_rules(self, ref: dict[str, Any], namespace: str) -> list[dict[str, Any]]:
        if ref.get("kind") == "Role":
            rt = self.store.registry.by_kind(RBAC, "Role")
            role = self.store.find(rt, namespace, ref["name"]) if rt is not None else None
            return (role or {}).get("rules") or []
        role = self._cluster_role(ref.get("name", ""))
        if role is None:
            return []
        aggregation = role.get("aggregationRule")
        if aggregation:  # what the clusterrole-aggregation controller writes into the role's rules
            return [
                rule
                for selector in aggregation.get("clusterRoleSelectors") or []
                if (requirements := selectors.from_label_selector(selector))
                for other in self._stored("ClusterRole")
                if selectors.labels_match(requirements, other)
                for rule in other.get("rules") or []
            ]
        return role.get("rules") or []

    def _visit(self, user: User, namespace: str) -> Iterator[tuple[str, dict[str, Any]]]:
        """VisitRulesFor: cluster role bindings first, then the role bindings of the request's namespace."""
        for binding in [*BOOTSTRAP_BINDINGS, *self._stored("ClusterRoleBinding")]:
            for subject in binding.get("subjects") or []:
                if _applies_to(subject, user, ""):
                    ref = binding["roleRef"]
                    name = binding["metadata"]["name"]
                    source = (
                        f'ClusterRoleBinding "{name}" of {ref["kind"]} "{ref["name"]}" '
                        f"to {_describe_subject(subject, '')}"
                    )
                    for rule in self._role_rules(ref, ""):
                        yield source, rule
                    break
        if not namespace:
            return
        for binding in self._stored("RoleBinding", namespace):
            for subject in binding.get("subjects") or []:
                if _applies_to(subject, user, namespace):
                    ref = binding["roleRef"]
                    source = (
                        f'RoleBinding "{binding["metadata"]["name"]}/{namespace}" of {ref["kind"]} '
                        f'"{ref["name"]}" to {_describe_subject(subject, namespace)}'
                    )
                    for rule in self._role_rules(ref, namespace):
                        yield source, rule
                    break

    def decide(self, user: User, attributes: Attributes) -> tuple[bool, str]:
        """(allowed, reason), as the union of the privileged-groups authorizer and RBAC answers."""
        if user.privileged:
            return True, ""
        with self.store.lock:
            for source, rule in self._visit(user, attributes.namespace):
                if rule_allows(attributes, rule):
                    return True, f"RBAC: allowed by {source}"
        return False, ""


def forbidden(user: User, attributes: Attributes) -> ApiError:
    """responsewriters.Forbidden: apierrors.NewForbidden with forbiddenMessage's text."""
    if not attributes.resource_request:
        message = f'forbidden: User "{user.name}" cannot {attributes.verb} path "{attributes.path}"'
        return ApiError(403, message, details={})
    where = f'in the namespace "{attributes.namespace}"' if attributes.namespace else "at the cluster scope"
    why = (
        f'User "{user.name}" cannot {attributes.verb} resource "{attributes.combined_resource}" in API group '
        f'"{attributes.group}" {where}'
    )
    qualified = f"{attributes.resource}.{attributes.group}" if attributes.group else attributes.resource
    subject = f'{qualified} "{attributes.name}"' if attributes.name else qualified
    details = {"name": attributes.name} if attributes.name else {}
    if attributes.group:
        details["group"] = attributes.group
    details["kind"] = attributes.resource
    return ApiError(403, f"{subject} is forbidden: {why}", details=details)


# ---- DRA's granular status authorization (KEP-4817, 1.36+) -------------------------------------------------


def claim_status_checks(
    old: dict[str, Any], new: dict[str, Any], verb: str, minor: int
) -> list[tuple[str, Attributes]]:
    """The synthetic-subresource checks a ResourceClaim status write needs beyond resourceclaims/status
    (kubernetes/kubernetes pkg/registry/resource/resourceclaim/strategy.go and pkg/registry/resource/utils.go;
    kubernetes/website's DRA hardening guide): `verb` on resourceclaims/binding to change status.allocation or
    status.reservedFor; `arbitrary-node:<verb>` on resourceclaims/driver, named by the driver, for each driver
    whose status.devices entries change (node-associated tokens, which could use associated-node:, are not
    issued here). Each check comes with the field it guards."""
    if minor < GRANULAR_STATUS_MINOR:
        return []
    meta = old["metadata"]
    old_status, new_status = old.get("status") or {}, new.get("status") or {}
    checks = []
    for field in ("allocation", "reservedFor"):
        if old_status.get(field) != new_status.get(field):
            attributes = Attributes(
                verb,
                True,
                group="resource.k8s.io",
                resource="resourceclaims",
                subresource="binding",
                namespace=meta["namespace"],
                name=meta["name"],
            )
            checks.append((f"status.{field}", attributes))
    drivers = {
        d.get("driver", "")
        for d in [*(old_status.get("devices") or []), *(new_status.get("devices") or [])]
        if d not in (old_status.get("devices") or []) or d not in (new_status.get("devices") or [])
    }
    for driver in sorted(drivers):
        attributes = Attributes(
            f"arbitrary-node:{verb}",
            True,
            group="resource.k8s.io",
            resource="resourceclaims",
            subresource="driver",
            namespace=meta["namespace"],
            name=driver,
        )
        checks.append(("status.devices", attributes))
    return checks


def status_forbidden(name: str, field: str, attributes: Attributes) -> ApiError:
    """The strategy's ValidateUpdate answers with a field.Forbidden error: 422 Invalid."""
    message = (
        f"Forbidden: changing {field} requires {attributes.verb} permission on "
        f"{attributes.combined_resource}.{attributes.group}"
    )
    return invalid("ResourceClaim", name, [(field, "FieldValueForbidden", message)], "resource.k8s.io")
