"""A cluster's versions page in a real browser at laptop and phone width: each catalog version with the
skew rule that refuses it, the control plane upgraded a minor, then a pool's machines replaced through its
run page, first for the new Kubernetes version, then for another node image. The test process plays the
worker's part (the control plane's step, the run's ticks), as the other browser tests do."""

import re

import pytest
from playwright.sync_api import expect

from nodepools.models import Node
from nodepools.services import reconcile
from upgrades import control_plane
from upgrades.models import UpgradeRun

from .browser import BROWSER_TEST, screenshot
from .test_browser_upgrades_telemetry import tick_to_the_end

pytestmark = BROWSER_TEST


@pytest.mark.parametrize("width", [1280, 390])
def test_the_control_plane_then_a_pool_move_a_minor_and_the_pool_changes_image_from_the_versions_page(
    owner_page, tenant, make_cluster, make_pool, monkeypatch, width
):
    monkeypatch.setenv("NVKE_SIM_UPGRADE_STEP_S", "")
    page = owner_page
    page.set_viewport_size({"width": width, "height": 900})
    cluster = make_cluster(tenant, "prod")
    pool = make_pool(cluster, name="gpu", gpu_model="l4", nodes=2, gpus_per_node=2)
    reconcile(pool.pk)

    page.goto(f"/clusters/{cluster.pk}/")
    page.get_by_role("link", name="Versions and upgrades").click()
    expect(page.locator("[data-control-plane-version]")).to_have_text("Kubernetes 1.35")
    expect(page.locator("[data-version='1.34'] [data-rule]")).to_have_attribute("data-rule", "downgrade")
    expect(page.locator("[data-version='1.36']")).to_contain_text("Yes")
    pool_card = page.locator("[data-pool='gpu']")
    expect(pool_card.locator("[data-pool-refusal]")).to_contain_text(
        "a kubelet is never newer than kube-apiserver"
    )
    assert page.evaluate("document.documentElement.scrollWidth") <= width
    screenshot(page, f"kubernetes-versions-{width}px")

    form = page.locator("[data-form='control-plane']")
    form.get_by_label("Upgrade to").select_option("1.36")
    form.get_by_role("button", name="Upgrade the control plane").click()
    expect(page.locator(".messages")).to_contain_text("Control plane upgrade to 1.36 started.")
    expect(page.locator("[data-control-plane-target]")).to_have_text("Kubernetes 1.36")
    assert control_plane.step(cluster.pk)  # the worker's step
    page.reload()
    expect(page.locator("[data-control-plane-version]")).to_have_text("Kubernetes 1.36")
    expect(page.locator("[data-control-plane-reason]")).to_contain_text("Upgraded")

    pool_form = page.locator(f"[data-form='pool-{pool.pk}']")
    pool_form.get_by_label("Upgrade to").select_option("1.36")
    pool_form.get_by_label("Max unavailable").fill("1")
    pool_form.get_by_role("button", name="Upgrade gpu").click()
    run = UpgradeRun.objects.get(pool=pool, kind="kubernetes")
    expect(page).to_have_url(re.compile(rf"/upgrades/{run.pk}/$"))
    expect(page.get_by_role("heading", name=re.compile("Upgrade to Kubernetes 1.36"))).to_be_visible()
    tick_to_the_end(page, run, "completed")
    expect(page.get_by_role("link", name=re.compile("Roll back"))).to_have_count(0)  # no downgrades
    assert set(Node.objects.filter(pool=pool).values_list("kubelet_version", flat=True)) == {"v1.36.0"}
    page.goto(f"/clusters/{cluster.pk}/versions/")
    expect(pool_card.locator("[data-pool-version]")).to_have_text("1.36")

    pool_card.locator("summary").click()
    expect(pool_card.locator("[data-image='ubuntu-2004-gpu-2023-04']")).to_contain_text("Yes")
    image_form = page.locator(f"[data-form='image-{pool.pk}']")
    image_form.get_by_label("Change image to").select_option("ubuntu-2204-gpu-2025-06")
    image_form.get_by_label("Max unavailable").fill("1")
    image_form.get_by_role("button", name="Change the image of gpu").click()
    run = UpgradeRun.objects.get(pool=pool, kind="image")
    expect(page).to_have_url(re.compile(rf"/upgrades/{run.pk}/$"))
    expect(
        page.get_by_role("heading", name=re.compile("Upgrade to image ubuntu-2204-gpu-2025-06"))
    ).to_be_visible()
    tick_to_the_end(page, run, "completed")
    page.goto(f"/clusters/{cluster.pk}/versions/")
    expect(pool_card.locator("[data-pool-image]")).to_have_text("ubuntu-2204-gpu-2025-06")
