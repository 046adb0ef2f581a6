"""A new tenant finds how to run a workload: the getting-started steps, then the claim's pod to copy, at
laptop and phone width in Chromium."""

from playwright.sync_api import expect

from claims.allocator import create_claim
from nvke.tenancy.context import TenantContext

from .browser import BROWSER_TEST, screenshot

pytestmark = BROWSER_TEST


def test_from_getting_started_to_the_pod_that_uses_a_claim(owner_page, tenant, make_cluster, make_pool):
    page = owner_page
    page.goto("/getting-started/")
    expect(page.get_by_role("heading", name="A cluster")).to_be_visible()
    expect(page.locator(".step-done")).to_have_count(0)

    cluster = make_cluster(tenant, "prod")
    make_pool(cluster, sharing_mode="time-slicing")
    claim = create_claim(
        context=TenantContext(tenant, "owner"),
        cluster=cluster,
        name="infer",
        namespace="ml",
        kind="fraction",
        gpu_memory_mib=4096,
        compute_percent=30,
    )
    page.reload()
    expect(page.locator(".step-done")).to_have_count(3)  # cluster, pool, claim
    screenshot(page, "getting-started-1280px")
    page.get_by_role("link", name="Make a claim").wait_for()

    page.goto(f"/claims/{claim.pk}/")
    template = page.locator(f"[data-claim-pod-template='{claim.pk}']")
    expect(template).to_contain_text("resourceClaimName: infer")
    expect(template).to_contain_text("name: nvke.io/placement")
    expect(page.get_by_role("link", name="attach a real cluster")).to_be_visible()
    page.set_viewport_size({"width": 390, "height": 844})
    assert page.evaluate("document.documentElement.scrollWidth") <= 390
    screenshot(page, "claim-use-390px")
    page.goto("/getting-started/")
    assert page.evaluate("document.documentElement.scrollWidth") <= 390
    screenshot(page, "getting-started-390px")
