"""Fleet rollout pages through the Django test client: list, new-rollout form with its preview, create,
the rollout's and its runs' pages, pause / resume / abort (abort asks first), CSRF, and 404 for everyone
but staff. Pools of two tenants run on the simulator; a B200 pool cannot take the target (architecture)."""

import re

import pytest
from django.test import Client
from rest_framework.test import APIClient

from nodepools.services import reconcile
from tests.frontend.helpers import STRATEGY_FORM
from upgrades import rollouts
from upgrades.models import FleetRollout, UpgradeRun

pytestmark = pytest.mark.django_db
TARGET = "600.10.01"  # hopper_only_driver: no Blackwell


@pytest.fixture
def fleet(tenant, make_member, make_cluster, make_pool, hopper_only_driver) -> dict:
    """Acme: L4 pools `a` and `b` and a B200 pool `big`; Globex: L4 pool `c`. All on 580.105.08."""
    globex = make_member("globex", "owner").memberships.get().tenant
    prod, west = make_cluster(tenant, "prod"), make_cluster(globex, "west")
    pools = {
        "a": make_pool(prod, name="a", nodes=2, gpus_per_node=2),
        "b": make_pool(prod, name="b", nodes=2, gpus_per_node=2),
        "big": make_pool(prod, name="big", gpu_model="b200-sxm-180gb", nodes=1, gpus_per_node=8),
        "c": make_pool(west, name="c", nodes=2, gpus_per_node=2),
    }
    for pool in pools.values():
        reconcile(pool.pk)
    return pools


@pytest.fixture
def operator(django_user_model):
    """A platform operator in no tenant: rollouts need none."""
    return django_user_model.objects.create_user("operator", password="pw-secret-123", is_staff=True)


@pytest.fixture
def staff(operator, ui_for) -> Client:
    return ui_for(operator)


FORM = {"target_release": TARGET, "gpu_model": "", "from_branch": "", "pools_per_wave": 2, **STRATEGY_FORM}


def create(operator, **fields) -> FleetRollout:
    from catalog.models import DriverRelease

    return rollouts.create_rollout(
        target_release=DriverRelease.objects.get(version=TARGET), user=operator, **fields
    )


def field_block(page: str, name: str) -> str:
    """The form field's block of _field.html: its label, input, help and errors."""
    match = re.search(rf'<div class="field[^"]*" id="field-{name}">(.*?)\n</div>', page, re.S)
    assert match, f"no field {name}"
    return match[1]


def test_preview_shows_waves_and_skipped_pools_and_writes_nothing(staff, fleet):
    response = staff.post("/fleet-rollouts/new/", FORM)
    page = response.content.decode()
    assert response.status_code == 200
    assert "Preview: 3 pools in 2 waves, 1 skipped" in page
    assert page.count('<tr data-rollout-pool="') == 3 and "planned" in page
    assert "Acme" in page and "Globex" in page
    skipped = re.search(r'<tr data-skipped-pool="(\d+)">(.*?)</tr>', page)
    assert int(skipped[1]) == fleet["big"].pk
    assert "<code>architecture</code>" in skipped[2] and "does not support Blackwell" in skipped[2]
    # The start button posts the previewed input again, with `confirm`.
    assert (
        'name="confirm"' in page and f'<input type="hidden" name="target_release" value="{TARGET}">' in page
    )
    assert not FleetRollout.objects.exists() and not UpgradeRun.objects.exists()

    # Filters narrow the match: only the B200 pool (which cannot take the target), nothing on branch 535.
    page = staff.post("/fleet-rollouts/new/", {**FORM, "gpu_model": "b200-sxm-180gb"}).content.decode()
    assert "Preview: 0 pools in 0 waves, 1 skipped" in page and 'name="confirm"' not in page
    page = staff.post("/fleet-rollouts/new/", {**FORM, "from_branch": 535}).content.decode()
    assert "No pool to upgrade." in page and 'name="confirm"' not in page


