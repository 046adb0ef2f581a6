"""A cluster's maintenance page in a real browser at laptop and phone width: a window and an exclusion
added through its forms, the next windows listed in the cluster's time zone, a bad rule refused naming
it, a window removed."""

import re

import pytest
from playwright.sync_api import expect

from upgrades.models import MaintenanceExclusion, MaintenanceWindow

from .browser import BROWSER_TEST, screenshot

pytestmark = BROWSER_TEST


@pytest.mark.parametrize("width", [1280, 390])
def test_windows_and_exclusions_are_set_on_the_maintenance_page(owner_page, tenant, make_cluster, width):
    page = owner_page
    page.set_viewport_size({"width": width, "height": 900})
    cluster = make_cluster(tenant, "prod")
    page.goto(f"/clusters/{cluster.pk}/")
    page.get_by_role("link", name="Maintenance windows").click()
    expect(page.locator("[data-maintenance-now]")).to_contain_text("No maintenance window is set")

    page.get_by_label("Time zone", exact=True).fill("Europe/Berlin")
    page.get_by_role("button", name="Save time zone").click()
    expect(page.get_by_role("heading", name="Next windows (Europe/Berlin)")).to_be_visible()

    page.get_by_label("Recurrence").fill("EVERY SATURDAY")
    page.get_by_role("button", name="Add window").click()
    # In the form's words, next to the field: no serializer path, no parser's Python text.
    error = page.locator("#field-recurrence .errorlist")
    expect(error).to_have_text(re.compile("^NVKE cannot read this rule. Write an RFC 5545 rule such as"))
    expect(page.locator("main")).not_to_contain_text("windows[")
    assert not MaintenanceWindow.objects.filter(cluster=cluster).exists()

    page.get_by_label("Recurrence").fill("FREQ=WEEKLY;BYDAY=SA")
    page.get_by_label("Start time").fill("02:00")
    page.get_by_label("Duration (minutes)").fill("240")
    page.get_by_role("button", name="Add window").click()
    next_windows = page.locator("[data-next-windows] li")
    expect(next_windows).to_have_count(5)
    expect(next_windows.first).to_contain_text("Sat")
    expect(next_windows.first).to_contain_text("02:00")

    page.get_by_label("First day").fill("2027-12-20")
    page.get_by_label("Last day").fill("2028-01-03")
    page.get_by_label("Scope").select_option("node")
    page.get_by_role("button", name="Add exclusion").click()
    expect(page.locator("[data-exclusion='0']")).to_contain_text("2028-01-03")
    assert page.evaluate("document.documentElement.scrollWidth") <= width
    screenshot(page, f"maintenance-{width}px")

    page.locator("[data-window='0']").get_by_role("button", name="Remove").click()
    expect(page.locator("[data-next-windows]")).to_have_text("No window is set.")
    assert not MaintenanceWindow.objects.filter(cluster=cluster).exists()
    assert MaintenanceExclusion.objects.filter(cluster=cluster, scope="node").count() == 1
