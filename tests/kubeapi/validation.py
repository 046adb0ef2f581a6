"""Schema validation of every stored object, and the update rules kube-apiserver enforces beyond the schema.

Built-in kinds are checked against kubernetes-validate's strict schemas (unknown fields are errors, as with
fieldValidation=Strict); custom resources against their CRD's openAPIV3Schema, with defaults applied first.
"""

from __future__ import annotations

import copy
import functools
import json
import re
from typing import Any

import jsonschema
import kubernetes_validate.utils
from referencing import Registry, Resource

from . import crd_rules
from .errors import invalid


def _field(path) -> str:
    text = ""
    for part in path:
        text += f"[{part}]" if isinstance(part, int) else f".{part}"
    return text.lstrip(".")


def _causes(errors) -> list[tuple[str, str, str]]:
    causes = []
    for error in errors:
        path = list(error.absolute_path)
        if error.validator == "required":
            missing = re.match(r"'(.+)' is a required property", error.message).group(1)
            causes.append((_field([*path, missing]), "FieldValueRequired", "Required value"))
        elif error.validator == "additionalProperties":
            allowed = set(error.schema.get("properties", {}))
            for extra in sorted(set(error.instance) - allowed):
                field = _field([*path, extra])
                causes.append((field, "FieldValueInvalid", f'unknown field "{field}"'))
        elif error.validator == "enum":
            supported = ", ".join(json.dumps(v) for v in error.validator_value)
            message = f"Unsupported value: {json.dumps(error.instance)}: supported values: {supported}"
            causes.append((_field(path), "FieldValueNotSupported", message))
        elif error.validator in ("minProperties", "maxProperties"):  # as kube-openapi's validate words it
            bound = "at least" if error.validator == "minProperties" else "at most"
            message = f"Invalid value: {len(error.instance)}: {_field(path)} in body should have {bound} "
            causes.append(
                (_field(path), "FieldValueInvalid", message + f"{error.validator_value} properties")
            )
        else:
            message = f"Invalid value: {json.dumps(error.instance)[:80]}: {error.message}"
            causes.append((_field(path), "FieldValueInvalid", message))
    return causes


def _raise_if_invalid(
    validator: jsonschema.protocols.Validator, obj: dict[str, Any], group: str = ""
) -> None:
    errors = sorted(validator.iter_errors(obj), key=lambda e: list(map(str, e.absolute_path)))
    if errors:
        name = obj.get("metadata", {}).get("name") or obj.get("metadata", {}).get("generateName", "")
        raise invalid(obj.get("kind", ""), name, _causes(errors), group)


@functools.cache
def _builtin_validator(minor: int, api_version: str, kind: str) -> jsonschema.protocols.Validator:
    # kubernetes_validate.validate() reads and parses the 1.5 MB definitions file on every call; this builds
    # the same validator from the same strict schema files once per kind.
    available = [int(v.split(".")[1]) for v in kubernetes_validate.utils.all_versions()]
    version = f"1.{max([m for m in available if m <= minor] or [min(available)])}.0"
    folder = f"kubernetes-json-schema/v{version}-local-strict"
    file_version = re.sub(r"^([^./]*)(?:\.[^/]*)?/", r"\1-", api_version)
    schema = kubernetes_validate.utils.schema_contents(
        f"{folder}/{kind.lower()}-{file_version}.json", version
    )
    definitions = kubernetes_validate.utils.schema_contents(f"{folder}/_definitions.json", version)
    registry = Resource.from_contents(definitions) @ (Resource.from_contents(schema) @ Registry())
    return jsonschema.validators.Draft202012Validator(schema, registry=registry)


_VALID_CRDS: set[tuple[int, str]] = set()  # (minor, a CRD's spec and names) found valid


def validate_builtin(obj: dict[str, Any], minor: int) -> None:
    """Raise a 422 ApiError naming each problem of a built-in object."""
    group = obj["apiVersion"].rpartition("/")[0]
    if obj["kind"] == "CustomResourceDefinition":
        # Upstream CRDs run to 360 kB: each test installs the same ones, so each is checked once.
        written = [obj["metadata"].get(k) for k in ("name", "labels", "annotations")] + [obj["spec"]]
        key = (minor, json.dumps(written, sort_keys=True))
        if key not in _VALID_CRDS:
            _raise_if_invalid(_builtin_validator(minor, obj["apiVersion"], obj["kind"]), obj, group)
            _VALID_CRDS.add(key)
        return
    _raise_if_invalid(_builtin_validator(minor, obj["apiVersion"], obj["kind"]), obj, group)


