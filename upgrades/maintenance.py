"""A cluster's maintenance windows and exclusions, read from its rows into upgrades.windows' arithmetic:
may an upgrade of a kind start (or go on) now, and when are the next windows. A cluster with no window
set may be upgraded at any time its exclusions allow, as a managed service without a configured window
does."""

import dataclasses
import datetime

from django.db import transaction
from django.utils import timezone

from nvke.errors import Conflict

from . import windows
from .models import MaintenanceExclusion, MaintenanceWindow

DRIVER = windows.UpgradeKind(minor=False, nodes=True)  # a driver upgrade drains and reinstalls nodes
CONTROL_PLANE = windows.UpgradeKind(minor=True, nodes=False)  # a minor version of the API server
POOL_KUBERNETES = windows.UpgradeKind(minor=True, nodes=True)  # a pool's kubelets: replaced machines
NEXT_WINDOWS = 5
# No window set: one that never closes (daily, two days long, so the merged windows never have a gap,
# whatever the clocks do), so exclusions still cut it by the day.
ALWAYS = ("FREQ=DAILY", datetime.timedelta(days=2))


def window_of(row: MaintenanceWindow, time_zone: str) -> windows.Window:
    """The row's window (ValueError when its rule, zone or duration is wrong)."""
    return windows.window(
        row.recurrence,
        datetime.timedelta(minutes=row.duration_minutes),
        time_zone,
        datetime.datetime.combine(row.first_day, row.start_time),
    )


def _exclusion_of(row: MaintenanceExclusion) -> windows.Exclusion:
    return windows.Exclusion(row.first_day, row.last_day, row.scope)


def _windows(cluster, rows: list[MaintenanceWindow] | None = None) -> list[windows.Window]:
    rows = list(cluster.maintenance_windows.all()) if rows is None else rows
    if rows:
        return [window_of(row, cluster.time_zone) for row in rows]
    midnight = datetime.datetime.combine(timezone.now().date() - datetime.timedelta(days=2), datetime.time())
    return [windows.window(ALWAYS[0], ALWAYS[1], cluster.time_zone, midnight, bounded=False)]


def decide(
    cluster, upgrade: windows.UpgradeKind = DRIVER, at: datetime.datetime | None = None
) -> windows.WindowDecision:
    """May an upgrade of this kind start or go on at `at` (now) on this cluster."""
    rows = list(cluster.maintenance_windows.all())
    exclusions = [_exclusion_of(row) for row in cluster.maintenance_exclusions.all()]
    at = at or timezone.now()
    decision = windows.decide(_windows(cluster, rows), exclusions, upgrade, at, cluster.time_zone)
    if decision.allowed and not rows:
        cut = decision.until if decision.until and decision.until < at + windows.YEAR else None
        zone = windows.zone(cluster.time_zone)
        until = f" until an exclusion from {cut.astimezone(zone):%Y-%m-%d}" if cut else ""
        message = f"No maintenance window is set: upgrades may run at any time{until}."
        return dataclasses.replace(decision, reason="NoWindows", message=message, until=cut)
    return decision


def next_windows(cluster, count: int = NEXT_WINDOWS) -> list[tuple[datetime.datetime, datetime.datetime]]:
    """The cluster's next windows (one open now first), merged; none when it has no window set."""
    rows = list(cluster.maintenance_windows.all())
    if not rows:
        return []
    return windows.next_windows(_windows(cluster, rows), timezone.now(), count)


def waiting_message(decision: windows.WindowDecision, time_zone: str) -> str:
    """What a run or a refused start waits for, with when it may go on."""
    when = (
        f" It may go on from {decision.next_start.astimezone(windows.zone(time_zone)):%Y-%m-%d %H:%M %Z}."
        if decision.next_start
        else " No window within a year allows it."
    )
    return decision.message + when


def window_now(cluster, upgrade: windows.UpgradeKind = DRIVER) -> tuple[bool, str]:
    """May an upgrade of this kind start nodes on the cluster now, and in words: until when, or what it
    waits for."""
    decision = decide(cluster, upgrade)
    if decision.allowed:
        return True, decision.message
    return False, waiting_message(decision, cluster.time_zone)


def run_window(run) -> tuple[bool, str]:
    """window_now for a run: one started with an override ignores the windows."""
    if run.window_override:
        return True, ""
    return window_now(run.pool.cluster, POOL_KUBERNETES if run.kind == run.Kind.KUBERNETES else DRIVER)


def started_outside_window(cluster, override: bool, upgrade: windows.UpgradeKind = DRIVER) -> bool:
    """Whether a manual start is outside the cluster's maintenance windows, which only an explicit
    override allows (409 otherwise, saying when it may start)."""
    decision = decide(cluster, upgrade)
    if decision.allowed:
        return False
    if not override:
        raise Conflict(
            waiting_message(decision, cluster.time_zone)
            + " To start it now anyway, ask again with override_window: true.",
            field="override_window",
            code="outside_maintenance_window",
            reason=decision.reason,
            next_start=decision.next_start.isoformat() if decision.next_start else None,
        )
    return True


def replace(cluster, time_zone: str, window_rows: list[dict], exclusion_rows: list[dict]) -> None:
    """Set the cluster's time zone, windows and exclusions whole (checked before: nothing half-written).
    Running upgrades see them at their next tick."""
    with transaction.atomic():
        type(cluster).objects.select_for_update().filter(pk=cluster.pk).first()
        cluster.time_zone = time_zone
        cluster.save(update_fields=["time_zone", "updated_at"])
        cluster.maintenance_windows.all().delete()
        cluster.maintenance_exclusions.all().delete()
        owner = {"tenant_id": cluster.tenant_id, "cluster": cluster}
        for row in window_rows:  # one by one: each is an entry of the audit log
            MaintenanceWindow.objects.create(**owner, **row)
        for row in exclusion_rows:
            MaintenanceExclusion.objects.create(**owner, **row)


def document(cluster) -> dict:
    """The cluster's maintenance settings with the next windows and what holds now, as the API gives them."""
    decision = decide(cluster)
    return {
        "time_zone": cluster.time_zone,
        "windows": list(
            cluster.maintenance_windows.values("recurrence", "start_time", "duration_minutes", "first_day")
        ),
        "exclusions": list(cluster.maintenance_exclusions.values("first_day", "last_day", "scope", "reason")),
        "next_windows": [{"start": start, "end": end} for start, end in next_windows(cluster)],
        "now": dataclasses.asdict(decision),
    }
