"""A claim group in a real browser at laptop and phone width: from the claims page to the groups list,
to the group's page with each member on the topology, to a member's page and back; nothing overflows."""

import pytest
from playwright.sync_api import expect

from .browser import BROWSER_TEST, screenshot
from .test_groups import cluster, gang  # noqa: F401  (the fixture: three nodes on two NVLink domains)

pytestmark = BROWSER_TEST


@pytest.mark.parametrize("width", [1280, 390])
def test_a_groups_members_on_the_topology(owner_page, tenant, cluster, width):  # noqa: F811
    page = owner_page
    page.set_viewport_size({"width": width, "height": 900})
    gang(tenant, cluster, "llm")
    gang(tenant, cluster, "stuck")
    page.goto(f"/clusters/{cluster.pk}/claims/")
    page.get_by_role("link", name="Claim groups").click()
    expect(page.get_by_role("heading", name="Claim groups of prod")).to_be_visible()
    assert page.evaluate("document.documentElement.scrollWidth") <= width
    page.get_by_role("link", name="llm", exact=True).click()

    expect(page.locator("[data-group-summary]")).to_contain_text("2 of 2 members")
    members = page.locator("[data-member]")
    expect(members).to_have_count(2)
    for row in (members.nth(0), members.nth(1)):
        expect(row).to_contain_text("nvl-a")
        expect(row).to_contain_text("us-east-1a")
    assert page.evaluate("document.documentElement.scrollWidth") <= width
    screenshot(page, f"group-page-{width}px")

    page.get_by_role("link", name="llm-0").click()
    expect(page.locator("[data-claim-group]")).to_contain_text("default/llm")
    page.locator("[data-claim-group]").get_by_role("link").click()
    expect(page.get_by_role("heading", name="Claim group default/llm")).to_be_visible()

    page.goto(f"/clusters/{cluster.pk}/groups/")
    page.get_by_role("link", name="stuck", exact=True).click()
    expect(page.locator("[data-group-reason]")).to_contain_text("Group default/stuck holds nothing")
    assert page.evaluate("document.documentElement.scrollWidth") <= width
    screenshot(page, f"group-waiting-{width}px")
