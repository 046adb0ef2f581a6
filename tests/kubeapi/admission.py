"""Admission policies as kube-apiserver evaluates them: MutatingAdmissionPolicy (JSONPatch mutations,
reinvocation) then schema validation then ValidatingAdmissionPolicy (Deny), each through its bindings,
with CEL (cel-python) over the Kubernetes variables `object`, `oldObject`, `request`, `namespaceObject`
and `variables`.

Upstream (kubernetes/kubernetes, staging/src/k8s.io/apiserver/pkg/admission/plugin/policy/):
- matching/matching.go and ../../predicates/{namespace,object,rules}: matchConstraints and a binding's
  matchResources: resourceRules (operations, groups, versions, resources with `*` and `x/status`),
  namespaceSelector (a namespaced object's namespace labels; the Namespace's own), objectSelector;
- generic/policy_dispatcher.go and validating/dispatcher.go: matchConditions first (all true, else the
  policy does not apply), variables, then each validation; a false one denies with its
  messageExpression, else message, else "failed expression: <expression>", as
  `<resource> "<name>" is forbidden: ValidatingAdmissionPolicy '<p>' with binding '<b>' denied request:
  <message>`, the code from `reason` (Invalid, 422, by default); an expression that errs fails the
  request when failurePolicy is Fail (the default) and is skipped when Ignore;
- mutating/dispatcher.go and patch/json_patch.go: each mutation's JSONPatch list applied in order;
  `Object.<path>{...}` builds a value; a policy with reinvocationPolicy IfNeeded runs once more when a
  later mutation changed the object (mutating/reinvocationcontext).

What NVKE's policies do not use is refused when such a policy is created, saying so, as upstream's type
checker refuses what it cannot compile (validating/typechecking.go): paramKind, auditAnnotations,
excludeResourceRules, validationActions other than Deny, ApplyConfiguration mutations. Writes by the
simulated controllers (api=False) skip admission, like the seeding that makes a test's starting state.
"""

from __future__ import annotations

import copy
import json
import threading
from typing import Any

import celpy
from celpy import celtypes
from celpy.adapter import CELJSONEncoder

from . import patch as patches
from .errors import ApiError, invalid
from .resources import ResourceType
from .selectors import from_label_selector

GROUP = "admissionregistration.k8s.io"
VALIDATING = "ValidatingAdmissionPolicy"
MUTATING = "MutatingAdmissionPolicy"
KINDS = (VALIDATING, MUTATING)
REASON_CODES = {"Unauthorized": 401, "Forbidden": 403, "Invalid": 422, "RequestEntityTooLarge": 413}
UNSUPPORTED = {
    "paramKind": "policies with parameters",
    "auditAnnotations": "audit annotations",
}

_environment = celpy.Environment()
_requester = threading.local()  # who makes the request this thread serves (set by the server)


def serve_as(user: str) -> None:
    """The authenticated user of the request the current thread handles (request.userInfo)."""
    _requester.user = user


def _user() -> str:
    return getattr(_requester, "user", "")


class _ObjectType(celtypes.MapType):
    """`Object`, `Object.spec`, `Object.spec.tolerations`…: a type whose construction `{f: v}` is the map
    of its fields (mutating/patch: the CEL types of the object's schema)."""

    def __getitem__(self, key: Any) -> _ObjectType:
        return _ObjectType()

    def __call__(self, fields: Any) -> celtypes.MapType:
        return celtypes.MapType(fields or {})


def _json_patch(fields: Any) -> celtypes.MapType:
    return celtypes.MapType(fields or {})


def _compile(expression: str, field: str, kind: str, name: str) -> None:
    try:
        _program(expression)
    except celpy.CELParseError as error:
        cause = (
            field,
            "FieldValueInvalid",
            f"Invalid value: {json.dumps(expression)}: compilation failed: {error}",
        )
        raise invalid(kind, name, [cause], GROUP) from None


