"""Maintenance windows and exclusions of a cluster (issue 18 item 4): set whole through the API, checked
before anything is written; a driver upgrade started by hand outside them needs an explicit override
(audited); a run outside them starts no node, finishes the nodes in flight, and goes on in the next."""

import datetime
from dataclasses import replace

import pytest
from django.utils import timezone

from audit.models import AuditEntry
from catalog.models import DriverRelease
from upgrades import maintenance, services
from upgrades.controller import tick
from upgrades.models import MaintenanceWindow, UpgradeRun
from upgrades.node_machine import State, plan
from upgrades.run_lifecycle import Phase
from upgrades.strategy import Strategy

from .conftest import drive
from .test_machine import RUN, node

pytestmark = pytest.mark.django_db
TARGET = "595.71.05"


def url(cluster) -> str:
    return f"/api/v1/clusters/{cluster.pk}/maintenance/"


def closed_now(time_zone: str = "UTC") -> dict:
    """A daily hour-long window that opens two hours from now (so now is outside it)."""
    opens = timezone.now().astimezone(maintenance.windows.zone(time_zone)) + datetime.timedelta(hours=2)
    return {"recurrence": "FREQ=DAILY", "start_time": f"{opens:%H:%M}", "duration_minutes": 60}


def open_now() -> dict:
    """A daily window that opened a minute ago and lasts two hours."""
    opened = timezone.now() - datetime.timedelta(minutes=1)
    return {"recurrence": "FREQ=DAILY", "start_time": f"{opened:%H:%M}", "duration_minutes": 120}


def settings_body(*windows: dict, time_zone: str = "UTC", exclusions: tuple = ()) -> dict:
    return {"time_zone": time_zone, "windows": list(windows), "exclusions": list(exclusions)}


@pytest.fixture
def pool(make_upgrade_pool):
    return make_upgrade_pool(nodes=3, claims=1)


def start(context, pool, **options):
    return services.create_run(
        context=context, pool=pool, target_release=DriverRelease.objects.get(version=TARGET), **options
    )


def test_a_cluster_without_windows_may_be_upgraded_any_time(api, pool):
    body = api.get(url(pool.cluster)).json()
    assert body["time_zone"] == "UTC" and body["windows"] == body["exclusions"] == body["next_windows"] == []
    assert body["now"]["allowed"] and body["now"]["reason"] == "NoWindows"


def test_windows_are_set_whole_and_listed_in_the_clusters_time_zone(api, pool):
    weekly = {"recurrence": "FREQ=WEEKLY;BYDAY=SA", "start_time": "02:00", "duration_minutes": 240}
    freeze = {"first_day": "2027-12-20", "last_day": "2028-01-03", "scope": "node", "reason": "holidays"}
    response = api.put(
        url(pool.cluster), settings_body(weekly, time_zone="Europe/Berlin", exclusions=(freeze,))
    )
    assert response.status_code == 200, response.json()
    body = api.get(url(pool.cluster)).json()
    assert body["time_zone"] == "Europe/Berlin" and len(body["windows"]) == 1
    assert body["exclusions"][0]["scope"] == "node"
    starts = [datetime.datetime.fromisoformat(w["start"]) for w in body["next_windows"]]
    assert len(starts) == 5 and starts == sorted(starts)
    berlin = maintenance.windows.zone("Europe/Berlin")
    assert {(s.astimezone(berlin).weekday(), s.astimezone(berlin).hour) for s in starts} == {(5, 2)}
    assert AuditEntry.objects.filter(object_type__endswith="maintenancewindow", action="create").exists()


@pytest.mark.parametrize(
    "body, field",
    [
        (settings_body(time_zone="Mars/Olympus"), "time_zone"),
        (
            settings_body({"recurrence": "EVERY SUNDAY", "start_time": "02:00", "duration_minutes": 60}),
            "windows[0].recurrence",
        ),
        (
            settings_body({"recurrence": "FREQ=DAILY", "start_time": "02:00", "duration_minutes": 0}),
            "windows.duration_minutes",
        ),
        (
            settings_body(exclusions=({"first_day": "2027-01-02", "last_day": "2027-01-01"},)),
            "exclusions[0].last_day",
        ),
    ],
)
def test_bad_settings_are_refused_naming_the_field_and_nothing_changes(api, pool, body, field):
    assert api.put(url(pool.cluster), settings_body(open_now())).status_code == 200
    response = api.put(url(pool.cluster), body)
    assert response.status_code == 400
    assert response.json()["message"].startswith(field.split(".")[0]), response.json()
    assert field.split(".")[-1].split("[")[0] in response.json()["message"]
    assert MaintenanceWindow.objects.filter(cluster=pool.cluster).count() == 1  # the earlier set stands


