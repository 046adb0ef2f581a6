"""Telemetry pages in a real browser: the charts open with the kept 10 s history already drawn (not
empty on every load), and a heatmap cell opens its GPU's page."""

import datetime

from django.utils import timezone
from playwright.sync_api import expect

from nodepools.models import Gpu
from telemetry.history import FINE_S
from telemetry.models import MetricPoint

from .browser import BROWSER_TEST, screenshot
from .test_browser_upgrades_telemetry import legend_value, telemetry_pool  # noqa: F401

pytestmark = BROWSER_TEST


def keep_history(gpu: Gpu, utilizations: list[float]) -> None:
    """10 s points of the last minute, oldest first, as the rollup keeps them."""
    newest = timezone.now().replace(microsecond=0) - datetime.timedelta(seconds=FINE_S)
    MetricPoint.objects.bulk_create(
        MetricPoint(
            gpu=gpu, resolution_s=FINE_S, samples=10, utilization=util, memory_used_mib=2048,
            temperature_c=50, power_w=60, sm_clock_mhz=1800,
            bucket=newest - datetime.timedelta(seconds=FINE_S * (len(utilizations) - 1 - i)),
        )
        for i, util in enumerate(utilizations)
    )  # fmt: skip


def test_a_gpu_chart_opens_with_its_kept_history(owner_page, telemetry_pool):  # noqa: F811
    page = owner_page
    gpu = Gpu.objects.filter(node__pool=telemetry_pool).order_by("index").first()
    keep_history(gpu, [10, 20, 30, 40, 50, 60])
    page.goto(f"/telemetry/gpus/{gpu.pk}/")
    card = page.locator(f'[data-series="gpu-{gpu.pk}"]')
    # No sample has arrived on the stream: what shows is the history, newest last.
    expect(card.locator('[data-value="util"]')).to_have_text("60 %")
    expect(legend_value(card, "Utilization")).to_have_text("60 %")
    plot = card.locator(".u-over")
    box = plot.bounding_box()
    plot.hover(position={"x": 1, "y": box["height"] / 2})  # the oldest point, a minute back
    expect(legend_value(card, "Utilization")).to_have_text("10 %")
    screenshot(page, "telemetry-gpu-history")


def test_a_heatmap_cell_opens_its_gpu(owner_page, telemetry_pool):  # noqa: F811
    page = owner_page
    first = Gpu.objects.filter(node__pool=telemetry_pool).order_by("pk").first()  # the first cell
    page.goto(f"/telemetry/clusters/{telemetry_pool.cluster_id}/")
    expect(page.locator("[data-telemetry-state]")).to_have_text("Live: 2 GPUs.")
    page.locator("[data-heatmap]").click(position={"x": 2, "y": 2})
    expect(page).to_have_url(f"/telemetry/gpus/{first.pk}/")
