"""A pool's dynamic rescaling policy in a real browser: read it, change it, see an error at its field."""

import re

from playwright.sync_api import expect

from telemetry.models import PoolRescaling

from .browser import BROWSER_TEST

pytestmark = BROWSER_TEST


def test_an_owner_changes_a_pools_rescaling_policy_on_its_page(owner_page, tenant, make_cluster, make_pool):
    pool = make_pool(make_cluster(tenant, "prod"), name="infer", sharing_mode="fractional")
    page = owner_page
    page.goto(f"/pools/{pool.pk}/")
    section = page.get_by_role("region", name="Dynamic rescaling")
    expect(section.locator("#rescaling-policy")).to_contain_text("usage ≥ 90% of its share for 30 s")
    expect(section.locator("#rescaling-policy")).to_contain_text("the platform defaults")

    # Idle at or above the pressure threshold: refused, the message at its field, the input kept.
    section.get_by_label("Pressure threshold").fill("70")
    section.get_by_label("Idle threshold").fill("75")
    section.get_by_role("button", name="Save rescaling policy").click()
    idle = page.get_by_label("Idle threshold")
    expect(idle).to_have_attribute("aria-invalid", "true")
    expect(idle).to_have_attribute("aria-describedby", re.compile(r"\bid_idle_percent_error\b"))
    expect(page.locator("#field-idle_percent .errorlist")).to_have_text(
        "“Idle threshold (% of a claim's share)”: 75% must be below "
        "“Pressure threshold (% of a claim's share)” (70%)."
    )
    expect(page.get_by_label("Pressure threshold")).to_have_value("70")
    assert not PoolRescaling.objects.exists()

    page.get_by_label("Idle threshold").fill("5")
    page.get_by_label("Grow claims under pressure").uncheck()
    page.get_by_role("button", name="Save rescaling policy").click()
    expect(page.locator(".messages")).to_contain_text("rescaling policy is saved")
    policy = page.locator("#rescaling-policy")
    expect(policy).to_contain_text("Off: claims never grow")
    expect(policy).to_contain_text("usage ≥ 70% of its share for 30 s")
    expect(policy).to_contain_text("usage ≤ 5% for 600 s")
    expect(policy).to_contain_text("this pool's own")
    expect(page.get_by_label("Grow claims under pressure")).not_to_be_checked()
    row = PoolRescaling.objects.get(pool=pool)
    assert (row.enabled, row.pressure_percent, row.idle_percent) == (False, 70, 5)
