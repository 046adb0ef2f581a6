"""Driver upgrade pages through the Django test client: options and start form, run page with node
grid, history and controls (confirmation for abort and rollback), roles and tenancy."""

import pytest
from django.test import Client

from nodepools.models import Node
from nvke.providers.simulator.models import SimFault
from tests.frontend.helpers import STRATEGY_FORM
from upgrades.models import UpgradeDeferral, UpgradeRun

from .conftest import drive

pytestmark = pytest.mark.django_db
TARGET = "595.71.05"


@pytest.fixture
def browser(owner):
    client = Client()
    client.force_login(owner)
    return client


@pytest.fixture
def pool(make_upgrade_pool):
    return make_upgrade_pool(nodes=3)


def start(browser, pool, **fields):
    return browser.post(f"/pools/{pool.pk}/upgrade/", {"target_release": TARGET, **STRATEGY_FORM, **fields})


def test_pool_page_links_to_the_upgrade_page_with_options_and_refusals(browser, pool):
    assert f'href="/pools/{pool.pk}/upgrade/"' in browser.get(f"/pools/{pool.pk}/").content.decode()
    page = browser.get(f"/pools/{pool.pk}/upgrade/").content.decode()
    assert "Driver branch 535 reached end of life on 2026-06-30." in page
    assert "The pool already runs driver 580.105.08." in page
    assert f'<option value="{TARGET}">' in page and '<option value="535.230.02">' not in page


def test_start_form_starts_a_run_and_shows_its_page(browser, pool):
    response = start(browser, pool, canary_nodes=1)
    run = UpgradeRun.objects.get()
    assert response.status_code == 302 and response["Location"] == f"/upgrades/{run.pk}/"
    page = browser.get(f"/upgrades/{run.pk}/").content.decode()
    assert page.count('data-upgrade-node="') == 3 and page.count("upgrade-required</span>") == 3
    assert 'data-ws-url="/ws/events/?cluster=' in page and f'data-refresh-on="pool:{pool.pk}"' in page
    assert "Created" in page and "Pause</button>" in page and "canary</span>" in page


def test_refused_start_is_400_with_the_reason_on_the_field(browser, pool):
    response = start(browser, pool, target_release="535.230.02")
    assert response.status_code == 400 and "Select a valid choice" in response.content.decode()
    response = start(browser, pool, max_unavailable="0")
    assert (
        response.status_code == 400
        and "“Max unavailable” is at least 1 without a max surge" in response.content.decode()
    )
    assert not UpgradeRun.objects.exists()


@pytest.mark.parametrize("failed_nodes, kept", [("keep-cordoned", True), ("uncordon", False)])
def test_a_node_kept_cordoned_after_its_install_failed_is_marked(browser, pool, failed_nodes, kept):
    victim = Node.objects.filter(pool=pool).order_by("name").first()
    SimFault.objects.create(operation="install_driver", target=victim.name, reason="DkmsBuildFailed")
    assert (
        start(browser, pool, failure_budget=5, max_unavailable="2", failed_nodes=failed_nodes).status_code
        == 302
    )
    run = drive(UpgradeRun.objects.get())
    assert (run.status, run.failed_nodes) == ("failed", failed_nodes)
    page = browser.get(f"/upgrades/{run.pk}/").content.decode()
    cell = page[page.index(f'data-upgrade-node="{victim.name}"') :].split("</li>")[0]
    assert ("kept cordoned</span>" in cell) == kept
    assert ("node-kept-cordoned" in page) == kept and page.count("data-kept-cordoned") == int(kept)
    assert ("1 failed node out of service: retry or roll back" in page) == kept
    shown = "kept cordoned" if kept else "uncordoned at once"
    assert f'data-failed-nodes="{failed_nodes}">{shown}</dd>' in page
    assert "Retry failed nodes</button>" in page and "Roll back to 580.105.08" in page

    # a rollback reinstalls the old driver and takes the node back into service: no longer marked
    browser.post(f"/upgrades/{run.pk}/rollback/")
    drive(UpgradeRun.objects.get(rollback_of=run))
    assert "data-kept-cordoned" not in browser.get(f"/upgrades/{run.pk}/").content.decode()
    assert not Node.objects.get(pk=victim.pk).cordoned


