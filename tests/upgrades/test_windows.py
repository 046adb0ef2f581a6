"""Maintenance-window arithmetic across time zones and daylight-saving changes, and exclusions by scope:
each case is a window (or an exclusion), a moment, and what must follow, in UTC."""

import datetime
import time

import pytest

from upgrades import windows
from upgrades.windows import Exclusion, UpgradeKind, decide, next_windows, window

UTC = datetime.UTC
H = datetime.timedelta(hours=1)


def utc(text: str) -> datetime.datetime:
    return datetime.datetime.fromisoformat(text).replace(tzinfo=UTC)


def local(text: str) -> datetime.datetime:
    return datetime.datetime.fromisoformat(text)


SUNDAY_0230_BERLIN = ("FREQ=WEEKLY;BYDAY=SU", 2 * H, "Europe/Berlin", local("2026-01-04T02:30"))


@pytest.mark.parametrize(
    "spec, after, expected",
    [
        # Berlin, Sunday 02:30 for 2 h: the wall clock stays 02:30 through both changes.
        (SUNDAY_0230_BERLIN, "2026-03-21T00:00", ("2026-03-22T01:30", "2026-03-22T03:30")),  # CET, +1
        # 2026-03-29 02:00 → 03:00: 02:30 does not exist; it begins at 03:30 CEST, two hours as ever.
        (SUNDAY_0230_BERLIN, "2026-03-28T00:00", ("2026-03-29T01:30", "2026-03-29T03:30")),
        (SUNDAY_0230_BERLIN, "2026-04-04T00:00", ("2026-04-05T00:30", "2026-04-05T02:30")),  # CEST, +2
        # 2026-10-25 03:00 → 02:00: 02:30 happens twice; the window starts at the first.
        (SUNDAY_0230_BERLIN, "2026-10-24T00:00", ("2026-10-25T00:30", "2026-10-25T02:30")),
        (SUNDAY_0230_BERLIN, "2026-10-31T00:00", ("2026-11-01T01:30", "2026-11-01T03:30")),
        # New York, daily 01:30 for 4 h over 2026-11-01's fall back: 4 elapsed hours (01:30 EDT → 04:30 EST).
        (
            ("FREQ=DAILY", 4 * H, "America/New_York", local("2026-10-01T01:30")),
            "2026-11-01T00:00",
            ("2026-11-01T05:30", "2026-11-01T09:30"),
        ),
        (
            ("FREQ=DAILY", 4 * H, "America/New_York", local("2026-10-01T01:30")),
            "2026-11-02T00:00",
            ("2026-11-02T06:30", "2026-11-02T10:30"),
        ),
        # Sydney, Saturday 23:00 for 3 h, across midnight and 2026-10-04's spring forward (+10 → +11).
        (
            ("FREQ=WEEKLY;BYDAY=SA", 3 * H, "Australia/Sydney", local("2026-09-05T23:00")),
            "2026-10-01T00:00",
            ("2026-10-03T13:00", "2026-10-03T16:00"),
        ),
        (
            ("FREQ=WEEKLY;BYDAY=SA", 3 * H, "Australia/Sydney", local("2026-09-05T23:00")),
            "2026-10-04T00:00",
            ("2026-10-10T12:00", "2026-10-10T15:00"),
        ),
        # A window open at the moment asked about comes first.
        (SUNDAY_0230_BERLIN, "2026-03-22T02:00", ("2026-03-22T01:30", "2026-03-22T03:30")),
        # BYHOUR/BYMINUTE in the rule, and an EXDATE line (a holiday left out).
        (
            (
                "RRULE:FREQ=WEEKLY;BYDAY=SA;BYHOUR=22;BYMINUTE=0\nEXDATE:20261226T220000",
                H,
                "Europe/Berlin",
                local("2026-12-05T22:00"),
            ),
            "2026-12-20T00:00",
            ("2027-01-02T21:00", "2027-01-02T22:00"),
        ),
    ],
)
def test_the_next_window_keeps_the_wall_clock_and_lasts_its_duration(spec, after, expected):
    [(start, end)] = next_windows([window(*spec)], utc(after), 1)
    assert (start, end) == (utc(expected[0]), utc(expected[1]))


def test_overlapping_windows_merge_and_are_listed_in_order():
    nightly = window("FREQ=DAILY", 3 * H, "UTC", local("2026-06-01T01:00"))
    saturday = window("FREQ=WEEKLY;BYDAY=SA", 6 * H, "UTC", local("2026-06-06T03:00"))
    listed = next_windows([saturday, nightly], utc("2026-06-05T12:00"), 3)
    assert listed == [
        (utc("2026-06-06T01:00"), utc("2026-06-06T09:00")),  # 01:00–04:00 and 03:00–09:00 as one
        (utc("2026-06-07T01:00"), utc("2026-06-07T04:00")),
        (utc("2026-06-08T01:00"), utc("2026-06-08T04:00")),
    ]


