"""Maintenance windows and exclusions, as arithmetic (pure): when an automatic or scheduled upgrade may
start and when it must pause.

A window is an RFC 5545 recurrence rule (python-dateutil's `rrulestr`, which parses RRULE, RDATE and
EXDATE lines) whose occurrences are wall-clock times in the cluster's time zone, and a duration. The wall
clock is kept across daylight-saving changes (a Saturday 02:00 window starts at 02:00 local in winter and
in summer); the duration is elapsed time, so a 4-hour window is 4 hours on the night the clocks change
too. A start that falls in the spring-forward gap begins the same elapsed time after the last valid
minute (02:30 in a 02:00→03:00 gap is 03:30); a start the fall-back repeats is its first occurrence.

An exclusion is a range of dates in the cluster's time zone, ends included, with a scope: no upgrades
at all, no minor upgrades (patch releases still go), or no node upgrades (drivers, node images, pools'
Kubernetes; the control plane still goes).

Rules are tenant input and dateutil walks them period by period: a rule no day passes
(`FREQ=DAILY;BYMONTH=2;BYMONTHDAY=30`) is walked to year 9999 (16.7 s), a minutely one is half a
million periods a year. So `window` admits the subset whose every rule is hourly or coarser and has an
occurrence dateutil finds within a few thousand periods: no BYSECOND, BYYEARDAY, BYWEEKNO, BYSETPOS or
BYEASTER; BYMONTH and BYMONTHDAY that name a real day; no INTERVAL with filters that could miss every
step; day filters not on hourly rules; a first start from 2000 on (the walk starts there); a window no
longer than its rule's period. `occurrences` stops after MAX_OCCURRENCES all the same."""

import dataclasses
import datetime
import itertools
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from dateutil.rrule import rrule, rruleset, rrulestr

MAX_DURATION = datetime.timedelta(days=7)
MAX_OCCURRENCES = 5000  # of one window, per question: a year of hourly windows is 8,784
MIN_START = datetime.datetime(2000, 1, 1)
PERIODS = {  # a rule's step, at its coarsest: a window longer than INTERVAL of these overlaps itself
    "YEARLY": datetime.timedelta(days=365),
    "MONTHLY": datetime.timedelta(days=28),
    "WEEKLY": datetime.timedelta(days=7),
    "DAILY": datetime.timedelta(days=1),
    "HOURLY": datetime.timedelta(hours=1),
}
REFUSED_PARTS = ("BYSECOND", "BYYEARDAY", "BYWEEKNO", "BYSETPOS", "BYEASTER")
DAYS_IN_MONTH = (31, 29, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31)  # a leap year's: Feb 29 is a day
YEAR = datetime.timedelta(days=366)  # how far ahead windows are looked for
SCOPES = ("all", "minor", "node")
UTC = datetime.UTC


@dataclass(frozen=True)
class UpgradeKind:
    """What an upgrade changes, as exclusions see it."""

    minor: bool  # a new Kubernetes minor version (not a patch release, a driver or a node image)
    nodes: bool  # it replaces or drains nodes


@dataclass(frozen=True)
class Window:
    recurrence: rrule | rruleset
    duration: datetime.timedelta
    zone: ZoneInfo


@dataclass(frozen=True)
class Exclusion:
    first_day: datetime.date
    last_day: datetime.date
    scope: str  # one of SCOPES

    def blocks(self, upgrade: UpgradeKind) -> bool:
        return (
            self.scope == "all"
            or (self.scope == "minor" and upgrade.minor)
            or (self.scope == "node" and upgrade.nodes)
        )


@dataclass(frozen=True)
class WindowDecision:
    """Whether an upgrade may start (or go on) now under the cluster's windows and exclusions, and why."""

    allowed: bool
    reason: str  # InWindow, OutsideWindow, Excluded
    message: str
    until: datetime.datetime | None = None  # allowed: when the window ends (the upgrade pauses there)
    next_start: datetime.datetime | None = None  # not allowed: when it may start, if ever within a year


def zone(name: str) -> ZoneInfo:
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError):
        raise ValueError(f"{name!r} is not an IANA time zone (such as Europe/Berlin).") from None


