"""The claim form in a real browser at laptop and phone width: only the chosen kind's section shows,
and an 8Gi + 70% training claim made there is guaranteed its 70% and marked training (the pool's
default of 10% applies only to a claim that names no guarantee)."""

import pytest
from playwright.sync_api import expect

from claims.models import Claim
from nodepools.services import reconcile

from .browser import BROWSER_TEST, screenshot

pytestmark = BROWSER_TEST


@pytest.mark.parametrize("width", [1280, 390])
def test_a_training_claim_with_its_guarantee_from_the_form(
    owner_page, tenant, make_cluster, make_pool, width
):
    page = owner_page
    page.set_viewport_size({"width": width, "height": 900})
    cluster = make_cluster(tenant, "prod")
    pool = make_pool(
        cluster, name="a10", gpu_model="a10", nodes=1, gpus_per_node=1, sharing_mode="time-slicing",
        compute_oversubscription_percent=200, default_guaranteed_percent=10,
    )  # fmt: skip
    reconcile(pool.pk)
    page.goto(f"/clusters/{cluster.pk}/claims/new/")
    whole = page.get_by_role("group", name="Whole GPUs")
    fraction = page.get_by_role("group", name="GPU fraction")
    page.get_by_label("Kind").select_option("whole")
    expect(whole).to_be_visible()
    expect(fraction).to_be_hidden()
    page.get_by_label("Kind").select_option("fraction")
    expect(fraction).to_be_visible()
    expect(whole).to_be_hidden()
    expect(page.get_by_role("group", name="MIG slice")).to_be_hidden()

    page.get_by_label("Name", exact=True).fill("train")
    page.get_by_label("GPU memory").fill("8Gi")
    page.get_by_label("Compute ceiling %").fill("70")
    page.get_by_label("Guaranteed compute %").fill("70")
    page.get_by_label("Training job").check()
    page.get_by_label("A10 24GB").check()
    assert page.evaluate("document.documentElement.scrollWidth") <= width
    screenshot(page, f"claim-form-{width}px")
    page.get_by_role("button", name="Create claim").click()

    claim = Claim.objects.get(name="train")
    expect(page.locator(f'[data-claim-status="{claim.pk}"]')).to_have_text("allocated")
    expect(page.locator(f'[data-claim-compute-held="{claim.pk}"]')).to_have_text("70%")
    assert (claim.guaranteed_percent, claim.training, claim.allowed_models) == (70, True, ["a10"])
    # The claim's page fits the screen: its sizing hints (vLLM's long flag) wrap, nothing overflows.
    expect(page.locator("[data-claim-sizing]")).to_contain_text("--gpu-memory-utilization")
    assert page.evaluate("document.documentElement.scrollWidth") <= width
    screenshot(page, f"claim-page-{width}px")