MINOR = UpgradeKind(minor=True, nodes=False)  # the control plane to a new minor
PATCH = UpgradeKind(minor=False, nodes=False)  # the control plane to a patch release
NODES = UpgradeKind(minor=False, nodes=True)  # a driver or a node image
POOL_MINOR = UpgradeKind(minor=True, nodes=True)


@pytest.mark.parametrize(
    "scope, upgrade, blocked",
    [
        ("all", PATCH, True),
        ("all", NODES, True),
        ("minor", MINOR, True),
        ("minor", POOL_MINOR, True),
        ("minor", PATCH, False),
        ("minor", NODES, False),
        ("node", NODES, True),
        ("node", POOL_MINOR, True),
        ("node", MINOR, False),
        ("node", PATCH, False),
    ],
)
def test_an_exclusion_blocks_only_what_its_scope_names(scope, upgrade, blocked):
    always = window("FREQ=DAILY", 24 * H, "UTC", local("2026-01-01T00:00"))
    exclusion = Exclusion(datetime.date(2026, 7, 1), datetime.date(2026, 7, 31), scope)
    decision = decide([always], [exclusion], upgrade, utc("2026-07-15T12:00"), "UTC")
    assert (decision.allowed, decision.reason) == ((False, "Excluded") if blocked else (True, "InWindow"))


def test_exclusion_days_are_the_clusters_days():
    always = window("FREQ=DAILY", 24 * H, "Europe/Berlin", local("2026-01-01T00:00"))
    christmas = Exclusion(datetime.date(2026, 12, 24), datetime.date(2026, 12, 26), "all")
    assert decide([always], [christmas], NODES, utc("2026-12-23T23:30"), "Europe/Berlin").reason == "Excluded"
    after = decide([always], [christmas], NODES, utc("2026-12-26T23:30"), "Europe/Berlin")  # 27th, 00:30
    assert after.allowed
    blocked = decide([always], [christmas], NODES, utc("2026-12-25T12:00"), "Europe/Berlin")
    assert blocked.next_start == utc("2026-12-26T23:00")  # the 27th's local midnight
    assert "2026-12-24 to 2026-12-26" in blocked.message


def test_inside_a_window_the_decision_says_when_to_pause_and_outside_when_to_start():
    inside = decide([window(*SUNDAY_0230_BERLIN)], [], NODES, utc("2026-04-05T01:00"), "Europe/Berlin")
    assert (inside.allowed, inside.until) == (True, utc("2026-04-05T02:30"))
    assert "2026-04-05 04:30 CEST" in inside.message
    outside = decide([window(*SUNDAY_0230_BERLIN)], [], NODES, utc("2026-04-05T03:00"), "Europe/Berlin")
    assert (outside.allowed, outside.reason, outside.next_start) == (
        False,
        "OutsideWindow",
        utc("2026-04-12T00:30"),
    )


def test_a_window_is_cut_short_where_an_exclusion_begins():
    sunday_night = window("FREQ=WEEKLY;BYDAY=SU", 4 * H, "UTC", local("2026-05-03T22:00"))
    monday = Exclusion(datetime.date(2026, 5, 11), datetime.date(2026, 5, 11), "node")
    decision = decide([sunday_night], [monday], NODES, utc("2026-05-10T23:00"), "UTC")
    assert (decision.allowed, decision.until) == (True, utc("2026-05-11T00:00"))  # not 02:00
    assert decide([sunday_night], [monday], PATCH, utc("2026-05-10T23:00"), "UTC").until == utc(
        "2026-05-11T02:00"
    )


def test_the_next_start_skips_the_windows_an_exclusion_covers():
    nightly = window("FREQ=DAILY", H, "UTC", local("2026-05-01T02:00"))
    freeze = Exclusion(datetime.date(2026, 5, 10), datetime.date(2026, 5, 12), "node")
    decision = decide([nightly], [freeze], NODES, utc("2026-05-10T02:30"), "UTC")
    assert decision.next_start == utc("2026-05-13T02:00")
    assert decide([nightly], [freeze], PATCH, utc("2026-05-10T02:30"), "UTC").allowed  # not a node upgrade


def test_no_window_means_no_start():
    decision = decide([], [], PATCH, utc("2026-05-10T02:30"), "UTC")
    assert (decision.allowed, decision.next_start) == (False, None)