def window(
    recurrence: str,
    duration: datetime.timedelta,
    time_zone: str,
    starts: datetime.datetime,
    *,
    bounded: bool = True,
) -> Window:
    """A window from an RFC 5545 rule ("FREQ=WEEKLY;BYDAY=SA;BYHOUR=2;BYMINUTE=0", or RRULE/EXDATE lines),
    counted from `starts` (a naive wall-clock time in `time_zone`). ValueError says what is wrong.
    `bounded=False` skips the limits on rules (see the module's docstring): for NVKE's own rules only."""
    if not datetime.timedelta(minutes=1) <= duration <= MAX_DURATION:
        raise ValueError(f"A window lasts from a minute to {MAX_DURATION.days} days, not {duration}.")
    if starts.tzinfo is not None:
        raise ValueError("The first start is a wall-clock time in the window's time zone, without an offset.")
    if bounded:
        if starts < MIN_START:
            raise ValueError(f"The first start is {MIN_START.year} or later.")
        for parts in _rule_parts(recurrence):
            _check_rule(parts, duration)
    tz = zone(time_zone)
    try:
        rule = rrulestr(recurrence, dtstart=starts.replace(second=0, microsecond=0), forceset=True)
    except (ValueError, TypeError) as error:
        raise ValueError(f"{recurrence!r} is not an RFC 5545 recurrence rule: {error}") from None
    return Window(rule, duration, tz)


def _rule_parts(recurrence: str) -> list[dict[str, str]]:
    """The NAME=VALUE parts of each RRULE in the text (a bare rule, or RRULE:/EXDATE:/RDATE: lines)."""
    rules = []
    for line in recurrence.strip().splitlines():
        name, colon, value = line.strip().partition(":")
        if not colon:
            name, value = "RRULE", line.strip()
        if name.upper() == "RRULE":
            pairs = (part.partition("=") for part in value.split(";") if part)
            rules.append({key.upper(): val.upper() for key, _, val in pairs})
    return rules


def _ints(value: str | None) -> list[int]:
    try:
        return [int(v) for v in value.split(",")] if value else []
    except ValueError:
        return []  # dateutil's parser says what is wrong with it


def _check_rule(parts: dict[str, str], duration: datetime.timedelta) -> None:
    """ValueError when dateutil could walk this rule for long without an occurrence."""
    freq = parts.get("FREQ", "")
    if freq in ("MINUTELY", "SECONDLY"):
        raise ValueError(f"A window's rule is hourly or coarser, not FREQ={freq}.")
    if refused := [name for name in REFUSED_PARTS if name in parts]:
        raise ValueError(f"A window's rule may not use {', '.join(refused)}.")
    if len(_ints(parts.get("BYMINUTE"))) > 4:
        raise ValueError("A window's rule names at most 4 minutes in BYMINUTE.")
    months = _ints(parts.get("BYMONTH")) or range(1, 13)
    if (days := _ints(parts.get("BYMONTHDAY"))) and not any(
        abs(day) <= DAYS_IN_MONTH[month - 1] for month in months if 1 <= month <= 12 for day in days
    ):
        raise ValueError("The rule's BYMONTH and BYMONTHDAY name no day of any month.")
    nth = [d.rstrip("MOTUWEHFRSA") for d in parts.get("BYDAY", "").split(",")]
    if any(n not in ("", "+", "-") for n in nth):  # 2SA: the second Saturday (of the month or year)
        if "BYMONTHDAY" in parts:
            raise ValueError("A rule may not name both a numbered weekday (BYDAY) and BYMONTHDAY.")
        most = 53 if freq == "YEARLY" and "BYMONTH" not in parts else 5
        if any(abs(int(n)) > most for n in nth if n.lstrip("+-").isdigit()):
            raise ValueError(f"A numbered weekday (BYDAY) is within ±{most} here.")
    interval = _ints(parts.get("INTERVAL")) or [1]
    filters = {
        "DAILY": ("BYDAY", "BYMONTH", "BYMONTHDAY"),
        "HOURLY": ("BYHOUR", "BYDAY"),
        "MONTHLY": ("BYMONTH",),
    }.get(freq, ())
    if interval[0] > 1 and (clash := [name for name in filters if name in parts]):
        raise ValueError(f"A {freq} rule with INTERVAL may not filter by {', '.join(clash)}.")
    if freq == "HOURLY" and (days := [name for name in ("BYMONTH", "BYMONTHDAY") if name in parts]):
        raise ValueError(f"An HOURLY rule may not filter by {', '.join(days)}.")
    if freq in PERIODS and duration > PERIODS[freq] * max(interval[0], 1):
        raise ValueError(f"The window is longer than its rule's period ({freq}, INTERVAL={interval[0]}).")


def _aware(wall: datetime.datetime, tz: ZoneInfo) -> datetime.datetime:
    """A wall-clock time in `tz` as a UTC instant (fold=0: a repeated time's first occurrence; a time in
    a gap is read with the offset before the gap, which moves it forward by the gap)."""
    return wall.replace(tzinfo=tz, fold=0).astimezone(UTC)


