"""Audit entries as people read them: who did what to which object (its kind and name, a link while it
exists), and the fields it changed by their labels, leaving out what says nothing to a reader (the
tenant, empty values of a new object). A claim whose node alone changed was moved. References read as
what they name ("pool: l4", "created by: alice"), looked up a page of entries at a time; the kinds in
the filter read as words ("claim", not "claims.claim")."""

from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass

from django.apps import apps
from django.urls import NoReverseMatch, reverse

from audit.models import AuditEntry

PAGES = {
    "clusters.cluster": "cluster-detail",
    "nodepools.nodepool": "pool-detail",
    "claims.claim": "claim-detail",
    "nodepools.node": "node-detail",
    "upgrades.upgraderun": "upgrade-detail",
}
VERBS = {"create": "created", "update": "changed", "delete": "deleted"}
HIDDEN = {"tenant", "id"}
EMPTY = (None, "", [], {})
MOVE_FIELDS = {"node", "gpu_model", "isolation"}  # a move as claims.allocator.moves records it
LABELS = {"gpu_model": "GPU model"}  # words a field's name does not give


@dataclass(frozen=True)
class Change:
    label: str
    before: object
    after: object


@dataclass(frozen=True)
class Line:
    verb: str
    kind: str
    name: str
    link: str
    changes: tuple[Change, ...]


def _model(object_type: str):
    """The entry's model; for a model since moved to another app (claims from nodepools, the catalog
    from tenancy), the one of that name."""
    try:
        return apps.get_model(object_type)
    except (LookupError, ValueError):
        name = object_type.rpartition(".")[2]
        return next((m for m in apps.get_models() if m._meta.model_name == name), None)


def _reference(model, name: str):
    """The model a field of `model` points at, or None when it is no reference."""
    try:
        field = model._meta.get_field(name) if model else None
    except Exception:  # a field since removed
        return None
    return field.related_model if field is not None and field.many_to_one else None


def lines(entries: Iterable[AuditEntry]) -> list[Line]:
    """Each entry as a Line, its references named: one query per kind of object referred to."""
    entries = list(entries)
    wanted: dict[type, set] = defaultdict(set)
    for entry in entries:
        model = _model(entry.object_type)
        for field, values in entry.changes.items():
            if (related := _reference(model, field.removesuffix("_id"))) is not None:
                wanted[related].update(v for v in values if isinstance(v, int))
    names = {
        (related, pk): str(obj)
        for related, pks in wanted.items()
        for pk, obj in related.objects.in_bulk(pks).items()
    }
    return [line(entry, names) for entry in entries]


def object_types(labels: Iterable[str]) -> list[tuple[str, str]]:
    """(object_type, its name in words) for the log's filter, e.g. ("claims.claim", "claim")."""
    return [(label, str(model._meta.verbose_name) if (model := _model(label)) else label) for label in labels]


def line(entry: AuditEntry, names: dict | None = None) -> Line:
    """The entry in words; `names` ((model, pk) → name, from `lines`) names its references."""
    model = _model(entry.object_type)
    kind = str(model._meta.verbose_name) if model else entry.object_type
    verb = VERBS.get(entry.action, entry.action)
    if entry.object_type == "claims.claim" and "node" in entry.changes and set(entry.changes) <= MOVE_FIELDS:
        verb = "moved"
    changes = []
    for field, (before, after) in entry.changes.items():
        name = field.removesuffix("_id")
        if name in HIDDEN or (entry.action == "create" and after in EMPTY):
            continue
        if names is not None and (related := _reference(model, name)) is not None:
            before, after = (_named(names, related, v) for v in (before, after))
        changes.append(Change(_label(model, name), before, after))
    return Line(verb, kind, entry.object_repr, _link(entry), tuple(changes))


def _named(names: dict, related, value):
    """A reference's name; one to something since deleted reads as its kind and number."""
    if not isinstance(value, int):
        return value
    return names.get((related, value)) or f"{related._meta.verbose_name} #{value} (deleted)"


def _label(model, name: str) -> str:
    if name in LABELS:
        return LABELS[name]
    try:
        return str(model._meta.get_field(name).verbose_name) if model else name
    except Exception:  # a field since removed: its name is all there is
        return name.replace("_", " ")


def _link(entry: AuditEntry) -> str:
    page = PAGES.get(entry.object_type)
    if not page or entry.action == "delete" or not entry.object_id.isdigit():
        return ""
    try:
        return reverse(page, args=[int(entry.object_id)])
    except NoReverseMatch:
        return ""
