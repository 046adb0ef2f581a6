"""The users' first sharing scenario in a real browser: an A10 time-slicing pool made through the form,
then a training claim (8Gi, 70%) and three inference claims (2Gi, 20%) from the claim form, all on the
one card; the node page draws guaranteed shares on the GPU and ceilings on the pool's 200% budget."""

import re

from playwright.sync_api import expect

from claims.models import Claim
from nodepools.models import NodePool

from .browser import BROWSER_TEST, screenshot

pytestmark = BROWSER_TEST


def test_four_claims_share_one_a10(owner_page, tenant, make_cluster, celery_worker_process):
    page = owner_page
    cluster = make_cluster(tenant, "prod")
    page.goto(f"/clusters/{cluster.pk}/pools/new/")
    page.get_by_label("Name").fill("a10")
    page.get_by_label("GPU model").select_option("a10")
    page.get_by_label("GPUs per node").fill("1")
    page.get_by_label("Nodes", exact=True).fill("1")
    page.get_by_label("Maximum nodes").fill("1")
    page.get_by_label("Sharing mode").select_option("time-slicing")
    page.get_by_role("button", name="Create node pool").click()
    pool = NodePool.objects.get(name="a10")
    expect(page.locator(f'[data-pool-status="{pool.pk}"]')).to_have_text("ready")
    expect(page.locator("[data-pool-compute-sharing]")).to_contain_text("may add up to 200%")

    for name, memory, compute in [("train", "8Gi", "70")] + [(f"infer-{i}", "2Gi", "20") for i in range(3)]:
        page.goto(f"/clusters/{cluster.pk}/claims/new/")
        page.get_by_label("Name", exact=True).fill(name)
        page.get_by_label("Kind").select_option("fraction")
        page.get_by_label("GPU memory").fill(memory)
        page.get_by_label("Compute ceiling %").fill(compute)
        page.get_by_role("button", name="Create claim").click()
        claim = Claim.objects.get(name=name)
        expect(page.locator(f'[data-claim-status="{claim.pk}"]')).to_have_text("allocated")
    expect(page.locator(f'[data-claim-compute-held="{claim.pk}"]')).to_have_text(
        "10% guaranteed, up to 20% (its ceiling)"
    )
    expect(page.locator(".isolation")).to_contain_text("nothing holds its memory")

    page.get_by_role("link", name="a10").click()
    page.locator("#pool-nodes [data-node-row] a").first.click()
    expect(page.get_by_role("heading", name=re.compile("^Node "))).to_be_visible()
    train = Claim.objects.get(name="train")
    # Guarantees on the GPU's 100%; ceilings on the 200% budget, the GPU ending halfway along.
    expect(page.locator(f'[data-claim-compute="{train.pk}"]')).to_have_attribute(
        "style", "left: 0%; width: 10%"
    )
    expect(page.locator(f'[data-claim-ceiling="{train.pk}"]')).to_have_attribute(
        "style", "left: 0%; width: 35%"
    )
    expect(page.locator(".gpu-end")).to_have_attribute("style", "left: 50%")
    expect(page.locator(".gpu-figures", has_text="ceilings")).to_have_text("130% of 200% ceilings")
    expect(page.locator(".gpu-figures", has_text="guaranteed")).to_have_text("40% guaranteed")

    # At phone width the node page fits the screen: the bars take the card's width, nothing overflows.
    page.set_viewport_size({"width": 390, "height": 844})
    page.reload()
    expect(page.locator(f'[data-claim-ceiling="{train.pk}"]')).to_be_visible()
    assert page.evaluate("document.documentElement.scrollWidth") <= 390
    screenshot(page, "node-page-390px")
