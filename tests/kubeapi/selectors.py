"""Label and field selectors: the query-string syntax, metav1.LabelSelector objects and matching."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

_KEY = re.compile(r"^([A-Za-z0-9]([-A-Za-z0-9.]*[A-Za-z0-9])?/)?[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$")
_VALUE = re.compile(r"^([A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?)?$")
_SET_TERM = re.compile(r"^(\S+)\s+(in|notin)\s*\((.*)\)$")
_TERM = re.compile(r"^([^!=\s]+)\s*(==|!=|=)\s*(\S*)$")


class SelectorError(ValueError):
    pass


@dataclass(frozen=True)
class Requirement:
    key: str
    op: str  # in, notin, exists, !exists
    values: frozenset[str] = frozenset()

    def matches(self, labels: dict[str, str]) -> bool:
        if self.op == "exists":
            return self.key in labels
        if self.op == "!exists":
            return self.key not in labels
        if self.op == "in":
            return self.key in labels and labels[self.key] in self.values
        return self.key not in labels or labels[self.key] not in self.values  # notin and != match absent keys


def _split_terms(text: str) -> list[str]:
    """Split on commas that are not inside parentheses."""
    terms, depth, current = [], 0, ""
    for char in text:
        depth += {"(": 1, ")": -1}.get(char, 0)
        if char == "," and depth == 0:
            terms.append(current.strip())
            current = ""
        else:
            current += char
    terms.append(current.strip())
    return terms


def _requirement(key: str, op: str, values: list[str]) -> Requirement:
    if not _KEY.match(key):
        raise SelectorError(f'unable to parse requirement: invalid label key "{key}"')
    for value in values:
        if not _VALUE.match(value) or len(value) > 63:
            raise SelectorError(f'unable to parse requirement: invalid label value "{value}"')
    return Requirement(key, op, frozenset(values))


def parse_label_selector(text: str | None) -> list[Requirement]:
    """The labelSelector query parameter: k=v, k==v, k!=v, k in (a,b), k notin (a,b), k, !k; commas AND."""
    if not text or not text.strip():
        return []
    requirements = []
    for term in _split_terms(text):
        if match := _SET_TERM.match(term):
            values = [v.strip() for v in match.group(3).split(",")]
            requirements.append(_requirement(match.group(1), match.group(2), values))
        elif match := _TERM.match(term):
            op = "notin" if match.group(2) == "!=" else "in"
            requirements.append(_requirement(match.group(1), op, [match.group(3)]))
        elif term.startswith("!"):
            requirements.append(_requirement(term[1:].strip(), "!exists", []))
        elif term and " " not in term:
            requirements.append(_requirement(term, "exists", []))
        else:
            raise SelectorError(f"unable to parse requirement: found '{term}', expected: identifier")
    return requirements


def from_label_selector(selector: dict[str, Any] | None) -> list[Requirement]:
    """A metav1.LabelSelector (matchLabels, matchExpressions) as requirements."""
    selector = selector or {}
    requirements = [
        Requirement(k, "in", frozenset([v])) for k, v in (selector.get("matchLabels") or {}).items()
    ]
    ops = {"In": "in", "NotIn": "notin", "Exists": "exists", "DoesNotExist": "!exists"}
    for expression in selector.get("matchExpressions") or []:
        op = ops[expression["operator"]]
        requirements.append(Requirement(expression["key"], op, frozenset(expression.get("values") or ())))
    return requirements


def labels_match(requirements: list[Requirement], obj: dict[str, Any]) -> bool:
    labels = obj.get("metadata", {}).get("labels") or {}
    return all(r.matches(labels) for r in requirements)


# Field selectors each kind supports beyond metadata.name (and metadata.namespace when namespaced), as the
# real apiserver registers them; anything else is a 400.
FIELDS: dict[str, set[str]] = {
    "Pod": {
        "spec.nodeName",
        "spec.restartPolicy",
        "spec.schedulerName",
        "spec.serviceAccountName",
        "spec.hostNetwork",
        "status.phase",
        "status.podIP",
        "status.nominatedNodeName",
    },
    "Node": {"spec.unschedulable"},
    "Namespace": {"status.phase"},
    "Secret": {"type"},
    "Event": {
        "involvedObject.kind",
        "involvedObject.namespace",
        "involvedObject.name",
        "involvedObject.uid",
        "involvedObject.apiVersion",
        "involvedObject.fieldPath",
        "reason",
        "reportingComponent",
        "source",
        "type",
    },
    "ResourceSlice": {"spec.nodeName", "spec.driver"},
}

_BOOLEAN_FIELDS = {"spec.unschedulable", "spec.hostNetwork"}


def field_value(obj: dict[str, Any], field: str) -> str:
    value: Any = obj
    for part in field.split("."):
        value = value.get(part) if isinstance(value, dict) else None
    if field in _BOOLEAN_FIELDS:
        return "true" if value else "false"
    if field == "source" and isinstance(value, dict):
        return value.get("component", "")
    return "" if value is None else str(value)


def parse_field_selector(text: str | None, kind: str, namespaced: bool) -> list[tuple[str, bool, str]]:
    """The fieldSelector query parameter as (field, equal, value) triples."""
    if not text or not text.strip():
        return []
    supported = {"metadata.name"} | FIELDS.get(kind, set())
    if namespaced:
        supported.add("metadata.namespace")
    requirements = []
    for term in text.split(","):
        match = re.match(r"^\s*([^!=\s]+)\s*(==|!=|=)\s*(.*?)\s*$", term)
        if not match:
            raise SelectorError(f"invalid selector: '{text}'; can't understand '{term}'")
        field, op, value = match.groups()
        if field not in supported:
            raise SelectorError(f"field label not supported: {field}")
        requirements.append((field, op != "!=", value))
    return requirements


def fields_match(requirements: list[tuple[str, bool, str]], obj: dict[str, Any]) -> bool:
    return all((field_value(obj, field) == value) == equal for field, equal, value in requirements)