def test_a_fleet_changed_since_the_preview_shows_the_new_plan_instead_of_starting(staff, fleet, make_pool):
    page = staff.post("/fleet-rollouts/new/", FORM).content.decode()
    previewed = re.search(r'name="plan" value="([0-9a-f]+)"', page)[1]
    late = make_pool(fleet["a"].cluster, name="late", nodes=1, gpus_per_node=2)  # joins the match
    reconcile(late.pk)

    response = staff.post("/fleet-rollouts/new/", {**FORM, "confirm": "1", "plan": previewed})
    page = response.content.decode()
    assert response.status_code == 409 and not FleetRollout.objects.exists()
    assert "The fleet changed since the preview" in page and "Preview: 4 pools in 2 waves, 1 skipped" in page
    current = re.search(r'name="plan" value="([0-9a-f]+)"', page)[1]
    assert current != previewed
    response = staff.post("/fleet-rollouts/new/", {**FORM, "confirm": "1", "plan": current})
    assert response.status_code == 302
    assert FleetRollout.objects.get().runs.count() == 4


def test_confirm_creates_the_rollout_and_its_pages_show_waves_runs_and_skipped(staff, fleet, operator):
    response = staff.post("/fleet-rollouts/new/", {**FORM, "confirm": "1"})
    rollout = FleetRollout.objects.get()
    assert response.status_code == 302 and response["Location"] == f"/fleet-rollouts/{rollout.pk}/"
    assert rollout.created_by == operator and rollout.strategy["max_unavailable"] == "1"
    runs = {r.pool.name: (r.wave, r.status) for r in rollout.runs.select_related("pool")}
    assert runs == {"a": (0, "running"), "b": (0, "running"), "c": (1, "pending")}
    assert [s["rule"] for s in rollout.skipped] == ["architecture"]

    page = staff.get(response["Location"]).content.decode()
    assert f'data-rollout-status="{rollout.pk}">running<' in page
    assert "0 done · 2 running · 0 failed · 1 skipped" in page
    assert page.count("<caption>Wave ") == 2 and "Globex" in page
    run_c = rollout.runs.get(pool=fleet["c"])
    assert f'href="/fleet-rollouts/{rollout.pk}/runs/{run_c.pk}/"' in page
    assert f'data-run-status="{run_c.pk}">pending<' in page
    assert "<code>architecture</code>" in page and "prod/big" in page
    assert (
        'data-ws-url="/ws/events/?rollouts=1"' in page and f'data-refresh-on="rollout:{rollout.pk}"' in page
    )
    assert "Pause</button>" in page and f'href="/fleet-rollouts/{rollout.pk}/abort/"' in page

    # Another tenant's run, read-only, reached through the rollout.
    page = staff.get(f"/fleet-rollouts/{rollout.pk}/runs/{run_c.pk}/").content.decode()
    assert page.count('data-upgrade-node="') == 2 and "Globex / west / c" in page
    assert "Pause</button>" not in page and "/abort/" not in page
    other = FleetRollout.objects.create(target_release=rollout.target_release)
    assert staff.get(f"/fleet-rollouts/{other.pk}/runs/{run_c.pk}/").status_code == 404

    listing = staff.get("/fleet-rollouts/").content.decode()
    assert f'href="/fleet-rollouts/{rollout.pk}/"' in listing and TARGET in listing
    assert "any GPU, any branch" in listing and "0 done · 2 running · 0 failed · 1 skipped" in listing
    assert 'aria-current="page">Rollouts</a>' in listing


