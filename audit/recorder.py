"""Records create, update and delete of registered models as AuditEntry rows, from model signals.

`register(Model)` is the one line an app adds for its tenant-owned model, in its AppConfig.ready (the
platform's own are in registrations.py); `insert(instance)` writes a new row and its entry in one
statement where a round trip counts. Before a save the row's stored values are read, after it the
changed fields are written as [before, after];
a save that changes no tracked field writes nothing. Secret fields are recorded as changed, never with
their values (EncryptedTextField fields are secret by themselves). Bulk `QuerySet.update()` bypasses
signals: services that must be audited save rows, or call `record` for a change the signals cannot
see (a model not registered because its control loop rewrites it in bulk)."""

import json
from collections.abc import Callable, Iterable

from django.core.serializers.json import DjangoJSONEncoder
from django.db import connection, models
from django.db.models.signals import post_delete, post_save, pre_save
from django.utils import timezone

from nvke.encryption import EncryptedTextField
from nvke.statements import compiled

from .context import current_actor
from .models import AuditEntry

REDACTED = "[secret]"
ALWAYS_IGNORED = frozenset({"created_at", "updated_at"})
_registry: dict[type[models.Model], "Tracked"] = {}


class Tracked:
    def __init__(
        self,
        model: type[models.Model],
        ignore: Iterable[str],
        secret: Iterable[str],
        tenant_of: Callable[[models.Model], int | None],
    ):
        skip = ALWAYS_IGNORED | set(ignore)
        self.fields = [f for f in model._meta.concrete_fields if f.name not in skip and not f.primary_key]
        self.names = frozenset(f.name for f in self.fields) | {f.attname for f in self.fields}
        encrypted = {f.name for f in self.fields if isinstance(f, EncryptedTextField)}
        self.secret = frozenset(secret) | encrypted
        self.tenant_of = tenant_of

    def values(self, instance: models.Model) -> dict:
        return {f.attname: _jsonable(f.value_from_object(instance)) for f in self.fields}

    def shown(self, name: str, value):
        return REDACTED if name in self.secret or name.removesuffix("_id") in self.secret else value

    def created(self, values: dict) -> dict:
        return {name: [None, self.shown(name, value)] for name, value in values.items()}


_PLAIN = frozenset({str, int, float, bool, type(None)})


def _jsonable(value):
    # Plain values are their own JSON form: no encode and decode for each field of every saved row.
    if type(value) in _PLAIN:
        return value
    return json.loads(json.dumps(value, cls=DjangoJSONEncoder))


# Status fields that control loops rewrite: ignored, so the log holds what people and automation asked
# for, not every reconcile step.
CONTROL_LOOP_FIELDS = ("status", "status_reason", "status_message", "conditions")


def register(
    model: type[models.Model],
    *,
    ignore: Iterable[str] = (),
    secret: Iterable[str] = (),
    tenant_of: Callable[[models.Model], int | None] = lambda obj: obj.tenant_id,
    deletes: bool = True,
) -> None:
    """Audit every change of `model`. `ignore`: fields whose changes are not worth an entry (status
    written by control loops); `secret`: fields recorded as changed without their values; `deletes`
    False: a record of something that happened (a decision), whose pruning is no change worth an entry."""
    _registry[model] = Tracked(model, ignore, secret, tenant_of)
    uid = f"audit:{model._meta.label}"
    pre_save.connect(_before_save, sender=model, dispatch_uid=uid)
    post_save.connect(_after_save, sender=model, dispatch_uid=uid)
    if deletes:
        post_delete.connect(_after_delete, sender=model, dispatch_uid=uid)


def audited_models() -> list[type[models.Model]]:
    """Every model registered for the audit log."""
    return list(_registry)


def _before_save(sender, instance, raw=False, update_fields=None, **kwargs):
    tracked = _registry[sender]
    instance._audit_before = None
    if raw or instance.pk is None or instance._state.adding:
        return
    if update_fields is not None and not tracked.names & set(update_fields):
        return  # only ignored fields are written: no entry, and no extra read
    instance._audit_before = (
        sender._base_manager.filter(pk=instance.pk).values(*[f.attname for f in tracked.fields]).first()
    )
    if instance._audit_before is not None:
        instance._audit_before = _jsonable(instance._audit_before)