def check_policy(rt: ResourceType, obj: dict[str, Any]) -> None:
    """Refuse, as a 422 naming the field, a policy whose CEL does not compile or that asks for what this
    stand-in does not evaluate."""
    if rt.group != GROUP or rt.kind not in KINDS:
        if rt.group == GROUP and rt.kind.endswith("Binding"):
            _check_binding(rt, obj)
        return
    name, spec = obj["metadata"]["name"], obj.get("spec") or {}
    causes = [
        (f"spec.{key}", "FieldValueForbidden", f"Forbidden: {what} are not evaluated by the stand-in")
        for key, what in UNSUPPORTED.items()
        if spec.get(key)
    ]
    if (spec.get("matchConstraints") or {}).get("excludeResourceRules"):
        message = "Forbidden: excludeResourceRules are not evaluated by the stand-in"
        causes.append(("spec.matchConstraints.excludeResourceRules", "FieldValueForbidden", message))
    for index, mutation in enumerate(spec.get("mutations") or []):
        if mutation.get("patchType") != "JSONPatch":
            message = "Forbidden: the stand-in evaluates JSONPatch mutations only"
            causes.append((f"spec.mutations[{index}].patchType", "FieldValueForbidden", message))
    if causes:
        raise invalid(rt.kind, name, causes, GROUP)
    for field, expression in _expressions(spec):
        _compile(expression, field, rt.kind, name)


def _check_binding(rt: ResourceType, obj: dict[str, Any]) -> None:
    spec = obj.get("spec") or {}
    if spec.get("paramRef"):
        message = "Forbidden: policies with parameters are not evaluated by the stand-in"
        raise invalid(
            rt.kind, obj["metadata"]["name"], [("spec.paramRef", "FieldValueForbidden", message)], GROUP
        )
    if set(spec.get("validationActions") or ["Deny"]) != {"Deny"}:
        message = "Forbidden: the stand-in evaluates validationActions [Deny] only"
        cause = ("spec.validationActions", "FieldValueForbidden", message)
        raise invalid(rt.kind, obj["metadata"]["name"], [cause], GROUP)


def _expressions(spec: dict[str, Any]) -> list[tuple[str, str]]:
    found = []
    for key in ("matchConditions", "variables", "validations"):
        for index, item in enumerate(spec.get(key) or []):
            found.append((f"spec.{key}[{index}].expression", item["expression"]))
            if item.get("messageExpression"):
                found.append((f"spec.{key}[{index}].messageExpression", item["messageExpression"]))
    for index, mutation in enumerate(spec.get("mutations") or []):
        found.append((f"spec.mutations[{index}].jsonPatch.expression", mutation["jsonPatch"]["expression"]))
    return found