@pytest.mark.parametrize(
    "fields, field, message",
    [
        ({"max_unavailable": "0"}, "max_unavailable", "“Max unavailable” is at least 1 without a max surge"),
        ({"max_unavailable": "150%"}, "max_unavailable", "a percent up to 100%"),
        ({"pools_per_wave": 0}, "pools_per_wave", "greater than or equal to 1"),
        ({"target_release": "999.1.1"}, "target_release", "Select a valid choice"),
        ({"failure_budget": ""}, "failure_budget", "This field is required"),
    ],
)
@pytest.mark.parametrize("confirm", [False, True])
def test_bad_input_is_an_error_under_its_field_and_nothing_is_written(
    staff, fleet, fields, field, message, confirm
):
    body = {**FORM, **fields, **({"confirm": "1"} if confirm else {})}
    response = staff.post("/fleet-rollouts/new/", body)
    page = response.content.decode()
    assert response.status_code == 400
    assert message in field_block(page, field) and 'aria-invalid="true"' in field_block(page, field)
    assert "Preview:" not in page
    assert not FleetRollout.objects.exists() and not UpgradeRun.objects.exists()


def test_the_service_refuses_bad_waves_and_strategy_before_writing(operator, fleet):
    """The API's path: the same checks, a 400 naming the field, not a crash or half a rollout."""
    api = APIClient()
    api.force_authenticate(operator)
    body = {"target_release": TARGET, "pools_per_wave": 0}
    response = api.post("/api/v1/fleet-rollouts/", body, format="json")
    assert (response.status_code, response.data["details"]["field"]) == (400, "pools_per_wave")
    body = {"target_release": TARGET, "gpu_model": "t4", "strategy": {"max_unavailable": "x"}}  # no t4 pool
    response = api.post("/api/v1/fleet-rollouts/", body, format="json")
    assert (response.status_code, response.data["details"]["field"]) == (400, "max_unavailable")
    assert not FleetRollout.objects.exists() and not UpgradeRun.objects.exists()


def test_pause_resume_and_abort_after_a_confirmation(staff, fleet, operator):
    rollout = create(operator, pools_per_wave=2)
    url = f"/fleet-rollouts/{rollout.pk}/"
    assert staff.post(f"{url}pause/").status_code == 302
    rollout.refresh_from_db()
    assert rollout.status == "paused"
    assert set(rollout.runs.filter(wave=0).values_list("status", flat=True)) == {"paused"}
    page = staff.post(f"{url}pause/", follow=True).content.decode()
    assert "Cannot pause a rollout that is paused." in page and "Resume</button>" in page

    assert staff.post(f"{url}resume/").status_code == 302
    assert FleetRollout.objects.get(pk=rollout.pk).status == "running"

    confirm = staff.get(f"{url}abort/").content.decode()
    assert f"Abort the rollout to {TARGET}?" in confirm and "Abort rollout</button>" in confirm
    assert FleetRollout.objects.get(pk=rollout.pk).status == "running"  # asking changed nothing
    page = staff.post(f"{url}abort/", follow=True).content.decode()
    assert "Abort: rollout is aborted." in page
    assert FleetRollout.objects.get(pk=rollout.pk).status == "aborted"
    statuses = dict(rollout.runs.values_list("wave", "status"))
    assert statuses == {0: "aborting", 1: "aborted"}
    assert "Pause</button>" not in page and "Resume</button>" not in page and f'{url}abort/"' not in page
    assert staff.post(f"{url}explode/").status_code == 404


def test_writes_need_the_sessions_csrf_token(operator, fleet):
    client = Client(enforce_csrf_checks=True)
    client.force_login(operator)
    assert client.post("/fleet-rollouts/new/", FORM).status_code == 403
    token = client.get("/fleet-rollouts/new/").cookies["csrftoken"].value
    assert client.post("/fleet-rollouts/new/", {**FORM, "csrfmiddlewaretoken": token}).status_code == 200
    rollout = create(operator)
    assert client.post(f"/fleet-rollouts/{rollout.pk}/pause/").status_code == 403
    assert FleetRollout.objects.get(pk=rollout.pk).status == "running"