def test_a_bad_failed_nodes_choice_is_400_on_its_field(browser, pool):
    response = start(browser, pool, failed_nodes="drain")
    page = response.content.decode()
    assert response.status_code == 400 and 'id="field-failed_nodes"' in page
    error = page[page.index('id="field-failed_nodes"') :].split("</div>")[0]
    assert "Select a valid choice. drain is not one of the available choices." in error
    assert not UpgradeRun.objects.exists()


def test_controls_with_confirmation_for_abort_and_rollback(browser, pool):
    start(browser, pool)
    run = UpgradeRun.objects.get()
    assert browser.post(f"/upgrades/{run.pk}/pause/").status_code == 302
    assert UpgradeRun.objects.get().status == "paused"
    refused = browser.post(f"/upgrades/{run.pk}/pause/", follow=True).content.decode()
    assert "Cannot pause a run that is paused." in refused
    confirm = browser.get(f"/upgrades/{run.pk}/abort/").content.decode()
    assert "Abort the upgrade of" in confirm and UpgradeRun.objects.get().status == "paused"
    browser.post(f"/upgrades/{run.pk}/abort/")
    assert drive(UpgradeRun.objects.get()).status == "aborted"
    assert "Roll back to 580.105.08" in browser.get(f"/upgrades/{run.pk}/").content.decode()
    assert "Roll " in browser.get(f"/upgrades/{run.pk}/rollback/").content.decode()
    assert browser.post(f"/upgrades/{run.pk}/rollback/").status_code == 302
    assert UpgradeRun.objects.filter(rollback_of=run).exists()
    assert browser.post(f"/upgrades/{run.pk}/explode/").status_code == 404


def test_viewer_sees_no_controls_and_cannot_post_them(pool, make_member, browser):
    start(browser, pool)
    run = UpgradeRun.objects.get()
    viewer = Client()
    viewer.force_login(make_member("acme", "viewer"))
    page = viewer.get(f"/upgrades/{run.pk}/").content.decode()
    assert (
        "Pause</button>" not in page
        and "Start upgrade" not in viewer.get(f"/pools/{pool.pk}/upgrade/").content.decode()
    )
    assert viewer.post(f"/upgrades/{run.pk}/pause/").status_code == 403
    assert start(viewer, pool).status_code == 403


def test_other_tenants_pages_are_404(pool, make_member, browser):
    start(browser, pool)
    run = UpgradeRun.objects.get()
    stranger = Client()
    stranger.force_login(make_member("globex", "owner"))
    assert stranger.get(f"/upgrades/{run.pk}/").status_code == 404
    assert stranger.post(f"/upgrades/{run.pk}/abort/").status_code == 404
    assert stranger.get(f"/pools/{pool.pk}/upgrade/").status_code == 404


def kept_run(browser, pool) -> tuple[UpgradeRun, Node]:
    """A finished run whose first node failed its install and is kept cordoned."""
    victim = Node.objects.filter(pool=pool).order_by("name").first()
    SimFault.objects.create(operation="install_driver", target=victim.name, reason="DkmsBuildFailed")
    assert start(browser, pool, failure_budget=5, max_unavailable="2").status_code == 302
    run = drive(UpgradeRun.objects.get())
    assert run.nodes.get(name=victim.name).kept_cordoned
    return run, victim


def cell(page: str, name: str) -> str:
    return page[page.index(f'data-upgrade-node="{name}"') :].split("</li>")[0]


def test_a_kept_node_is_returned_to_service_after_a_confirmation(browser, pool):
    run, victim = kept_run(browser, pool)
    url = f"/upgrades/{run.pk}/nodes/{victim.name}/uncordon/"
    page = browser.get(f"/upgrades/{run.pk}/").content.decode()
    assert f'href="{url}"' in cell(page, victim.name) and page.count("Return to service</a>") == 1
    assert "or return a repaired node to service" in page

    confirm = browser.get(url).content.decode()  # asks first, changes nothing
    assert f"Return {victim.name} to service?" in confirm and "does not validate its driver" in confirm
    assert "it reports driver 580.105.08" in confirm and f'action="{url}"' in confirm
    assert Node.objects.get(pk=victim.pk).cordoned

    response = browser.post(url, follow=True)
    page = response.content.decode()
    assert response.redirect_chain == [(f"/upgrades/{run.pk}/", 302)]
    assert f"Node {victim.name} is back in service; its driver was not validated." in page
    assert not Node.objects.get(pk=victim.pk).cordoned
    assert "data-returned-to-service" in cell(page, victim.name) and "data-kept-cordoned" not in page
    assert "returned to service, driver not validated" in cell(page, victim.name)
    assert "Return to service</a>" not in page and "data-returned-count>1 failed node back in service" in page
    assert "Done / failed / total</dt><dd>2 / 1 / 3</dd>" in page  # still counted failed
    assert "NodesFailed: 1 of 3 nodes failed; 1 node returned to service unvalidated." in page
    assert "ReturnedToService" in page  # in the history

    again = browser.post(url, follow=True).content.decode()  # the service has the last word
    assert (
        f"Node {victim.name} is not kept cordoned by this run: it was returned to service already." in again
    )
    assert browser.get(f"/upgrades/{run.pk}/nodes/nope/uncordon/").status_code == 404


