"""Per-pool rescaling policy: when a pool's fractional claims grow and shrink back (telemetry.rescale).

A pool without a PoolRescaling row follows the platform defaults (NVKE_TELEMETRY_PRESSURE_PERCENT,
_PRESSURE_S, _IDLE_PERCENT, _IDLE_S and a maximum growth of 200 %). Ingestion reads the policy of each
reporting node's pool through a per-process cache (`for_nodes`), so the per-second path adds no
database query per batch: one query per CACHE_TTL_S for the nodes a process hears from, and a change
applies within that time. The rescaler (every 5 s) reads the policies of its claims' pools directly."""

from collections.abc import Iterable
from dataclasses import asdict, dataclass, fields, replace

from django.conf import settings
from django.db import transaction

from nodepools.models import Node, NodePool
from nvke import caches
from nvke.errors import Conflict, DomainError

from .models import RESCALING_BOUNDS, PoolRescaling

DEFAULT_MAX_GROWTH_PERCENT = 200  # a claim grows to at most twice its request
CACHE_TTL_S = 5.0
MAX_CACHED_NODES = 100_000


@dataclass(frozen=True)
class Policy:
    enabled: bool
    pressure_percent: int  # usage (% of the claim's share) at or above which a stretch of pressure runs
    pressure_s: int  # how long the pressure lasts before the claim grows
    idle_percent: int  # usage at or below which a stretch of idleness runs
    idle_s: int  # how long a grown claim is idle before it shrinks back to its request
    max_growth_percent: int  # the most a claim grows to, in % of its request


FIELDS = tuple(f.name for f in fields(Policy))


def default() -> Policy:
    """The platform defaults, read from the settings on each call (tests override them)."""
    return Policy(
        enabled=True,
        pressure_percent=settings.TELEMETRY_PRESSURE_PERCENT,
        pressure_s=settings.TELEMETRY_PRESSURE_S,
        idle_percent=settings.TELEMETRY_IDLE_PERCENT,
        idle_s=settings.TELEMETRY_IDLE_S,
        max_growth_percent=DEFAULT_MAX_GROWTH_PERCENT,
    )


def of_row(row: PoolRescaling | None) -> Policy:
    return default() if row is None else Policy(**{name: getattr(row, name) for name in FIELDS})


def check(policy: Policy) -> Policy:
    """Raises a DomainError naming the first field out of bounds."""
    if not isinstance(policy.enabled, bool):
        raise DomainError("enabled: expected true or false.", field="enabled")
    for name, (low, high) in RESCALING_BOUNDS.items():
        value = getattr(policy, name)
        if isinstance(value, bool) or not isinstance(value, int):
            raise DomainError(f"{name}: expected a whole number.", field=name)
        if not low <= value <= high:
            unit = "s" if name.endswith("_s") else "%"
            raise DomainError(
                f"{name}: {value} is out of bounds; use {low}{unit} to {high}{unit}.",
                field=name,
                code="out_of_bounds",
            )
    if policy.idle_percent >= policy.pressure_percent:
        raise DomainError(
            f"idle_percent: {policy.idle_percent}% must be below pressure_percent "
            f"({policy.pressure_percent}%).",
            field="idle_percent",
            code="out_of_bounds",
        )
    return policy


def row_of(pool: NodePool) -> PoolRescaling | None:
    """The pool's own policy row; None when it follows the platform defaults."""
    try:
        return pool.rescaling
    except PoolRescaling.DoesNotExist:
        return None


def for_pools(pool_ids: Iterable[int]) -> dict[int, Policy]:
    """Each pool's policy, in one query (no cache: for the rescaler and the pages)."""
    pool_ids = set(pool_ids)
    rows = {row.pool_id: row for row in PoolRescaling.objects.filter(pool_id__in=pool_ids)}
    return {pool_id: of_row(rows.get(pool_id)) for pool_id in pool_ids}


def set_pool_policy(pool: NodePool, changes: dict, *, reset: bool = False) -> Policy:
    """Change a pool's policy. `changes` holds some of FIELDS; the others keep their current values,
    or with `reset` take the platform defaults (a PUT). Checked before anything is written; the row
    is saved through the ORM, so the audit log records the change."""
    unknown = set(changes) - set(FIELDS)
    if unknown:
        field = sorted(unknown)[0]
        raise DomainError(f"{field}: no such field of a rescaling policy.", field=field)
    with transaction.atomic():
        # The pool's row serialises concurrent changes, including the first one that creates the policy.
        pool = NodePool.objects.select_for_update().get(pk=pool.pk)
        if pool.status == NodePool.Status.DELETING:
            raise Conflict(f"Pool {pool.name} is being deleted.", code="deleting")
        row = PoolRescaling.objects.filter(pool=pool).first()
        policy = check(replace(default() if reset else of_row(row), **changes))
        if row is None:
            row = PoolRescaling(tenant_id=pool.tenant_id, pool=pool)
        for name, value in asdict(policy).items():
            setattr(row, name, value)
        row.save()
    forget()  # this process sees it at once; other processes within CACHE_TTL_S
    return policy


# --- the ingestion path's cache --------------------------------------------------------------------

# Node id → its pool's own policy, None for the defaults. A plain dict replaced whole: a lookup per node
# of every batch, at the price of a dict's.
_nodes = caches.renewed_every(
    "telemetry.policy.nodes", CACHE_TTL_S, MAX_CACHED_NODES, "emptied by `forget()` on a save in this process"
)


def forget() -> None:
    _nodes.clear()


def for_nodes(node_ids: Iterable[int]) -> dict[int, Policy]:
    """The policy of each node's pool. Cached for CACHE_TTL_S: at most one query per call, and only
    for the nodes not seen since the cache was last renewed. Unknown nodes get the defaults."""
    node_ids = list(node_ids)
    cached = _nodes.current()
    missing = [node_id for node_id in node_ids if node_id not in cached]
    if missing:
        rows = Node.objects.filter(pk__in=missing).values_list(
            "pk", *(f"pool__rescaling__{name}" for name in FIELDS)
        )
        found = {pk: Policy(*values) if values[0] is not None else None for pk, *values in rows}
        for node_id in missing:
            cached[node_id] = found.get(node_id)
    defaults = default()
    return {node_id: cached.get(node_id) or defaults for node_id in node_ids}