def test_everyone_but_staff_gets_404_and_no_link(fleet, operator, owner, make_member, ui_for, tenant):
    rollout = create(operator)
    run = rollout.runs.first()
    pages = [
        "/fleet-rollouts/",
        "/fleet-rollouts/new/",
        f"/fleet-rollouts/{rollout.pk}/",
        f"/fleet-rollouts/{rollout.pk}/runs/{run.pk}/",
        f"/fleet-rollouts/{rollout.pk}/pause/",
        f"/fleet-rollouts/{rollout.pk}/abort/",
        f"/fleet-rollouts/{rollout.pk}/runs/{run.pk}/retry/",
        f"/fleet-rollouts/{rollout.pk}/runs/{run.pk}/approve/",
    ]
    for user in (owner, make_member("acme", "viewer")):  # a tenant's owner is no operator
        client = ui_for(user)
        for url in pages:
            assert client.get(url).status_code == 404, url
            assert client.post(url, {**FORM, "confirm": "1"}).status_code == 404, url
        assert 'href="/fleet-rollouts/"' not in client.get("/").content.decode()
    assert FleetRollout.objects.get(pk=rollout.pk).status == "running" and FleetRollout.objects.count() == 1
    for url in pages:
        response = Client().get(url)
        assert response.status_code == 302 and response["Location"].startswith("/login/"), url
    staff_in_tenant = make_member("acme", "viewer")
    staff_in_tenant.is_staff = True
    staff_in_tenant.save()
    assert 'href="/fleet-rollouts/">Rollouts</a>' in ui_for(staff_in_tenant).get("/").content.decode()


@pytest.fixture
def instant_upgrades(monkeypatch):
    """Simulated upgrade steps take no time and installs fail only where a test injects a fault."""
    monkeypatch.setenv("NVKE_SIM_UPGRADE_STEP_S", "")
    monkeypatch.setenv("NVKE_SIM_DRIVER_FAILURE_RATE", "0")


def test_an_operator_retries_a_failed_run_of_the_rollout_after_a_confirmation(
    staff, fleet, operator, instant_upgrades
):
    from audit.models import AuditEntry
    from nvke.providers.simulator.models import SimFault
    from tests.upgrades.conftest import drive

    victim = fleet["a"].nodes.order_by("name").first()
    SimFault.objects.create(operation="install_driver", target=victim.name, reason="DkmsBuildFailed")
    rollout = create(operator, pools_per_wave=2)
    run_a, run_b = rollout.runs.get(pool=fleet["a"]), rollout.runs.get(pool=fleet["b"])
    assert (drive(run_a).status, drive(run_b).status) == ("paused", "completed")  # failure budget 1
    rollouts.advance(rollout.pk)
    assert FleetRollout.objects.get(pk=rollout.pk).status == "paused"

    url = f"/fleet-rollouts/{rollout.pk}/runs/{run_a.pk}/retry/"
    page = staff.get(f"/fleet-rollouts/{rollout.pk}/").content.decode()
    row = re.search(rf'<tr data-rollout-pool="{fleet["a"].pk}">(.*?)</tr>', page, re.S)[1]
    assert f'data-run-action="retry" href="{url}"' in row
    assert page.count("data-run-action=") == 1  # b completed, c not started: nothing to offer
    confirm = staff.get(url).content.decode()
    assert (
        f"Retry the failed nodes of run #{run_a.pk}?" in confirm and "1 failed node goes through" in confirm
    )
    assert "The rollout stays paused" in confirm and f'action="{url}"' in confirm
    assert UpgradeRun.objects.get(pk=run_a.pk).status == "paused"  # asking changed nothing

    SimFault.objects.all().delete()
    response = staff.post(url, follow=True)
    assert response.redirect_chain == [(f"/fleet-rollouts/{rollout.pk}/", 302)]
    assert (
        f"Retry: run #{run_a.pk} is running. The rollout stays paused: resume it to go on with its waves."
        in response.content.decode()
    )
    assert UpgradeRun.objects.get(pk=run_a.pk).status == "running"
    entry = AuditEntry.objects.filter(object_type="upgrades.upgraderun", object_id=str(run_a.pk)).first()
    assert (entry.tenant_id, entry.actor_user_id, entry.actor) == (run_a.tenant_id, operator.pk, "operator")
    assert entry.changes["status"] == ["paused", "running"]

    # the service has the last word: nothing failed any more
    refused = staff.post(url, follow=True).content.decode()
    assert "Cannot retry a run that is running: it has no failed nodes to retry<" in refused
    assert staff.post(f"/fleet-rollouts/{rollout.pk}/runs/{run_a.pk}/pause/").status_code == 404
    other = FleetRollout.objects.create(target_release=rollout.target_release)
    assert staff.get(f"/fleet-rollouts/{other.pk}/runs/{run_a.pk}/retry/").status_code == 404
    assert drive(UpgradeRun.objects.get(pk=run_a.pk)).status == "completed"