def test_another_tenants_cluster_is_not_found_and_viewers_cannot_change_it(pool, make_member, client_for):
    stranger = client_for(make_member("globex", "owner"))
    assert stranger.get(url(pool.cluster)).status_code == 404
    assert stranger.put(url(pool.cluster), settings_body()).status_code == 404
    viewer = client_for(make_member("acme", "viewer"))
    assert viewer.get(url(pool.cluster)).status_code == 200
    assert viewer.put(url(pool.cluster), settings_body()).status_code == 403


def test_a_manual_start_outside_the_windows_needs_an_override(api, pool):
    assert api.put(url(pool.cluster), settings_body(closed_now())).status_code == 200
    ask = {"pool": pool.pk, "target_release": TARGET}
    refused = api.post("/api/v1/upgrades/", ask, format="json")
    assert refused.status_code == 409 and refused.json()["code"] == "outside_maintenance_window"
    assert refused.json()["details"]["next_start"] and "override_window" in refused.json()["message"]
    assert not UpgradeRun.objects.filter(pool=pool).exists()

    started = api.post("/api/v1/upgrades/", {**ask, "override_window": True}, format="json")
    assert started.status_code == 201 and started.json()["window_override"] is True
    run = UpgradeRun.objects.get(pk=started.json()["id"])
    assert run.history.filter(reason="WindowOverride").exists()
    entry = AuditEntry.objects.get(object_type__endswith="upgraderun", action="create")
    assert entry.changes["window_override"][1] is True
    assert drive(run).status == Phase.COMPLETED  # an overridden run ignores the windows


def test_a_run_waits_outside_its_window_and_goes_on_in_the_next(api, context, pool):
    run = start(context, pool, start=False)  # created pending: it waits for a window, not an override
    assert api.put(url(pool.cluster), settings_body(closed_now())).status_code == 200
    services.control(run, "start", context=context)
    for _ in range(3):
        run.refresh_from_db()
        tick(run.pk, run.tick_seq)
    run.refresh_from_db()
    assert run.status == Phase.RUNNING and run.reason == "OutsideWindow"
    assert "It may go on from" in run.message
    assert set(run.nodes.values_list("state", flat=True)) == {State.UPGRADE_REQUIRED}

    assert api.put(url(pool.cluster), settings_body(open_now())).status_code == 200
    assert drive(run).status == Phase.COMPLETED


def test_an_exclusion_holds_a_run_even_without_windows(api, context, pool):
    today = timezone.localdate().isoformat()
    freeze = {"first_day": today, "last_day": today, "scope": "node"}
    assert api.put(url(pool.cluster), settings_body(exclusions=(freeze,))).status_code == 200
    refused = api.post("/api/v1/upgrades/", {"pool": pool.pk, "target_release": TARGET}, format="json")
    assert refused.status_code == 409 and refused.json()["details"]["reason"] == "Excluded"


def test_outside_the_window_nodes_in_flight_finish_and_no_node_starts():
    strategy = Strategy(max_unavailable=2, canary_nodes=1, drain_timeout_s=60, validation_timeout_s=100)
    closed = replace(RUN, window_open=False, window_message="Outside every maintenance window.")
    nodes = [
        node(State.CORDON_REQUIRED, name="n0"),
        node(State.UPGRADE_REQUIRED, name="n1", canary=True),
        node(State.UPGRADE_REQUIRED, name="n2"),
    ]
    result = plan(closed, nodes, strategy, 0)
    assert [(s.node, s.to) for s in result.steps] == [("n0", State.WAIT_FOR_JOBS_REQUIRED)]
    assert (result.phase, result.reason) == (Phase.RUNNING, "OutsideWindow")
    assert {s.node for s in plan(RUN, nodes, strategy, 0).steps} == {"n0", "n1"}  # the window open