def occurrences(w: Window, after: datetime.datetime) -> Iterator[tuple[datetime.datetime, datetime.datetime]]:
    """(start, end) in UTC of every window still open at or starting after `after` (aware), in order."""
    local_after = after.astimezone(w.zone).replace(tzinfo=None)
    # A window that started up to `duration` before `after` may still be open; a day's slack covers the
    # offset change the wall clock may have made meanwhile.
    walls = w.recurrence.xafter(local_after - w.duration - datetime.timedelta(days=1), inc=True)
    for wall in itertools.islice(walls, MAX_OCCURRENCES):
        start = _aware(wall, w.zone)
        end = start + w.duration
        if end > after:
            yield start, end


def next_windows(
    windows: Iterable[Window], after: datetime.datetime, count: int, horizon: datetime.timedelta = YEAR
) -> list[tuple[datetime.datetime, datetime.datetime]]:
    """Up to `count` windows of all of them (one open now first) starting within `horizon` of `after`,
    overlapping and touching ones merged (a window that never closes ends at the horizon)."""
    limit = after + horizon
    merged: list[tuple[datetime.datetime, datetime.datetime]] = []
    streams = [occurrences(w, after) for w in windows]
    heads = [next(s, None) for s in streams]
    while any(heads):
        index = min((i for i, h in enumerate(heads) if h), key=lambda i: heads[i])
        start, end = heads[index]
        if start > limit or (len(merged) == count and start > merged[-1][1]):
            break
        heads[index] = next(streams[index], None)
        if merged and start <= merged[-1][1]:
            merged[-1] = (merged[-1][0], min(max(end, merged[-1][1]), limit))
        else:
            merged.append((start, min(end, limit)))
    return merged


def _excluded(exclusions: Iterable[Exclusion], upgrade: UpgradeKind, day: datetime.date) -> Exclusion | None:
    return next((x for x in exclusions if x.first_day <= day <= x.last_day and x.blocks(upgrade)), None)


def decide(
    windows: list[Window],
    exclusions: list[Exclusion],
    upgrade: UpgradeKind,
    at: datetime.datetime,
    time_zone: str,
    horizon: datetime.timedelta = YEAR,
) -> WindowDecision:
    """May `upgrade` start (or go on) at `at`: inside a window and on a day no exclusion blocks."""
    tz = zone(time_zone)
    if exclusion := _excluded(exclusions, upgrade, at.astimezone(tz).date()):
        blocked = WindowDecision(
            False,
            "Excluded",
            f"Upgrades of this kind are excluded from {exclusion.first_day} to {exclusion.last_day} "
            f"({exclusion.scope}).",
        )
        return _with_next_start(blocked, windows, exclusions, upgrade, at, tz, horizon)
    current = next_windows(windows, at, 1, horizon)
    if current and current[0][0] <= at:
        until = _exclusion_from(exclusions, upgrade, tz, at, current[0][1]) or current[0][1]
        return WindowDecision(
            True,
            "InWindow",
            f"Inside the maintenance window until {until.astimezone(tz):%Y-%m-%d %H:%M %Z}.",
            until=until,
        )
    outside = WindowDecision(False, "OutsideWindow", "Outside every maintenance window.")
    return _with_next_start(outside, windows, exclusions, upgrade, at, tz, horizon)


def _midnight_after(moment: datetime.datetime, tz: ZoneInfo) -> datetime.datetime:
    """The next local midnight, when another day's exclusions apply."""
    day = moment.astimezone(tz).date() + datetime.timedelta(days=1)
    return datetime.datetime.combine(day, datetime.time(), tzinfo=tz).astimezone(UTC)


def _exclusion_from(
    exclusions: list[Exclusion],
    upgrade: UpgradeKind,
    tz: ZoneInfo,
    at: datetime.datetime,
    end: datetime.datetime,
) -> datetime.datetime | None:
    """The first local midnight after `at` and before `end` from which an exclusion blocks the upgrade:
    a window is cut short there, as it is at its end."""
    midnight = _midnight_after(at, tz)
    while midnight < end:
        if _excluded(exclusions, upgrade, midnight.astimezone(tz).date()):
            return midnight
        midnight = _midnight_after(midnight, tz)
    return None


def _with_next_start(
    decision: WindowDecision,
    windows: list[Window],
    exclusions: list[Exclusion],
    upgrade: UpgradeKind,
    at: datetime.datetime,
    tz: ZoneInfo,
    horizon: datetime.timedelta,
) -> WindowDecision:
    """The decision with the first moment, within the horizon, an upgrade of this kind may start."""
    for start, end in next_windows(windows, at, 400, horizon):
        moment = max(start, at)
        while moment < end:
            if not _excluded(exclusions, upgrade, moment.astimezone(tz).date()):
                return dataclasses.replace(decision, next_start=moment)
            moment = _midnight_after(moment, tz)
    return decision