def _closed(schema: Any) -> Any:
    """A CRD's structural schema as JSON Schema in which undeclared fields are errors rather than pruned."""
    if isinstance(schema, list):
        return [_closed(s) for s in schema]
    if not isinstance(schema, dict):
        return schema
    result = {
        k: _closed(v) if k in ("items", "anyOf", "allOf", "oneOf", "additionalProperties") else v
        for k, v in schema.items()
    }
    if "properties" in schema:
        result["properties"] = {k: _closed(v) for k, v in schema["properties"].items()}
        if "additionalProperties" not in schema and not schema.get("x-kubernetes-preserve-unknown-fields"):
            result["additionalProperties"] = False
    return result


def crd_schema(crd: dict[str, Any], version: str) -> dict[str, Any]:
    served = next(v for v in crd["spec"]["versions"] if v["name"] == version)
    return served.get("schema", {}).get("openAPIV3Schema", {"type": "object"})


@functools.cache
def _crd_validator(schema_json: str) -> jsonschema.protocols.Validator:
    schema = _closed(json.loads(schema_json))
    schema.setdefault("properties", {}).update(
        apiVersion={"type": "string"}, kind={"type": "string"}, metadata={"type": "object"}
    )
    return jsonschema.validators.Draft202012Validator(schema)


def apply_defaults(schema: dict[str, Any], value: Any) -> Any:
    """Fill in `default`s of absent properties, recursing into objects and arrays that are present."""
    if isinstance(value, dict):
        for name, prop in schema.get("properties", {}).items():
            if name not in value and "default" in prop:
                value[name] = copy.deepcopy(prop["default"])
            if name in value:
                apply_defaults(prop, value[name])
    elif isinstance(value, list) and isinstance(schema.get("items"), dict):
        for item in value:
            apply_defaults(schema["items"], item)
    return value


def validate_custom(
    obj: dict[str, Any], schema: dict[str, Any], group: str, old: dict[str, Any] | None = None
) -> None:
    """The schema's checks, then (when those pass) its CEL rules and list-type uniqueness (crd_rules); on
    an update `old` is the stored object, which transition rules compare with."""
    _raise_if_invalid(_crd_validator(json.dumps(schema, sort_keys=True)), obj, group)
    found = crd_rules.causes(schema, obj, crd_rules.absent() if old is None else old)
    if found:
        name = obj.get("metadata", {}).get("name", "")
        raise invalid(obj.get("kind", ""), name, found, group)


_POD_MUTABLE = (
    "`spec.containers[*].image`,`spec.initContainers[*].image`,`spec.activeDeadlineSeconds`,"
    "`spec.tolerations` (only additions to existing tolerations),`spec.terminationGracePeriodSeconds`,"
    "`spec.schedulingGates` (only removals)"
)


def _without_mutable(spec: dict[str, Any]) -> dict[str, Any]:
    spec = copy.deepcopy(spec)
    for key in ("initContainers", "containers"):
        for container in spec.get(key) or []:
            container.pop("image", None)
    for key in ("activeDeadlineSeconds", "tolerations", "terminationGracePeriodSeconds", "schedulingGates"):
        spec.pop(key, None)
    return spec


def check_update(kind: str, old: dict[str, Any], new: dict[str, Any]) -> None:
    """The update rules of the kinds' strategies that a client can trip over."""
    name = old["metadata"]["name"]
    if kind == "Pod":
        old_spec, new_spec = old.get("spec", {}), new.get("spec", {})
        gates_removed_only = all(
            g in (old_spec.get("schedulingGates") or []) for g in new_spec.get("schedulingGates") or []
        )
        tolerations_added_only = all(
            t in (new_spec.get("tolerations") or []) for t in old_spec.get("tolerations") or []
        )
        if _without_mutable(old_spec) != _without_mutable(new_spec) or not (
            gates_removed_only and tolerations_added_only
        ):
            message = f"Forbidden: pod updates may not change fields other than {_POD_MUTABLE}"
            raise invalid("Pod", name, [("spec", "FieldValueForbidden", message)])
    elif kind == "ResourceClaim":
        if old.get("spec") != new.get("spec"):
            raise invalid(
                "ResourceClaim",
                name,
                [("spec", "FieldValueInvalid", "field is immutable")],
                "resource.k8s.io",
            )
        old_allocation = old.get("status", {}).get("allocation")
        new_status = new.get("status", {})
        if old_allocation is not None and new_status.get("allocation") not in (None, old_allocation):
            cause = ("status.allocation", "FieldValueInvalid", "field is immutable")
            raise invalid("ResourceClaim", name, [cause], "resource.k8s.io")
        if new_status.get("reservedFor") and new_status.get("allocation") is None:
            cause = (
                "status.reservedFor",
                "FieldValueForbidden",
                "Forbidden: may not be specified when `allocated` is not set",
            )
            raise invalid("ResourceClaim", name, [cause], "resource.k8s.io")
