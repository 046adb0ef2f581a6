"""The queue pages in a real browser at laptop and phone width: the cluster page links to its queues,
the list shows each queue's nominal, used and borrowed GPUs, and a queue's page shows what it borrows,
what its cohort peers lend, and its pending claims by priority; nothing overflows the screen."""

import pytest
from playwright.sync_api import expect

from claims.allocator import create_claim
from claims.models import Queue
from nodepools.services import reconcile
from nvke.tenancy.context import TenantContext

from .browser import BROWSER_TEST, screenshot

pytestmark = BROWSER_TEST

H100 = "h100-sxm5-80gb"


@pytest.mark.parametrize("width", [1280, 390])
def test_a_queue_borrowing_from_its_cohort(owner_page, tenant, make_cluster, make_pool, width):
    page = owner_page
    page.set_viewport_size({"width": width, "height": 900})
    cluster = make_cluster(tenant, "prod")
    reconcile(make_pool(cluster, name="h100", gpu_model=H100, nodes=2, gpus_per_node=8).pk)
    train, serve = (
        Queue.objects.create(
            tenant=tenant, cluster=cluster, name=name, cohort="lab", quotas=[{"gpu_model": H100, "gpus": 8}]
        )
        for name in ("train", "serve")
    )
    context = TenantContext(tenant, "owner")
    for i, priority in enumerate([5, 5, 0]):  # 8 nominal + 4 borrowed placed, the third waits
        create_claim(
            context=context,
            cluster=cluster,
            name=f"t{i}",
            kind="whole",
            gpus=6,
            priority=priority,
            queue=train,
        )

    page.goto(f"/clusters/{cluster.pk}/")
    page.get_by_role("link", name="Queues →").click()
    expect(page.get_by_role("heading", name="Queues of prod")).to_be_visible()
    row = page.locator(f'[data-queue-row="{train.pk}"]')
    expect(row).to_contain_text("lab")
    expect(row.locator("td.num").nth(2)).to_have_text("4")  # borrowed
    assert page.evaluate("document.documentElement.scrollWidth") <= width
    screenshot(page, f"queue-list-{width}px")

    row.get_by_role("link", name="train").click()
    expect(page.get_by_role("heading", name="Queue train")).to_be_visible()
    expect(page.locator("[data-queue-cohort]")).to_contain_text("with serve")
    expect(page.locator(f'[data-queue-model="{H100}"] [data-borrowed]')).to_have_text("4")
    expect(page.locator('[data-pending-priority="0"]')).to_contain_text("6")
    assert page.evaluate("document.documentElement.scrollWidth") <= width
    screenshot(page, f"queue-page-{width}px")
    page.get_by_role("link", name="serve").click()
    expect(page.locator(f'[data-queue-model="{H100}"] [data-lent]')).to_have_text("4")