class Admission:
    """The policies stored in `store`, applied to one API write."""

    def __init__(self, store) -> None:
        self.store = store

    def _policies(self, kind: str) -> list[tuple[dict, dict]]:
        """(policy, binding) pairs of that kind, in binding name order (a fixed order for reinvocation)."""
        registry = self.store.registry
        policy_rt = registry.by_kind(f"{GROUP}/v1", kind)
        binding_rt = registry.by_kind(f"{GROUP}/v1", f"{kind}Binding")
        if policy_rt is None or binding_rt is None:
            return []  # the minor does not serve this kind
        policies = {p["metadata"]["name"]: p for p in self.store.list(policy_rt)}
        return [
            (policies[b["spec"]["policyName"]], b)
            for b in self.store.list(binding_rt)
            if b["spec"].get("policyName") in policies
        ]

    def mutate(self, rt: ResourceType, operation: str, obj: dict, old: dict | None, subresource: str) -> dict:
        """The object after every matching MutatingAdmissionPolicy, reinvoking IfNeeded ones once."""
        pairs = [
            pair
            for pair in self._policies(MUTATING)
            if self._matches(pair, rt, operation, obj, old, subresource)
        ]
        applied_at: dict[str, dict] = {}
        for policy, binding in pairs:
            obj = self._mutate_one(policy, binding, rt, operation, obj, old)
            applied_at[binding["metadata"]["name"]] = obj
        for policy, binding in pairs:
            if (
                policy["spec"].get("reinvocationPolicy") == "IfNeeded"
                and applied_at[binding["metadata"]["name"]] != obj
            ):
                obj = self._mutate_one(policy, binding, rt, operation, obj, old)
        return obj

    def validate(
        self, rt: ResourceType, operation: str, obj: dict, old: dict | None, subresource: str
    ) -> None:
        """Raise the first denial of a matching ValidatingAdmissionPolicy."""
        for policy, binding in self._policies(VALIDATING):
            if not self._matches((policy, binding), rt, operation, obj, old, subresource):
                continue
            spec, context = policy["spec"], self._context(policy, rt, operation, obj, old)
            if context is None:
                continue
            for validation in spec.get("validations") or []:
                verdict = self._evaluate(policy, binding, rt, obj, validation["expression"], context)
                if verdict is None or verdict:
                    continue
                message = validation.get("message") or f"failed expression: {validation['expression']}"
                if validation.get("messageExpression"):
                    said = self._evaluate(policy, binding, rt, obj, validation["messageExpression"], context)
                    message = str(said) if said else message
                reason = validation.get("reason") or "Invalid"
                raise self._denied(policy, binding, rt, obj, message, reason)

    # ---- matching ----------------------------------------------------------------------------------------

    def _matches(self, pair, rt, operation, obj, old, subresource) -> bool:
        policy, binding = pair
        constraints = policy["spec"].get("matchConstraints") or {}
        return self._match_resources(constraints, rt, operation, obj, old, subresource) and (
            "matchResources" not in binding["spec"]
            or self._match_resources(binding["spec"]["matchResources"], rt, operation, obj, old, subresource)
        )

    def _match_resources(self, match: dict, rt, operation, obj, old, subresource) -> bool:
        resource = f"{rt.plural}/{subresource}" if subresource else rt.plural
        if not any(_rule_matches(rule, rt, operation, resource) for rule in match.get("resourceRules") or []):
            return False
        subject = obj if operation != "DELETE" else old
        if not all(r.matches(_labels(subject)) for r in from_label_selector(match.get("objectSelector"))):
            return False
        namespace_labels = self._namespace_labels(rt, subject)
        return namespace_labels is None or all(
            r.matches(namespace_labels) for r in from_label_selector(match.get("namespaceSelector"))
        )

    def _namespace_labels(self, rt, obj) -> dict | None:
        """The labels the namespaceSelector sees; None for cluster-scoped objects (always matched)."""
        if rt.kind == "Namespace":
            return _labels(obj)
        if not rt.namespaced:
            return None
        namespace = self._namespace(obj)
        return _labels(namespace) if namespace else {}

    def _namespace(self, obj: dict) -> dict | None:
        namespaces = self.store.registry.by_kind("v1", "Namespace")
        return self.store.find(namespaces, None, obj["metadata"].get("namespace", ""))

    # ---- evaluation --------------------------------------------------------------------------------------

    def _context(self, policy, rt, operation, obj, old) -> dict | None:
        """The CEL activation, or None when a matchCondition is false (the policy does not apply)."""
        meta = (obj or old)["metadata"]
        request = {
            "operation": operation,
            "userInfo": {"username": _user()},
            "namespace": meta.get("namespace", ""),
            "name": meta.get("name", ""),
            "kind": {"group": rt.group, "version": rt.version, "kind": rt.kind},
            "resource": {"group": rt.group, "version": rt.version, "resource": rt.plural},
        }
        namespace = self._namespace(obj or old) if rt.namespaced else None
        context: dict[str, Any] = {
            "object": celpy.json_to_cel(obj) if obj is not None else None,
            "oldObject": celpy.json_to_cel(old) if old is not None else None,
            "request": celpy.json_to_cel(request),
            "namespaceObject": celpy.json_to_cel(namespace) if namespace else None,
            "JSONPatch": _json_patch,
            "Object": _ObjectType(),
        }
        definitions = policy["spec"].get("variables") or []
        context["variables"] = _Variables(definitions, context, {}, len(definitions))
        for condition in policy["spec"].get("matchConditions") or []:
            verdict = self._evaluate(policy, None, rt, obj, condition["expression"], context)
            if verdict is not None and not verdict:
                return None
        return context

    def _evaluate(self, policy, binding, rt, obj, expression: str, context: dict) -> Any:
        """The expression's value; None when it erred and failurePolicy is Ignore; else the error denies."""
        try:
            value = _program(expression).evaluate(context)
            if isinstance(value, celpy.CELEvalError):
                raise value
            return value
        except (celpy.CELEvalError, TypeError, KeyError) as error:
            if policy["spec"].get("failurePolicy", "Fail") == "Ignore":
                return None
            message = f"expression '{expression}' resulted in error: {error.args[0] if error.args else error}"
            raise self._denied(policy, binding, rt, obj, message, "Invalid") from None

    def _mutate_one(self, policy, binding, rt, operation, obj, old) -> dict:
        context = self._context(policy, rt, operation, obj, old)
        if context is None:
            return obj
        for mutation in policy["spec"].get("mutations") or []:
            operations = self._evaluate(
                policy, binding, rt, obj, mutation["jsonPatch"]["expression"], context
            )
            if operations is None:
                continue
            try:
                obj = patches.json_patch(
                    copy.deepcopy(obj), json.loads(json.dumps(operations, cls=CELJSONEncoder))
                )
            except patches.PatchError as error:
                raise self._denied(policy, binding, rt, obj, f"JSON Patch: {error}", "Invalid") from None
            context["object"] = celpy.json_to_cel(obj)
        return obj

    @staticmethod
    def _denied(policy, binding, rt, obj, message: str, reason: str) -> ApiError:
        bound = f" with binding '{binding['metadata']['name']}'" if binding else ""
        name = obj["metadata"].get("name", "") if obj else ""
        who = f"{policy['kind']} '{policy['metadata']['name']}'{bound}"
        text = f'{rt.qualified} "{name}" is forbidden: {who} denied request: {message}'
        return ApiError(REASON_CODES.get(reason, 422), text, reason)


