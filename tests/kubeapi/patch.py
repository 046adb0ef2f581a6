"""The three patch formats kube-apiserver accepts for JSON bodies: merge (RFC 7386), JSON patch (RFC 6902) and
the subset of strategic merge patch that NVKE's objects need."""

from __future__ import annotations

import copy
from typing import Any


class PatchError(ValueError):
    pass


def merge_patch(target: Any, patch: Any) -> Any:
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    result = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = merge_patch(result.get(key), value)
    return result


def _tokens(pointer: str) -> list[str]:
    if pointer == "":
        return []
    if not pointer.startswith("/"):
        raise PatchError(f'JSON pointer must start with "/": "{pointer}"')
    return [t.replace("~1", "/").replace("~0", "~") for t in pointer[1:].split("/")]


def _index(container: list, token: str, *, appending: bool = False) -> int:
    if appending and token == "-":
        return len(container)
    if not token.isdigit():
        raise PatchError(f"invalid array index: {token}")
    index = int(token)
    if index > len(container) or (index == len(container) and not appending):
        raise PatchError(f"array index out of bounds: {index}")
    return index


def _parent(doc: Any, pointer: str) -> tuple[Any, str]:
    tokens = _tokens(pointer)
    if not tokens:
        raise PatchError("cannot address the document root")
    node = doc
    for token in tokens[:-1]:
        if isinstance(node, dict) and token in node:
            node = node[token]
        elif isinstance(node, list):
            node = node[_index(node, token)]
        else:
            raise PatchError(f'doc is missing path: "{pointer}"')
    return node, tokens[-1]


def _get(doc: Any, pointer: str) -> Any:
    if pointer == "":
        return doc
    parent, last = _parent(doc, pointer)
    if isinstance(parent, dict) and last in parent:
        return parent[last]
    if isinstance(parent, list):
        return parent[_index(parent, last)]
    raise PatchError(f'doc is missing path: "{pointer}"')


def _add(doc: Any, pointer: str, value: Any) -> None:
    parent, last = _parent(doc, pointer)
    if isinstance(parent, dict):
        parent[last] = value
    elif isinstance(parent, list):
        parent.insert(_index(parent, last, appending=True), value)
    else:
        raise PatchError(f'doc is missing path: "{pointer}"')


def _remove(doc: Any, pointer: str) -> Any:
    value = _get(doc, pointer)
    parent, last = _parent(doc, pointer)
    if isinstance(parent, dict):
        del parent[last]
    else:
        del parent[_index(parent, last)]
    return value


def json_patch(doc: Any, operations: Any) -> Any:
    if not isinstance(operations, list):
        raise PatchError("a JSON patch is a list of operations")
    doc = copy.deepcopy(doc)
    for op in operations:
        kind, path = op.get("op"), op.get("path", "")
        if kind == "add":
            _add(doc, path, copy.deepcopy(op["value"]))
        elif kind == "remove":
            _remove(doc, path)
        elif kind == "replace":
            _get(doc, path)  # must exist
            _remove(doc, path)
            _add(doc, path, copy.deepcopy(op["value"]))
        elif kind == "test":
            if _get(doc, path) != op.get("value"):
                raise PatchError(f"testing value {path} failed: test failed")
        elif kind in ("move", "copy"):
            value = _remove(doc, op["from"]) if kind == "move" else copy.deepcopy(_get(doc, op["from"]))
            _add(doc, path, value)
        else:
            raise PatchError(f"unexpected operation: {kind!r}")
    return doc


# patchMergeKey of the list fields (by field name) that NVKE's kinds carry; other lists are replaced whole.
MERGE_KEYS = {
    "containers": "name",
    "initContainers": "name",
    "ephemeralContainers": "name",
    "volumes": "name",
    "env": "name",
    "volumeMounts": "mountPath",
    "ports": "containerPort",
    "imagePullSecrets": "name",
    "resourceClaims": "name",
    "schedulingGates": "name",
    "conditions": "type",
    "taints": "key",
    "addresses": "type",
    "ownerReferences": "uid",
    "reservedFor": "uid",
}
# Lists of scalars with patchStrategy=merge: a patch adds to them; only $deleteFromPrimitiveList removes.
MERGED_SCALAR_LISTS = {"finalizers"}


def _merge_list(original: list, patch: list, key: str) -> list:
    result = [copy.deepcopy(item) for item in original]
    for item in patch:
        if not isinstance(item, dict) or key not in item:
            raise PatchError(f"map: {item} does not contain declared merge key: {key}")
        position = next(
            (i for i, old in enumerate(result) if isinstance(old, dict) and old.get(key) == item[key]), None
        )
        if item.get("$patch") == "delete":
            if position is not None:
                del result[position]
        elif position is None:
            result.append(strategic_merge_patch({}, item))
        else:
            result[position] = strategic_merge_patch(result[position], item)
    return result


def strategic_merge_patch(original: Any, patch: Any) -> Any:
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    result = copy.deepcopy(original) if isinstance(original, dict) else {}
    for key, value in patch.items():
        if key.startswith("$deleteFromPrimitiveList/"):
            field = key.split("/", 1)[1]
            result[field] = [v for v in result.get(field) or [] if v not in value]
        elif key.startswith("$"):
            continue  # $setElementOrder and $retainKeys only order or prune; $patch is handled in lists
        elif value is None:
            result.pop(key, None)
        elif isinstance(value, list) and key in MERGE_KEYS:
            existing = result.get(key) if isinstance(result.get(key), list) else []
            result[key] = _merge_list(existing, value, MERGE_KEYS[key])
        elif isinstance(value, list) and key in MERGED_SCALAR_LISTS:
            existing = result.get(key) or []
            result[key] = existing + [v for v in value if v not in existing]
        else:
            result[key] = strategic_merge_patch(result.get(key), value)
    return result
