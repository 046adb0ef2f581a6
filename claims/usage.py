"""Metered usage from the allocation history (UsageInterval rows, written by the allocator): memory
GiB-seconds, guaranteed and ceiling compute-percent-seconds and whole-GPU-equivalent hours over a time
range, grouped, with a cost where the catalog prices the GPU model. Exact to the second: each interval
counts the part of it inside the range; an open one counts up to now."""

import datetime
from collections import defaultdict
from dataclasses import dataclass, field
from decimal import Decimal

from django.utils import timezone

from catalog.models import GpuModel
from claims.models import UsageInterval
from nvke.errors import DomainError
from nvke.tenancy.models import Tenant

GROUPS = ("claim", "namespace", "pool", "cluster", "gpu_model", "tenant", "day")
MAX_RANGE = datetime.timedelta(days=366)
DAY = datetime.timedelta(days=1)


@dataclass
class Usage:
    """One group's metered usage over the range."""

    key: str
    memory_gib_seconds: float = 0.0
    guaranteed_percent_seconds: float = 0.0
    ceiling_percent_seconds: float = 0.0
    gpu_seconds: float = 0.0  # whole-GPU equivalents
    whole_card_seconds: float = 0.0  # what whole-card allocation would have held: a card per GPU share
    cost: Decimal | None = None  # None: no GPU model in the group has a price
    claims: set[int] = field(default_factory=set)

    @property
    def gpu_hours(self) -> float:
        return self.gpu_seconds / 3600

    @property
    def whole_card_gpu_hours(self) -> float:
        return self.whole_card_seconds / 3600

    @property
    def memory_gib_hours(self) -> float:
        return self.memory_gib_seconds / 3600

    @property
    def guaranteed_gpu_hours(self) -> float:
        return self.guaranteed_percent_seconds / 100 / 3600

    @property
    def ceiling_gpu_hours(self) -> float:
        return self.ceiling_percent_seconds / 100 / 3600

    def add(self, interval: UsageInterval, seconds: float, price: Decimal | None) -> None:
        self.memory_gib_seconds += interval.memory_mib / 1024 * seconds
        self.guaranteed_percent_seconds += interval.guaranteed_milli / 10 * seconds
        self.ceiling_percent_seconds += interval.ceiling_milli / 10 * seconds
        gpu_seconds = interval.gpu_equivalent_milli / 1000 * seconds
        self.gpu_seconds += gpu_seconds
        self.whole_card_seconds += interval.gpus * seconds
        if price is not None:
            self.cost = (self.cost or Decimal(0)) + price * Decimal(gpu_seconds) / 3600
        self.claims.add(interval.claim_id)


def check_range(
    since: datetime.datetime | None, until: datetime.datetime | None
) -> tuple[datetime.datetime, datetime.datetime]:
    """The range asked for, defaulting to the last 7 days; raises a DomainError naming the field."""
    until = until or timezone.now()
    since = since or until - 7 * DAY
    if since >= until:
        raise DomainError("since must be before until.", field="since")
    if until - since > MAX_RANGE:
        raise DomainError("Ask for at most 366 days at a time.", field="since", code="out_of_bounds")
    return since, until


def report(
    tenant: Tenant | None, since: datetime.datetime, until: datetime.datetime, group_by: str
) -> list[Usage]:
    """Usage of `tenant` (every tenant: None) in [since, until), one row per group, largest first (by day:
    in date order)."""
    if group_by not in GROUPS:
        raise DomainError(f"group_by must be one of {', '.join(GROUPS)}.", field="group_by")
    intervals = UsageInterval.objects.filter(started_at__lt=until).exclude(ended_at__lte=since)
    if tenant is not None:
        intervals = intervals.filter(tenant=tenant)
    prices = dict(GpuModel.objects.exclude(price_per_gpu_hour=None).values_list("name", "price_per_gpu_hour"))
    tenants = dict(Tenant.objects.values_list("pk", "slug")) if group_by == "tenant" else {}
    now = timezone.now()
    groups: dict[str, Usage] = defaultdict(lambda: Usage(""))
    for interval in intervals.iterator():
        start, end = max(interval.started_at, since), min(interval.ended_at or now, until)
        for key, seconds in _pieces(interval, start, end, group_by, tenants):
            usage = groups[key]
            usage.key = key
            usage.add(interval, seconds, prices.get(interval.gpu_model))
    rows = list(groups.values())
    if group_by == "day":
        return sorted(rows, key=lambda u: u.key)
    return sorted(rows, key=lambda u: (-u.gpu_seconds, u.key))


def _pieces(
    interval: UsageInterval, start: datetime.datetime, end: datetime.datetime, group_by: str, tenants: dict
) -> list[tuple[str, float]]:
    """(group key, seconds) for the part of the interval in [start, end); by day, split at UTC midnight."""
    if end <= start:
        return []
    if group_by != "day":
        return [(_key(interval, group_by, tenants), (end - start).total_seconds())]
    pieces = []
    day = start.astimezone(datetime.UTC).replace(hour=0, minute=0, second=0, microsecond=0)
    while day < end:
        piece_start, piece_end = max(start, day), min(end, day + DAY)
        if piece_end > piece_start:
            pieces.append((day.date().isoformat(), (piece_end - piece_start).total_seconds()))
        day += DAY
    return pieces


def _key(interval: UsageInterval, group_by: str, tenants: dict) -> str:
    return {
        "claim": lambda: f"{interval.cluster_name}/{interval.namespace}/{interval.claim_name}",
        "namespace": lambda: f"{interval.cluster_name}/{interval.namespace}",
        "pool": lambda: f"{interval.cluster_name}/{interval.pool_name}",
        "cluster": lambda: interval.cluster_name,
        "gpu_model": lambda: interval.gpu_model,
        "tenant": lambda: tenants.get(interval.tenant_id, str(interval.tenant_id)),
    }[group_by]()