@pytest.mark.parametrize(
    "args, says",
    [
        (("FREQ=SOMETIMES", H, "UTC", local("2026-01-01T00:00")), "not an RFC 5545 recurrence rule"),
        (("FREQ=DAILY", H, "Mars/Olympus", local("2026-01-01T00:00")), "not an IANA time zone"),
        (("FREQ=DAILY", datetime.timedelta(0), "UTC", local("2026-01-01T00:00")), "from a minute to 7 days"),
        (("FREQ=DAILY", 8 * 24 * H, "UTC", local("2026-01-01T00:00")), "from a minute to 7 days"),
        (("FREQ=DAILY", H, "UTC", utc("2026-01-01T00:00")), "without an offset"),
    ],
)
def test_what_is_not_a_window_is_refused_saying_why(args, says):
    with pytest.raises(ValueError, match=says):
        window(*args)


START = local("2026-01-01T02:00")


@pytest.mark.parametrize(
    "rule, duration, says",
    [
        ("FREQ=MINUTELY", H, "hourly or coarser"),
        ("FREQ=SECONDLY", H, "hourly or coarser"),
        ("RRULE:FREQ=DAILY\nRRULE:FREQ=MINUTELY;INTERVAL=5", H, "hourly or coarser"),
        # Filters that no day passes: dateutil walks day by day to year 9999 looking (16.7 s a PUT).
        ("FREQ=DAILY;BYMONTH=2;BYMONTHDAY=30", H, "no day"),
        ("FREQ=YEARLY;BYMONTH=4,6;BYMONTHDAY=31,-31", H, "no day"),
        ("FREQ=DAILY;INTERVAL=7;BYDAY=MO", H, "INTERVAL"),
        ("FREQ=HOURLY;INTERVAL=24;BYHOUR=3", 30, "INTERVAL"),
        ("FREQ=MONTHLY;INTERVAL=12;BYMONTH=3", H, "INTERVAL"),
        ("FREQ=HOURLY;BYMONTHDAY=29", 30, "HOURLY"),
        ("FREQ=WEEKLY;BYSETPOS=9", H, "BYSETPOS"),
        ("FREQ=MONTHLY;BYDAY=5MO;BYMONTHDAY=1", H, "numbered weekday"),
        ("FREQ=MONTHLY;BYDAY=-6SU", H, "within"),
        ("FREQ=YEARLY;BYWEEKNO=53;BYDAY=MO", H, "BYWEEKNO"),
        ("FREQ=HOURLY;BYMINUTE=0;BYSECOND=1,2", 30, "BYSECOND"),
        ("FREQ=HOURLY;BYMINUTE=" + ",".join(map(str, range(60))), 1, "BYMINUTE"),
        # A window longer than the rule's period overlaps itself: hourly for 3 hours is three at once.
        ("FREQ=HOURLY", 3 * H, "longer than"),
        ("FREQ=WEEKLY;INTERVAL=2", 15 * 24 * H, "from a minute to 7 days"),
    ],
)
def test_rules_that_would_burn_cpu_are_refused_quickly(rule, duration, says):
    duration = duration if isinstance(duration, datetime.timedelta) else datetime.timedelta(minutes=duration)
    began = time.monotonic()
    with pytest.raises(ValueError, match=says):
        window(rule, duration, "UTC", START)
    assert time.monotonic() - began < 0.5


def test_a_first_start_long_ago_is_refused():
    """dateutil walks from the first start to today on every decision: a century of hours is minutes."""
    with pytest.raises(ValueError, match="2000"):
        window("FREQ=HOURLY", datetime.timedelta(minutes=30), "UTC", local("1900-01-01T00:00"))


@pytest.mark.parametrize(
    "rule",
    [
        "FREQ=YEARLY;BYMONTH=2;BYMONTHDAY=29",  # leap days: every four years
        "FREQ=WEEKLY;INTERVAL=2;BYDAY=SA,SU",
        "FREQ=MONTHLY;INTERVAL=3;BYDAY=1SA",
        "FREQ=HOURLY;BYDAY=SA;BYMINUTE=0,30",
        "RRULE:FREQ=DAILY;BYHOUR=2\nEXDATE:20260102T020000",
    ],
)
def test_rules_with_sparse_but_real_occurrences_are_kept(rule):
    w = window(rule, datetime.timedelta(minutes=20), "UTC", START)
    assert next_windows([w], utc("2026-01-01T00:00"), 1, horizon=5 * windows.YEAR)


def test_the_occurrences_searched_are_capped():
    """An endless rule's occurrences end at the cap (uncapped, a daily rule runs on to year 9999)."""
    w = window("FREQ=DAILY", H, "UTC", START)
    began = time.monotonic()
    assert len(list(windows.occurrences(w, utc("2026-01-01T00:00")))) == windows.MAX_OCCURRENCES
    assert time.monotonic() - began < 2