def test_an_operator_approves_a_canary_from_the_runs_page(staff, fleet, operator, instant_upgrades):
    from audit.models import AuditEntry
    from upgrades.controller import tick

    rollout = create(operator, pools_per_wave=1, canary_nodes=1, canary_approval=True)
    run = rollout.runs.get(pool=fleet["a"])
    run_page = f"/fleet-rollouts/{rollout.pk}/runs/{run.pk}/"
    url = f"{run_page}approve/"
    for _ in range(15):
        run.refresh_from_db()
        tick(run.pk, run.tick_seq)
    assert "waiting for approval" in UpgradeRun.objects.get(pk=run.pk).message
    assert f'data-run-action="approve" href="{url}?back=run"' in staff.get(run_page).content.decode()
    assert (
        f'data-run-action="approve" href="{url}"'
        in staff.get(f"/fleet-rollouts/{rollout.pk}/").content.decode()
    )
    confirm = staff.get(f"{url}?back=run").content.decode()
    assert (
        f"Approve the canary of run #{run.pk}?" in confirm
        and '<input type="hidden" name="back" value="run">' in confirm
    )

    response = staff.post(url, {"back": "run"}, follow=True)
    assert response.redirect_chain == [(run_page, 302)]
    page = response.content.decode()
    assert f"Approve: run #{run.pk} is running." in page and "data-run-action" not in page
    run.refresh_from_db()
    assert run.approved_at is not None
    entry = AuditEntry.objects.filter(object_type="upgrades.upgraderun", object_id=str(run.pk)).first()
    assert entry.actor_user_id == operator.pk and entry.changes["approved_at"][0] is None


def test_the_rollout_page_reads_as_words_and_says_which_runs_wait_for_a_window(staff, fleet, operator):
    from tests.upgrades.test_maintenance import closed_now, settings_body
    from upgrades import maintenance
    from upgrades.api.serializers import MaintenanceSerializer

    checked = MaintenanceSerializer(data=settings_body(closed_now()))
    assert checked.is_valid()
    maintenance.replace(fleet["a"].cluster, "UTC", checked.validated_data["windows"], [])
    rollout = create(operator, pools_per_wave=2, max_unavailable="1", canary_approval=True)
    page = staff.get(f"/fleet-rollouts/{rollout.pk}/").content.decode()
    assert "{#" not in page and "#}" not in page  # no template comment printed as text
    strategy = re.search(r"<dt>Strategy</dt><dd[^>]*>(.*?)</dd>", page, re.S)[1]
    assert "Max unavailable: 1" in strategy and "Canary approval: yes" in strategy
    assert "max_unavailable" not in strategy and "{" not in strategy
    # Wave 1's runs are running, but prod's window opens in two hours: they say they wait, and why.
    run_a = rollout.runs.get(pool=fleet["a"])
    assert run_a.status == "running"
    assert f'data-run-status="{run_a.pk}">waiting<' in page
    waiting = re.search(rf'data-run-waiting="{run_a.pk}">([^<]*)<', page)[1]
    assert waiting.startswith("Outside every maintenance window")
