"""The checks of a CRD's structural schema that JSON Schema does not express, as kube-apiserver runs them
after the schema's own: `x-kubernetes-validations` (CEL rules) and the uniqueness of `x-kubernetes-list-type`
map and set lists.

CEL rules are evaluated with celpy, `self` bound to the value at the rule's node and `oldSelf` to the stored
object's value at the same node, as kubernetes/apiextensions-apiserver `pkg/apiserver/schema/cel/
validation.go` binds them: a transition rule (one that reads `oldSelf`) runs only on an update whose old
object has a value that correlates with the new one (through properties, map keys and the keys of
`x-kubernetes-list-type: map` lists; never through atomic or set lists). Every rule in the upstream CRDs that
tests/kubeapi/crds.py loads uses only CEL's standard functions and macros (has, all, exists_one, filter,
size, matches, in), which celpy provides; a rule that calls a function celpy lacks is refused loudly rather
than passed (`UnsupportedRule`)."""

from __future__ import annotations

import functools
import json
from typing import Any

import celpy

_ABSENT = object()
_REASONS = {  # a rule's `reason`, as field.Error renders its type
    "FieldValueInvalid": "Invalid value",
    "FieldValueForbidden": "Forbidden",
    "FieldValueRequired": "Required value",
    "FieldValueDuplicate": "Duplicate value",
}


class UnsupportedRule(Exception):
    """A rule this stand-in cannot evaluate (a Kubernetes CEL library function celpy lacks)."""


_ENV = celpy.Environment()


@functools.cache
def _program(rule: str) -> Any:
    return _ENV.program(_ENV.compile(rule))


def _evaluate(rule: str, value: Any, old: Any) -> Any:
    activation = {"self": celpy.json_to_cel(value)}
    if old is not _ABSENT:
        activation["oldSelf"] = celpy.json_to_cel(old)
    try:
        result = _program(rule).evaluate(activation)
    except celpy.CELEvalError as error:
        result = error
    if isinstance(result, celpy.CELEvalError):
        text = str(result.args[0])
        if text.startswith("undeclared reference"):
            raise UnsupportedRule(f"{rule!r}: {text.partition(' (in activation')[0]}") from None
    return result


def _field(path: list[str | int]) -> str:
    return "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in path).lstrip(".")


def _type_name(value: Any) -> str:
    return {dict: "object", list: "array", str: "string", bool: "boolean"}.get(type(value), "number")


def _rule_causes(schema: dict[str, Any], value: Any, old: Any, path: list) -> list[tuple[str, str, str]]:
    causes = []
    for rule in schema.get("x-kubernetes-validations") or []:
        if "oldSelf" in rule["rule"] and old is _ABSENT:
            continue  # a transition rule with nothing to compare with
        result = _evaluate(rule["rule"], value, old)
        if not isinstance(result, celpy.CELEvalError) and result == celpy.celtypes.BoolType(True):
            continue
        reason = rule.get("reason", "FieldValueInvalid")
        where = _field(path) + rule.get("fieldPath", "")
        if isinstance(result, celpy.CELEvalError):
            message = f"{rule['rule']}: {result.args[0]}"
        else:
            message = rule.get("message") or f"failed rule: {rule['rule']}"
        label = _REASONS.get(reason, "Invalid value")
        if reason == "FieldValueInvalid":
            label += f": {json.dumps(_type_name(value))}"
        causes.append((where, reason, f"{label}: {message}"))
    return causes


def _list_key(schema: dict[str, Any], item: Any) -> Any:
    keys = schema.get("x-kubernetes-list-map-keys") or []
    return tuple(item.get(k) for k in keys) if isinstance(item, dict) else item


def _duplicates(schema: dict[str, Any], value: list, path: list) -> list[tuple[str, str, str]]:
    kind = schema.get("x-kubernetes-list-type")
    if kind not in ("map", "set"):
        return []
    seen, causes = [], []
    for index, item in enumerate(value):
        key = _list_key(schema, item) if kind == "map" else item
        if key in seen:
            names = schema.get("x-kubernetes-list-map-keys") or []
            shown = dict(zip(names, key, strict=True)) if kind == "map" else key
            causes.append(
                (_field([*path, index]), "FieldValueDuplicate", f"Duplicate value: {json.dumps(shown)}")
            )
        seen.append(key)
    return causes


def causes(schema: dict[str, Any], value: Any, old: Any = _ABSENT, path: list | None = None) -> list:
    """What kube-apiserver's CEL validator and list-type checks find wrong with `value` (and the old
    object's correlated value, or nothing on create), as (field, reason, message)."""
    path = path or []
    found = _rule_causes(schema, value, old, path)
    if isinstance(value, dict):
        old_map = old if isinstance(old, dict) else {}
        properties = schema.get("properties") or {}
        extra = schema.get("additionalProperties")
        for name, child in value.items():
            sub = properties.get(name) or (extra if isinstance(extra, dict) else None)
            if sub is not None:
                found += causes(sub, child, old_map.get(name, _ABSENT), [*path, name])
    elif isinstance(value, list) and isinstance(schema.get("items"), dict):
        items = schema["items"]
        found += _duplicates(schema, value, path)
        correlated = {}
        if schema.get("x-kubernetes-list-type") == "map" and isinstance(old, list):
            correlated = {_list_key(schema, o): o for o in old}
        for index, item in enumerate(value):
            found += causes(items, item, correlated.get(_list_key(schema, item), _ABSENT), [*path, index])
    return found


def absent() -> Any:
    """The marker for "no old object" (a create)."""
    return _ABSENT
