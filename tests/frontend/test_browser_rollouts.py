"""A fleet rollout in a real browser (see browser.py): an operator previews and starts one through the
form, then watches its waves follow over the operators' websocket without a reload. The test process
ticks the first wave's run (as tests/upgrades do); the second wave, started when the first completed, is
ticked by this process's own ticker thread (the embedded scheduler: tasks are eager here)."""

import re

import pytest
from playwright.sync_api import expect

from nodepools.models import NodePool
from nodepools.services import reconcile
from upgrades.events import publish_rollout, publish_run
from upgrades.models import FleetRollout, UpgradeRun

from .browser import BROWSER_TEST, LAPTOP, NOT_RELOADED, TABLET, mark, screenshot, sign_in, tick_once, until

pytestmark = BROWSER_TEST
TARGET = "600.10.01"  # hopper_only_driver: no Blackwell


@pytest.fixture
def fleet(monkeypatch, settings, tenant, make_cluster, make_pool, hopper_only_driver) -> dict[str, NodePool]:
    """Two L4 pools and a B200 pool (which cannot take the target) with real simulator nodes; upgrade
    steps take no time and never fail, and this process's ticker ticks often."""
    monkeypatch.setenv("NVKE_SIM_UPGRADE_STEP_S", "")
    monkeypatch.setenv("NVKE_SIM_DRIVER_FAILURE_RATE", "0")
    settings.NVKE_UPGRADE_TICK_S = 0.05
    cluster = make_cluster(tenant, "prod")
    pools = {
        "a": make_pool(cluster, name="a", nodes=2, gpus_per_node=2),
        "b": make_pool(cluster, name="b", nodes=2, gpus_per_node=2),
        "big": make_pool(cluster, name="big", gpu_model="b200-sxm-180gb", nodes=1, gpus_per_node=8),
    }
    for pool in pools.values():
        reconcile(pool.pk)
    return pools


def badge(page, attr: str, pk: int) -> str:
    return f"document.querySelector('[{attr}=\"{pk}\"]').textContent"


def fits_the_width(page) -> bool:
    return page.evaluate("document.documentElement.scrollWidth <= window.innerWidth")


def test_create_a_rollout_through_the_form_and_watch_its_waves_live(page, fleet, django_user_model):
    operator = django_user_model.objects.create_user("operator", password="pw-secret-123", is_staff=True)
    sign_in(page, operator)
    page.goto("/")
    page.get_by_role("navigation", name="Main").get_by_role("link", name="Rollouts").click()
    expect(page.get_by_role("heading", name="Fleet rollouts")).to_be_visible()
    page.get_by_role("link", name="New rollout").click()

    page.get_by_label("Target driver release").select_option(TARGET)
    page.get_by_label("GPU model").select_option("")  # any: the B200 pool matches and is skipped
    page.get_by_label("Pools per wave").fill("1")
    page.get_by_label("Max unavailable").fill("1")
    page.get_by_label("Canary bake (s)").fill("0")
    page.get_by_role("button", name="Preview").click()
    expect(page.get_by_role("heading", name="Preview: 2 pools in 2 waves, 1 skipped")).to_be_visible()
    skipped = page.locator(f'[data-skipped-pool="{fleet["big"].pk}"]')
    expect(skipped).to_contain_text("architecture")
    expect(skipped).to_contain_text("does not support Blackwell")
    assert not FleetRollout.objects.exists()  # a preview writes nothing
    for label, size in (("rollout-preview-1280", LAPTOP), ("rollout-preview-768", TABLET)):
        page.set_viewport_size(size)
        assert fits_the_width(page), label
        screenshot(page, label)
    page.set_viewport_size(LAPTOP)

    page.get_by_role("button", name="Start rollout").click()
    rollout = FleetRollout.objects.get()
    expect(page).to_have_url(re.compile(rf"/fleet-rollouts/{rollout.pk}/$"))
    expect(page.locator(".messages")).to_contain_text(f"Rollout to {TARGET} started.")
    first, second = (UpgradeRun.objects.get(pool=fleet[name]) for name in ("a", "b"))
    assert (first.wave, second.wave) == (0, 1)
    expect(page.locator(f'[data-rollout-status="{rollout.pk}"]')).to_have_text("running")
    expect(page.locator(f'[data-run-status="{first.pk}"]')).to_have_text("running")
    expect(page.locator(f'[data-run-status="{second.pk}"]')).to_have_text("pending")
    expect(page.locator("body")).to_have_attribute("data-live-state", "open")
    mark(page)

    # The first wave's run goes to the end; the page sees it complete and the second wave start.
    while tick_once(first):
        pass
    assert UpgradeRun.objects.get(pk=first.pk).status == "completed"
    until(
        page,
        f"{badge(page, 'data-run-status', first.pk)} === 'completed'",
        lambda: publish_run(UpgradeRun.objects.get(pk=first.pk)),
    )
    until(
        page,
        f"{badge(page, 'data-run-status', second.pk)} !== 'pending'",
        lambda: publish_run(UpgradeRun.objects.get(pk=second.pk)),
    )
    assert page.evaluate(NOT_RELOADED)
    screenshot(page, "rollout-second-wave")

    # The ticker finishes the second wave, and with it the rollout.
    until(
        page,
        f"{badge(page, 'data-rollout-status', rollout.pk)} === 'completed'",
        lambda: publish_rollout(FleetRollout.objects.get(pk=rollout.pk)),
        timeout_s=60,
    )
    assert FleetRollout.objects.get(pk=rollout.pk).status == "completed"
    expect(page.locator(f'[data-run-status="{second.pk}"]')).to_have_text("completed")
    expect(page.locator("#rollout-summary")).to_contain_text("2 done · 0 running · 0 failed · 1 skipped")
    expect(page.get_by_role("button", name="Pause")).to_have_count(0)
    assert page.evaluate(NOT_RELOADED)
    for label, size in (("rollout-completed-1280", LAPTOP), ("rollout-completed-768", TABLET)):
        page.set_viewport_size(size)
        assert fits_the_width(page), label
        screenshot(page, label)
    page.set_viewport_size(LAPTOP)

    page.get_by_role("link", name=f"Run #{second.pk}").click()
    expect(page.locator(f'[data-run-status="{second.pk}"]')).to_have_text("completed")
    expect(page.locator("#node-grid .node-state")).to_have_text(["upgrade-done", "upgrade-done"])
