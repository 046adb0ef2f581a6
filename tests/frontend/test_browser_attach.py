"""Attaching a cluster in a real browser: the page shows the RBAC manifest, a refused check is shown
with its reason next to the field, and an accepted cluster's page shows its version and GPU stack."""

import pytest
from playwright.sync_api import expect

from clusters.models import Cluster

from .browser import BROWSER_TEST, LAPTOP, screenshot

pytestmark = BROWSER_TEST


@pytest.mark.parametrize("viewport", [LAPTOP])
def test_attach_a_cluster(owner_page, catalog, gpu_cluster, viewport):
    page = owner_page
    page.set_viewport_size(viewport)
    page.goto("/clusters/")
    page.get_by_role("link", name="Attach a cluster").click()
    expect(page.get_by_role("heading", name="Attach a cluster")).to_be_visible()
    page.get_by_text("What the manifest grants").click()
    expect(page.locator("[data-rbac-manifest]")).to_contain_text("pods/eviction")
    page.get_by_label("Name").fill("onprem")
    page.get_by_label("API endpoint").fill(gpu_cluster.url)
    page.get_by_label("Bearer token").fill("not-the-token")
    page.get_by_label("CA bundle (PEM)").fill(gpu_cluster.ca_bundle)
    page.get_by_role("button", name="Check and attach").click()
    expect(page.locator("#field-token .errorlist")).to_contain_text("401")
    expect(page.locator("[data-failed-check='reachable']")).to_contain_text("Unauthorized")
    screenshot(page, "attach-refused")
    assert not Cluster.objects.exists()

    page.get_by_label("Bearer token").fill(gpu_cluster.token)
    page.get_by_label("CA bundle (PEM)").fill(gpu_cluster.ca_bundle)  # not kept: it may be a secret too
    page.get_by_role("button", name="Check and attach").click()
    expect(page.get_by_role("heading", name="onprem")).to_be_visible()
    expect(page.locator("[data-observed='version']")).to_have_text("v1.34.2")
    expect(page.locator("[data-observed='gpu-stack']")).to_contain_text("NVIDIA-H100-80GB-HBM3")
    expect(page.locator("[data-observed='features']")).to_contain_text("yes (NVIDIADriver objects)")
    screenshot(page, "attached-cluster")
    assert Cluster.objects.get(name="onprem").attached

    page.get_by_role("link", name="Detach cluster").click()
    expect(page.get_by_role("heading", name="Detach cluster onprem and release its 0 pools?")).to_be_visible()
    page.get_by_role("button", name="Detach cluster").click()
    expect(page.get_by_role("heading", name="Clusters", exact=True)).to_be_visible()
    assert Cluster.objects.get(name="onprem").status == "deleting"  # a worker would now detach it
