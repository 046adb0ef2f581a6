"""Audit entries as people read them: who did what to which object (its kind and name, a link while it
exists), and the fields it changed by their labels, leaving out what says nothing to a reader (the
tenant, empty values of a new object). A claim whose node alone changed was moved."""

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


def line(entry: AuditEntry) -> Line:
    try:
        model = apps.get_model(entry.object_type)
    except (LookupError, ValueError):
        model = None
    kind = str(model._meta.verbose_name) if model else entry.object_type
    verb = VERBS.get(entry.action, entry.action)
    if entry.object_type == "claims.claim" and "node" in entry.changes and set(entry.changes) <= MOVE_FIELDS:
        verb = "moved"
    changes = []
    for field, (before, after) in entry.changes.items():
        name = field.removesuffix("_id")
        if name in HIDDEN or (entry.action == "create" and after in EMPTY):
            continue
        changes.append(Change(_label(model, name), before, after))
    return Line(verb, kind, entry.object_repr, _link(entry), tuple(changes))


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
