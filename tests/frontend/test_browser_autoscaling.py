"""The pool page's autoscaling in a real browser at laptop and phone width: turning it on with a delay,
and the autoscaler's decisions with their reasons as they arrive (live, without a reload)."""

import pytest
from playwright.sync_api import expect

from claims import allocator
from nodepools.autoscaler import autoscale
from nodepools.models import NodePool
from nodepools.services import reconcile
from nvke.tenancy.context import TenantContext

from .browser import BROWSER_TEST, NOT_RELOADED, mark, screenshot

pytestmark = BROWSER_TEST


@pytest.mark.parametrize("width", [1280, 390])
def test_autoscaling_on_the_pool_page(owner_page, tenant, make_cluster, make_pool, width):
    page = owner_page
    page.set_viewport_size({"width": width, "height": 900})
    cluster = make_cluster(tenant, "prod")
    pool = make_pool(cluster, name="l4", nodes=1, gpus_per_node=1)
    reconcile(pool.pk)
    page.goto(f"/pools/{pool.pk}/")
    section = page.locator("#autoscaling")
    expect(section.locator(f'[data-pool-autoscaling="{pool.pk}"]')).to_have_text("Off")

    section.get_by_label("Autoscale").check()
    section.get_by_label("Maximum nodes").fill("3")
    section.get_by_label("Scale-down delay (seconds)").fill("120")
    section.get_by_role("button", name="Save autoscaling").click()
    expect(page.locator(".messages")).to_contain_text("Node pool l4's autoscaling is on.")
    expect(section.locator(f'[data-pool-autoscaling="{pool.pk}"]')).to_have_text("On, within 0–3 nodes")
    pool.refresh_from_db()
    assert (pool.autoscaling, pool.max_nodes, pool.scale_down_delay_s) == (True, 3, 120)

    page.wait_for_function("Number(document.body.dataset.liveRefreshes) > 0")
    mark(page)
    context = TenantContext(tenant, "owner")
    for name in ("a", "b"):  # the second waits: the autoscaler's decision shows up on the page
        allocator.create_claim(context=context, cluster=cluster, name=name, kind="whole")
    autoscale(cluster.pk)
    row = section.locator('[data-autoscaler-decision="PendingClaims"]')
    expect(row).to_contain_text("1 pending claim would fit 1 new node: 1 → 2 nodes.")
    expect(row).to_contain_text("scale-up")
    assert page.evaluate(NOT_RELOADED)
    assert NodePool.objects.get(pk=pool.pk).node_count == 2
    screenshot(page, f"pool-autoscaling-{width}px")
    assert page.evaluate("document.documentElement.scrollWidth") <= width
