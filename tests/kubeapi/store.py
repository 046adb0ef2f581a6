"""The object store and its Kubernetes semantics, behind one lock.

A global integer resourceVersion orders every write; each write is kept in a per-resource history that watches
replay from any resourceVersion until compact() forgets it. Objects are never mutated in place once stored, so
the history can share them, API readers get copies and the simulated components, which only read, may be
handed the stored objects themselves (snapshot(), stored()). Pods and ResourceSlices are indexed by
spec.nodeName, the field the kubelet and kube-scheduler select them by.
"""

from __future__ import annotations

import base64
import bisect
import contextlib
import copy
import datetime
import random
import threading
import time
import uuid
from collections import defaultdict
from collections.abc import Callable, Iterator
from typing import Any

from . import admission, selectors, validation
from . import patch as patches
from .errors import ApiError, already_exists, bad_request, conflict, invalid, not_found
from .resources import Registry, ResourceType

CRD_KEY = ("apiextensions.k8s.io", "customresourcedefinitions")
NAMESPACES_KEY = ("", "namespaces")
PATCH_TYPES = (
    "application/merge-patch+json",
    "application/json-patch+json",
    "application/strategic-merge-patch+json",
)


def timestamp(seconds: float) -> str:
    return datetime.datetime.fromtimestamp(seconds, datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def parse_timestamp(text: str) -> float:
    return datetime.datetime.strptime(text, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=datetime.UTC).timestamp()


# The kinds indexed by spec.nodeName, a field selector both serve (kubernetes/kubernetes
# pkg/registry/core/pod/strategy.go ToSelectableFields, pkg/registry/resource/resourceslice/strategy.go):
# what the kubelet and kube-scheduler select them by.
NODE_INDEXED = {("", "pods"), ("resource.k8s.io", "resourceslices")}
_SCALARS = (str, int, float, bool, type(None))


def copied(value: Any) -> Any:
    """A deep copy of a JSON document: what copy.deepcopy gives for dicts, lists and scalars, without its
    memo and dispatch (several times faster; every read and write of the store copies)."""
    kind = type(value)
    if kind is dict:
        return {k: copied(v) for k, v in value.items()}
    if kind is list:
        return [copied(v) for v in value]
    return value if kind in _SCALARS else copy.deepcopy(value)


def _node_name(obj: dict[str, Any]) -> str:
    return (obj.get("spec") or {}).get("nodeName") or ""


def _generated_suffix() -> str:
    return "".join(random.choices("bcdfghjklmnpqrstvwxz2456789", k=5))


def _without_version(obj: dict[str, Any]) -> dict[str, Any]:
    meta = {k: v for k, v in obj.get("metadata", {}).items() if k not in ("resourceVersion", "managedFields")}
    return {**obj, "metadata": meta}


def _spec_part(obj: dict[str, Any]) -> dict[str, Any]:
    """What metadata.generation tracks: everything but metadata and status."""
    return {k: v for k, v in obj.items() if k not in ("metadata", "status", "apiVersion", "kind")}


class Store:
    def __init__(self, registry: Registry) -> None:
        self.registry = registry
        self.lock = threading.RLock()
        self.changed = threading.Condition(self.lock)
        self.rv = 0
        self.compacted_rv = 0
        self.closed = False
        self.clock_offset = 0.0  # settle(seconds) moves the clock forward instead of tests sleeping
        self.on_write: Callable[[], None] | None = None  # the simulated controllers, run after each write
        # The kinds' strategies beyond validation: (kind, old or None, new) -> None, may drop fields.
        self.strategy: Callable[[str, dict | None, dict], None] | None = None
        self._objects: dict[tuple[str, str], dict[tuple[str, str], dict]] = defaultdict(dict)
        self._history: dict[tuple[str, str], list[tuple[int, str, dict, dict | None]]] = defaultdict(list)
        # kind -> spec.nodeName ("" unset) -> (namespace, name) -> object, for NODE_INDEXED kinds
        self._by_node: dict[tuple[str, str], dict[str, dict[tuple[str, str], dict]]] = defaultdict(
            lambda: defaultdict(dict)
        )
        self._reacting = False
        self.tokens: set[str] = set()  # service account tokens the token controller issued
        self.ca_bundle = ""  # the server's CA, which token Secrets carry
        self.admission = admission.Admission(self)

    def now(self) -> float:
        return time.time() + self.clock_offset

    @contextlib.contextmanager
    def _transaction(self) -> Iterator[None]:
        with self.lock:
            yield
            if self.on_write and not self._reacting:
                self._reacting = True
                try:
                    self.on_write()
                finally:
                    self._reacting = False

    def react(self) -> None:
        """Run the simulated components now (they also run after every write)."""
        with self._transaction():
            pass

    # ---- reads -------------------------------------------------------------------------------------------

    def _stored(self, rt: ResourceType, namespace: str | None, name: str) -> dict[str, Any]:
        obj = self._objects[rt.key].get((namespace or "", name))
        if obj is None:
            raise not_found(rt, name)
        return obj

    def get(self, rt: ResourceType, namespace: str | None, name: str) -> dict[str, Any]:
        with self.lock:
            return self._wire(rt, self._stored(rt, namespace, name))

    def find(self, rt: ResourceType, namespace: str | None, name: str) -> dict[str, Any] | None:
        with self.lock:
            obj = self._objects[rt.key].get((namespace or "", name))
            return None if obj is None else self._wire(rt, obj)

    def list(
        self,
        rt: ResourceType,
        namespace: str | None = None,
        labels: list[selectors.Requirement] = (),
        fields: list[tuple[str, bool, str]] = (),
    ) -> list[dict[str, Any]]:
        with self.lock:
            return [self._wire(rt, obj) for obj in self.snapshot(rt, namespace, labels, fields)]

    def snapshot(
        self,
        rt: ResourceType,
        namespace: str | None = None,
        labels: list[selectors.Requirement] = (),
        fields: list[tuple[str, bool, str]] = (),
    ) -> list[dict[str, Any]]:
        """What list() returns, in storage form and not copied: the stored objects themselves, which the
        caller must not change (for the simulated components and for serializing)."""
        with self.lock:
            objects = self._objects[rt.key]
            node = next((v for f, equal, v in fields if f == "spec.nodeName" and equal), None)
            if node is not None and rt.key in NODE_INDEXED:
                objects = self._by_node[rt.key].get(node, {})
            return [
                obj
                for key, obj in sorted(objects.items())
                if (namespace is None or key[0] == namespace)
                and selectors.labels_match(labels, obj)
                and selectors.fields_match(fields, obj)
            ]

    def stored(self, rt: ResourceType, namespace: str | None, name: str) -> dict[str, Any] | None:
        """What find() returns, not copied: the stored object, which the caller must not change."""
        with self.lock:
            return self._objects[rt.key].get((namespace or "", name))

    @staticmethod
    def _wire(rt: ResourceType, obj: dict[str, Any]) -> dict[str, Any]:
        """A copy in the requested version (one storage form serves every version of a kind)."""
        return {**copied(obj), "apiVersion": rt.api_version}

    # ---- writes ------------------------------------------------------------------------------------------

    def _commit(
        self, rt: ResourceType, event: str, obj: dict[str, Any], previous: dict | None
    ) -> dict[str, Any]:
        self.rv += 1
        obj["metadata"]["resourceVersion"] = str(self.rv)
        key = (obj["metadata"].get("namespace", ""), obj["metadata"]["name"])
        if rt.key in NODE_INDEXED:
            by_node, stored = self._by_node[rt.key], self._objects[rt.key].get(key)
            if stored is not None:
                by_node[_node_name(stored)].pop(key, None)
            if event != "DELETED":
                by_node[_node_name(obj)][key] = obj
        if event == "DELETED":
            del self._objects[rt.key][key]
        else:
            self._objects[rt.key][key] = obj
        self._history[rt.key].append((self.rv, event, obj, previous))
        if rt.key == CRD_KEY:
            self._crd_changed(obj, event)
        self.changed.notify_all()
        return copied(obj)

    def _crd_changed(self, crd: dict[str, Any], event: str) -> None:
        if event == "DELETED":
            for rt in self.registry.crd_types(crd["metadata"]["name"]):
                for obj in list(self._objects[rt.key].values()):
                    self._commit(rt, "DELETED", copied(obj), obj)
            self.registry.remove_crd(crd["metadata"]["name"])
        else:
            self.registry.set_crd(crd)

    def _schema(self, rt: ResourceType) -> dict[str, Any]:
        return validation.crd_schema(self._objects[CRD_KEY][("", rt.crd)], rt.version)

    def _default(self, rt: ResourceType, obj: dict[str, Any]) -> None:
        """What the server fills in on every write: CRD defaults, a Secret's stringData folded into data."""
        if rt.custom:
            validation.apply_defaults(self._schema(rt), obj)
        if rt.kind == "Secret" and "stringData" in obj:
            data = obj.setdefault("data", {})
            for key, value in obj.pop("stringData").items():
                data[key] = base64.b64encode(value.encode()).decode()

    def _validate(self, rt: ResourceType, obj: dict[str, Any], old: dict[str, Any] | None = None) -> None:
        if rt.custom:
            validation.validate_custom(obj, self._schema(rt), rt.group, old)
        else:
            validation.validate_builtin(obj, self.registry.minor)

    def _initial_status(self, rt: ResourceType, obj: dict[str, Any], api: bool) -> None:
        """What the kinds' create strategies put in status; API clients cannot set it (nodes excepted)."""
        if api and rt.has_status and rt.kind != "Node":
            obj.pop("status", None)
        if rt.kind == "Pod" and "status" not in obj:
            obj["status"] = {"phase": "Pending"}
        elif rt.kind == "Namespace":
            obj.setdefault("status", {"phase": "Active"})
        elif rt.key == CRD_KEY:
            spec = obj.get("spec", {})
            established = [
                {
                    "type": t,
                    "status": "True",
                    "reason": r,
                    "message": m,
                    "lastTransitionTime": timestamp(self.now()),
                }
                for t, r, m in (
                    ("NamesAccepted", "NoConflicts", "no conflicts found"),
                    ("Established", "InitialNamesAccepted", "the initial names have been accepted"),
                )
            ]
            obj["status"] = {
                "acceptedNames": spec.get("names", {}),
                "conditions": established,
                "storedVersions": [v["name"] for v in spec.get("versions", []) if v.get("storage")],
            }

    def create(
        self, rt: ResourceType, obj: dict[str, Any], *, api: bool = True, dry_run: bool = False
    ) -> dict:
        with self._transaction():
            obj = copied(obj)
            obj["apiVersion"], obj["kind"] = rt.api_version, rt.kind
            meta = obj.setdefault("metadata", {})
            if not meta.get("name"):
                if not meta.get("generateName"):
                    cause = (
                        "metadata.name",
                        "FieldValueRequired",
                        "Required value: name or generateName is required",
                    )
                    raise invalid(rt.kind, "", [cause], rt.group)
                meta["name"] = meta["generateName"] + _generated_suffix()
            if rt.namespaced:
                if ("", meta.get("namespace", "")) not in self._objects[NAMESPACES_KEY]:
                    namespace = meta.get("namespace", "")
                    raise ApiError(
                        404,
                        f'namespaces "{namespace}" not found',
                        details={"name": namespace, "kind": "namespaces"},
                    )
            else:
                meta.pop("namespace", None)
            if (meta.get("namespace", ""), meta["name"]) in self._objects[rt.key]:
                raise already_exists(rt, meta["name"])
            for key in ("resourceVersion", "deletionTimestamp", "deletionGracePeriodSeconds"):
                meta.pop(key, None)
            meta.update(uid=str(uuid.uuid4()), creationTimestamp=timestamp(self.now()), generation=1)
            self._initial_status(rt, obj, api)
            self._default(rt, obj)
            if api:  # admission: mutating, then the object's validation, then validating
                obj = self.admission.mutate(rt, "CREATE", obj, None, "")
            if self.strategy:
                self.strategy(rt.kind, None, obj)
            self._validate(rt, obj)
            if api:
                admission.check_policy(rt, obj)
                self.admission.validate(rt, "CREATE", obj, None, "")
            if dry_run:
                return obj
            return self._commit(rt, "ADDED", obj, None)

    def _merged_update(self, rt: ResourceType, old: dict, new: dict, subresource: str, api: bool) -> dict:
        """The object an update stores: status and the rest kept apart, server-owned metadata carried over."""
        new["apiVersion"], new["kind"] = rt.api_version, rt.kind
        if api and rt.has_status:
            part = new.get("status")
            if subresource == "status":
                new = copied(old)
            new.pop("status", None)
            kept = part if subresource == "status" else old.get("status")
            if kept is not None:
                new["status"] = kept
        meta, old_meta = new.setdefault("metadata", {}), old["metadata"]
        for key in (
            "name",
            "namespace",
            "uid",
            "creationTimestamp",
            "generation",
            "resourceVersion",
            "deletionTimestamp",
            "deletionGracePeriodSeconds",
        ):
            if key in old_meta:
                meta[key] = old_meta[key]
            else:
                meta.pop(key, None)
        if api:
            validation.check_update(rt.kind, old, new)
        return new

    def _write(
        self, rt: ResourceType, old: dict, new: dict, dry_run: bool, api: bool = False, subresource: str = ""
    ) -> dict[str, Any]:
        if api:
            new = self.admission.mutate(rt, "UPDATE", new, old, subresource)
        self._default(rt, new)  # before comparing, so that a no-op stays a no-op
        if self.strategy:
            self.strategy(rt.kind, old, new)
        if _without_version(new) == _without_version(old):
            return copied(old)  # kube-apiserver neither bumps the resourceVersion nor emits an event
        if _spec_part(new) != _spec_part(old):
            new["metadata"]["generation"] = old["metadata"].get("generation", 1) + 1
        self._validate(rt, new, old)
        if api:
            admission.check_policy(rt, new)
            self.admission.validate(rt, "UPDATE", new, old, subresource)
        if dry_run:
            return new
        meta = new["metadata"]
        if (
            "deletionTimestamp" in meta
            and not meta.get("finalizers")
            and not meta.get("deletionGracePeriodSeconds")
        ):
            return self._commit(rt, "DELETED", new, old)  # the last finalizer went
        return self._commit(rt, "MODIFIED", new, old)

    def update(
        self,
        rt: ResourceType,
        obj: dict[str, Any],
        *,
        subresource: str = "",
        api: bool = True,
        dry_run: bool = False,
    ) -> dict[str, Any]:
        """PUT: replace the object. With api=False (seeding and the simulated controllers) status is written
        too, and no resourceVersion precondition applies."""
        with self._transaction():
            meta = obj.get("metadata", {})
            old = self._stored(rt, meta.get("namespace"), meta.get("name", ""))
            version = meta.get("resourceVersion")
            if api and version and version != old["metadata"]["resourceVersion"]:
                raise conflict(rt, meta["name"])
            if api and rt.custom and not version:
                cause = (
                    "metadata.resourceVersion",
                    "FieldValueInvalid",
                    "Invalid value: 0x0: must be specified for an update",
                )
                raise invalid(rt.kind, meta["name"], [cause], rt.group)
            new = self._merged_update(rt, old, copied(obj), subresource, api)
            return self._write(rt, old, new, dry_run, api, subresource)

    def patch(
        self,
        rt: ResourceType,
        namespace: str | None,
        name: str,
        content_type: str,
        body: Any,
        *,
        subresource: str = "",
        api: bool = True,
        dry_run: bool = False,
    ) -> dict[str, Any]:
        with self._transaction():
            old = self._stored(rt, namespace, name)
            current = copied(old)  # a merge patch shares what it leaves alone
            try:
                if content_type == "application/json-patch+json":
                    patched = patches.json_patch(current, body)
                elif not isinstance(body, dict):
                    raise bad_request("the patch is not a JSON object")
                elif content_type == "application/merge-patch+json":
                    patched = patches.merge_patch(current, body)
                else:
                    patched = patches.strategic_merge_patch(current, body)
            except (patches.PatchError, KeyError, TypeError) as error:
                detail = [{"reason": "UnexpectedServerResponse", "message": str(error)}]
                message = "the server rejected our request due to an error in our request"
                raise ApiError(422, message, details={"causes": detail}) from error
            if not isinstance(patched, dict):
                raise bad_request("the patched object is not a JSON object")
            version = (patched.get("metadata") or {}).get("resourceVersion")
            if version and version != old["metadata"]["resourceVersion"]:
                raise conflict(rt, name)
            new = self._merged_update(rt, old, patched, subresource, api)
            return self._write(rt, old, new, dry_run, api, subresource)

    def delete(
        self,
        rt: ResourceType,
        namespace: str | None,
        name: str,
        *,
        grace: int = 0,
        preconditions: dict[str, str] | None = None,
        dry_run: bool = False,
    ) -> tuple[dict[str, Any], bool]:
        """Delete, or start deleting: finalizers and a pod's grace period leave the object in place with a
        deletionTimestamp. Returns the object and whether it is gone."""
        with self._transaction():
            old = self._stored(rt, namespace, name)
            meta = old["metadata"]
            for key, label in (("uid", "UID"), ("resourceVersion", "ResourceVersion")):
                wanted = (preconditions or {}).get(key)
                if wanted and wanted != meta.get(key):
                    why = f"Precondition failed: {label} in precondition: {wanted}, "
                    why += f"{label} in object meta: {meta.get(key)}"
                    raise conflict(rt, name, why)
            running = old.get("spec", {}).get("nodeName") and old.get("status", {}).get("phase") not in (
                "Succeeded",
                "Failed",
            )
            grace = grace if rt.kind == "Pod" and running else 0
            if meta.get("finalizers") or grace:
                current = meta.get("deletionGracePeriodSeconds")
                if current is not None and current <= grace:
                    return copied(old), False
                new = copied(old)
                new["metadata"].update(
                    deletionTimestamp=timestamp(self.now() + grace), deletionGracePeriodSeconds=grace
                )
                return (new if dry_run else self._commit(rt, "MODIFIED", new, old)), False
            if dry_run:
                return copied(old), True
            if rt.key == NAMESPACES_KEY:
                self._empty_namespace(name)
            return self._commit(rt, "DELETED", copied(old), old), True

    def _empty_namespace(self, namespace: str) -> None:
        # The namespace controller's work, done at once rather than through a Terminating phase.
        for rt in self.registry.all():
            if rt.namespaced:
                for key, obj in list(self._objects[rt.key].items()):
                    if key[0] == namespace:
                        self._commit(rt, "DELETED", copied(obj), obj)

    def compact(self) -> None:
        with self.lock:
            self.compacted_rv = self.rv
            self._history.clear()

    def close(self) -> None:
        with self.lock:
            self.closed = True
            self.changed.notify_all()

    def watch(
        self,
        rt: ResourceType,
        namespace: str | None,
        labels: list[selectors.Requirement],
        fields: list[tuple[str, bool, str]],
        resource_version: str | None,
    ) -> Watcher:
        return Watcher(self, rt, namespace, labels, fields, resource_version)


class Watcher:
    """One watch: events after a resourceVersion, as the watch cache filters them."""

    def __init__(self, store: Store, rt: ResourceType, namespace, labels, fields, resource_version) -> None:
        self.store, self.rt, self.namespace, self.labels, self.fields = store, rt, namespace, labels, fields
        self.expired = False
        with store.lock:
            if resource_version in (None, "", "0"):
                self.pending = [
                    {"type": "ADDED", "object": obj} for obj in store.list(rt, namespace, labels, fields)
                ]
                self.position = store.rv
            elif int(resource_version) < store.compacted_rv:
                message = f"too old resource version: {resource_version} ({store.compacted_rv})"
                self.pending = [{"type": "ERROR", "object": ApiError(410, message).status()}]
                self.expired = True
            else:
                self.pending, self.position = [], int(resource_version)

    def _matches(self, obj: dict[str, Any] | None) -> bool:
        return (
            obj is not None
            and (self.namespace is None or obj["metadata"].get("namespace") == self.namespace)
            and selectors.labels_match(self.labels, obj)
            and selectors.fields_match(self.fields, obj)
        )

    def _event(self, version: int, kind: str, obj: dict, previous: dict | None) -> dict | None:
        now, before = self._matches(obj), kind == "MODIFIED" and self._matches(previous)
        if kind == "MODIFIED" and before and not now:
            # Left the selection: a DELETED event with the old content at the new resourceVersion.
            gone = copied(previous)
            gone["metadata"]["resourceVersion"] = str(version)
            return {"type": "DELETED", "object": self.store._wire(self.rt, gone)}
        if not now:
            return None
        kind = "ADDED" if kind == "MODIFIED" and not before else kind
        return {"type": kind, "object": self.store._wire(self.rt, obj)}

    def next(self, timeout: float, bookmark: bool = False) -> list[dict[str, Any]] | None:
        """Events arriving within timeout: [] if none (or a BOOKMARK if asked); None once the store closed."""
        deadline = time.monotonic() + timeout
        with self.store.lock:
            if self.pending:
                events, self.pending = self.pending, []
                return events
            while not self.store.closed:
                history = self.store._history[self.rt.key]
                start = bisect.bisect_right(history, self.position, key=lambda entry: entry[0])
                events = [e for e in (self._event(*entry) for entry in history[start:]) if e]
                self.position = self.store.rv
                if events:
                    return events
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    if not bookmark:
                        return []
                    meta = {"resourceVersion": str(self.store.rv)}
                    return [
                        {
                            "type": "BOOKMARK",
                            "object": {
                                "kind": self.rt.kind,
                                "apiVersion": self.rt.api_version,
                                "metadata": meta,
                            },
                        }
                    ]
                self.store.changed.wait(remaining)
            return None