def _after_save(sender, instance, created, raw=False, **kwargs):
    if raw:
        return
    tracked = _registry[sender]
    after = tracked.values(instance)
    before = getattr(instance, "_audit_before", None)
    if created:
        changes = tracked.created(after)
        action = AuditEntry.Action.CREATE
    else:
        if before is None:
            return  # only ignored fields were saved
        changes = {
            name: [tracked.shown(name, before[name]), tracked.shown(name, value)]
            for name, value in after.items()
            if before.get(name) != value
        }
        action = AuditEntry.Action.UPDATE
        if not changes:
            return
    _write(tracked.tenant_of(instance), instance, action, changes)


def record(instance: models.Model, changes: dict, *, tenant_id: int | None) -> None:
    """An update entry for a change made by a person that the signals do not see. `changes`:
    {field: [before, after]}, JSON-able after Django's encoder."""
    _write(tenant_id, instance, AuditEntry.Action.UPDATE, _jsonable(changes))


def _after_delete(sender, instance, **kwargs):
    tracked = _registry[sender]
    before = tracked.values(instance)
    _write(
        tracked.tenant_of(instance),
        instance,
        AuditEntry.Action.DELETE,
        {n: [tracked.shown(n, v), None] for n, v in before.items()},
    )


def insert(instance: models.Model) -> None:
    """Save a new row of a registered model and write its create entry, in one statement on PostgreSQL
    (the entry's INSERT takes the row's from a data-modifying CTE) where save() and the signals take
    two round trips; elsewhere save(). For rows written where each round trip counts (a claim, before
    it takes the allocation lock). No model signal is sent: the audit log's are the only ones on such a
    model. `object_repr` is str(instance) before the row has its primary key."""
    if connection.vendor != "postgresql":
        instance.save()
        return
    model = type(instance)
    tracked = _registry[model]
    sql, fields = _insert_statement(model)
    # pre_save sets auto_now_add fields on the instance, as save() does; the entry is read after it.
    row = [f.get_db_prep_save(f.pre_save(instance, True), connection) for f in fields]
    entry = _entry(
        tracked.tenant_of(instance),
        instance,
        AuditEntry.Action.CREATE,
        tracked.created(tracked.values(instance)),
    )
    entry_row = [f.get_db_prep_save(entry[f.attname], connection) for f in _ENTRY_FIELDS]
    with connection.cursor() as cursor:
        cursor.execute(sql, [*row, *entry_row])
        instance.pk = model._meta.pk.to_python(cursor.fetchone()[0])
    instance._state.adding, instance._state.db = False, connection.alias


@compiled
def _insert_statement(model: type[models.Model]) -> tuple[str, list[models.Field]]:
    """`insert`'s statement for the model and the row's fields in its order: written once per process
    (the ORM would compile the same INSERT for every row)."""
    meta, quote = model._meta, connection.ops.quote_name
    fields = [f for f in meta.local_concrete_fields if not f.primary_key]
    pk = quote(meta.pk.column)
    sql = (
        f"WITH new AS (INSERT INTO {quote(meta.db_table)} ({', '.join(quote(f.column) for f in fields)}) "
        f"VALUES ({', '.join(['%s'] * len(fields))}) RETURNING {pk}) "
        f"INSERT INTO {quote(AuditEntry._meta.db_table)} "
        f"({', '.join(quote(f.column) for f in _ENTRY_FIELDS)}, object_id) "
        f"VALUES ({', '.join(['%s'] * len(_ENTRY_FIELDS))}, (SELECT {pk}::text FROM new)) "
        "RETURNING object_id"
    )
    return sql, fields


def _write(tenant_id: int | None, instance: models.Model, action: str, changes: dict) -> None:
    AuditEntry.objects.create(object_id=str(instance.pk), **_entry(tenant_id, instance, action, changes))


def _entry(tenant_id: int | None, instance: models.Model, action: str, changes: dict) -> dict:
    """An entry's columns but its object_id."""
    actor = current_actor()
    return {
        "tenant_id": tenant_id,
        "actor_user_id": actor.user_id,
        "actor_token_id": actor.token_id,
        "actor": actor.label[:200],
        "ip": actor.ip,
        "action": action,
        "object_type": instance._meta.label_lower,
        "object_repr": str(instance)[:200],
        "changes": changes,
        "created_at": timezone.now(),
    }


# The columns `_entry` gives, in a fixed order for `insert`'s statement.
_ENTRY_FIELDS = [
    AuditEntry._meta.get_field(name)
    for name in (
        "tenant",
        "actor_user",
        "actor_token",
        "actor",
        "ip",
        "action",
        "object_type",
        "object_repr",
        "changes",
        "created_at",
    )
]