def test_only_members_and_up_get_the_button_and_a_later_run_takes_it_away(browser, pool, make_member):
    run, victim = kept_run(browser, pool)
    url = f"/upgrades/{run.pk}/nodes/{victim.name}/uncordon/"
    viewer, member = Client(), Client()
    viewer.force_login(make_member("acme", "viewer"))
    member.force_login(make_member("acme", "member"))
    assert "Return to service</a>" not in viewer.get(f"/upgrades/{run.pk}/").content.decode()
    assert viewer.get(url).status_code == 403 and viewer.post(url).status_code == 403
    assert "Return to service</a>" in member.get(f"/upgrades/{run.pk}/").content.decode()
    stranger = Client()
    stranger.force_login(make_member("globex", "owner"))
    assert stranger.get(url).status_code == 404 and stranger.post(url).status_code == 404
    assert Node.objects.get(pk=victim.pk).cordoned

    browser.post(f"/upgrades/{run.pk}/rollback/")  # the rollback run holds its cordon now
    page = browser.get(f"/upgrades/{run.pk}/").content.decode()
    assert "data-kept-cordoned" in page and "Return to service</a>" not in page
    refused = browser.post(url, follow=True).content.decode()
    assert "took node" in refused and Node.objects.get(pk=victim.pk).cordoned


def test_outside_the_maintenance_window_the_form_says_so_and_starts_only_when_overridden(browser, api, pool):
    from .test_maintenance import closed_now, settings_body, url

    assert (
        "Maintenance: No maintenance window is set"
        in browser.get(f"/pools/{pool.pk}/upgrade/").content.decode()
    )
    assert api.put(url(pool.cluster), settings_body(closed_now())).status_code == 200
    page = browser.get(f"/pools/{pool.pk}/upgrade/").content.decode()
    assert "Maintenance: Outside every maintenance window. It may go on from" in page
    refused = start(browser, pool)
    # In the form's words: the checkbox's label, not the API's field.
    assert refused.status_code == 400 and "override_window: true" not in refused.content.decode()
    assert "tick “Start now even outside the maintenance window” and ask again" in refused.content.decode()
    assert not UpgradeRun.objects.exists()
    assert start(browser, pool, override_window="on").status_code == 302
    assert UpgradeRun.objects.get().window_override


def test_the_deferral_policy_is_set_refused_when_out_of_bounds_and_removed_on_the_upgrade_page(browser, pool):
    url = f"/pools/{pool.pk}/upgrade/"
    assert "No policy: upgrades drain nodes as their turn comes." in browser.get(url).content.decode()
    form = {
        "action": "deferral",
        "training_claims": "on",
        "claims_older_than_s": "",
        "utilization_above_percent": "80",
        "deadline_s": "5",  # the API's floor is 60 s
        "after_deadline": "stop",
    }
    refused = browser.post(url, form)
    assert refused.status_code == 400 and "greater than or equal to 60" in refused.content.decode()
    assert not UpgradeDeferral.objects.filter(pool=pool).exists()

    saved = browser.post(url, {**form, "deadline_s": "3600"})
    assert saved.status_code == 302 and saved["Location"].endswith("#deferral")
    policy = UpgradeDeferral.objects.get(pool=pool)
    assert (policy.utilization_above_percent, policy.deadline_s, policy.after_deadline) == (80, 3600, "stop")
    assert "A policy is set." in browser.get(url).content.decode()

    assert browser.post(url, {**form, "remove": "1"}).status_code == 302
    assert not UpgradeDeferral.objects.filter(pool=pool).exists()
    assert not UpgradeRun.objects.filter(pool=pool).exists()  # the start form was not taken for it
