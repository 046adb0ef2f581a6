"""Capacity shown before it is asked for, in a real browser at laptop and phone width: the pool form says
what the tenant may get of the chosen GPU in the cluster's region, warns while the pool asks for more,
and asks before creating one that would wait."""

import re

import pytest
from playwright.sync_api import expect

from nodepools.models import NodePool

from .browser import BROWSER_TEST, screenshot

pytestmark = BROWSER_TEST


@pytest.mark.parametrize("width", [1280, 390])
def test_the_pool_form_warns_before_a_pool_that_must_wait(owner_page, tenant, make_cluster, width):
    page = owner_page
    page.set_viewport_size({"width": width, "height": 900})
    cluster = make_cluster(tenant, "eu", region="eu-west-1")  # 32 L4s, no A10
    page.goto(f"/clusters/{cluster.pk}/pools/new/")
    hint = page.locator('[data-hint="capacity"]')
    warning = page.locator("#pool-capacity-warning")
    anyway = page.get_by_label("Create it even if some nodes must wait for GPUs")

    page.get_by_label("GPU model").select_option("a10")
    expect(hint).to_have_text("Region eu-west-1 has no A10 24GB GPUs.")
    expect(warning).to_have_text(
        "Region eu-west-1 has no A10 24GB GPUs: the pool's nodes would wait pending."
    )
    expect(anyway).to_be_visible()

    page.get_by_label("GPU model").select_option("l4")
    page.get_by_label("Name").fill("l4")
    page.get_by_label("GPUs per node").fill("8")
    page.get_by_label("Nodes", exact=True).fill("2")
    expect(hint).to_have_text(
        "In eu-west-1 you may add 32 L4 24GB GPUs now (the GPUs free in the region now)."
    )
    expect(warning).to_be_hidden()
    expect(anyway).to_be_hidden()

    page.get_by_label("Nodes", exact=True).fill("5")
    page.get_by_label("Maximum nodes").fill("9")
    expect(warning).to_contain_text(
        "This pool asks for 40 L4 24GB GPUs; you may get 32 in eu-west-1 now (the GPUs free in the region "
        "now): 1 of its 5 nodes would wait pending."
    )
    expect(warning).to_contain_text(
        "It may grow to 72 GPUs (maximum nodes × GPUs per node), more than the 64"
    )
    screenshot(page, f"pool-form-capacity-{width}px")
    assert page.evaluate("document.documentElement.scrollWidth") <= width

    page.get_by_label("Maximum nodes").fill("5")
    expect(warning).not_to_contain_text("It may grow")
    page.get_by_role("button", name="Create node pool").click()  # not ticked: the server asks first
    expect(page.locator("#field-wait_for_capacity .errorlist")).to_contain_text(
        "Tick this to create it anyway."
    )
    assert not NodePool.objects.exists()
    page.get_by_label("Create it even if some nodes must wait for GPUs").check()
    page.get_by_role("button", name="Create node pool").click()
    expect(page.get_by_role("heading", name=re.compile("^Node pool l4"))).to_be_visible()
    assert NodePool.objects.get(name="l4").node_count == 5