class _Variables(celtypes.MapType):
    """`variables` as kube-apiserver composes them (kubernetes/kubernetes
    staging/src/k8s.io/apiserver/pkg/cel/lazy/lazy.go MapValue, used by
    staging/src/k8s.io/apiserver/pkg/admission/plugin/cel/composition.go): each one evaluated when an
    expression first reads it, then kept; one that errs is kept as the error, failing only the
    expressions that read it. A variable sees those before it (`limit`: how many)."""

    def __init__(self, definitions: list[dict], context: dict, values: dict, limit: int) -> None:
        super().__init__(
            {celtypes.StringType(v["name"]): celtypes.BoolType(False) for v in definitions[:limit]}
        )
        self._definitions, self._context, self._values = definitions, context, values

    def __getitem__(self, key: Any) -> Any:
        names = [v["name"] for v in self._definitions]
        if key not in self:
            raise KeyError(key)
        name = str(key)
        if name not in self._values:
            index = names.index(name)
            context = {
                **self._context,
                "variables": _Variables(self._definitions, self._context, self._values, index),
            }
            try:
                self._values[name] = _program(self._definitions[index]["expression"]).evaluate(context)
            except celpy.CELEvalError as error:
                self._values[name] = error
        return self._values[name]


_programs: dict[str, Any] = {}


def _program(expression: str):
    """A compiled expression, kept: every write evaluates the stored policies' expressions again."""
    if expression not in _programs:
        _programs[expression] = _environment.program(_environment.compile(expression))
    return _programs[expression]


def _labels(obj: dict | None) -> dict[str, str]:
    return ((obj or {}).get("metadata") or {}).get("labels") or {}


def _rule_matches(rule: dict, rt: ResourceType, operation: str, resource: str) -> bool:
    """predicates/rules/rules.go: every list matches (`*` all), resources as `plural[/sub]` or `*/sub`."""

    def among(values, value) -> bool:
        return "*" in (values or []) or value in (values or [])

    parent, _, sub = resource.partition("/")
    resources = rule.get("resources") or []
    by_resource = (
        resource in resources
        or (not sub and "*" in resources)
        or f"{parent}/*" in resources
        or (sub and f"*/{sub}" in resources)
        or "*/*" in resources
    )
    scope = rule.get("scope", "*")
    scoped = scope == "*" or (scope == "Namespaced") == rt.namespaced
    return (
        among(rule.get("operations"), operation)
        and among(rule.get("apiGroups"), rt.group)
        and among(rule.get("apiVersions"), rt.version)
        and by_resource
        and scoped
    )
