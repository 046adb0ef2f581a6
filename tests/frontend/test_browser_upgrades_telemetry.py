"""Driver upgrades and live telemetry in a real browser: Chromium through Playwright on a live uvicorn
(see browser.py). The test process plays the services' part: it ticks the upgrade run (as tests/upgrades
do) and writes GPU samples into Redis (as the ingest API does); the page hears of both over its
websocket and must change without a reload."""

import re
import time

import pytest
from playwright.sync_api import expect

from nodepools.models import Gpu, Node, NodePool
from nodepools.services import reconcile
from nvke.providers.simulator.models import SimFault
from telemetry import store
from upgrades.events import publish_run
from upgrades.models import UpgradeRun

from .browser import BROWSER_TEST, NOT_RELOADED, mark, screenshot, sign_in, tick_once, until

pytestmark = BROWSER_TEST
TARGET = "595.71.05"  # an L4 pool on 580.105.08 may move to it (tests/upgrades)


# --- driver upgrades ---------------------------------------------------------------------------------


@pytest.fixture
def upgrade_pool(monkeypatch, tenant, make_cluster, make_pool) -> NodePool:
    """Three L4 nodes on 580.105.08 with real simulator nodes; simulated upgrade steps take no time and
    never fail (the ticks run in this process, so its environment is the one that counts)."""
    monkeypatch.setenv("NVKE_SIM_UPGRADE_STEP_S", "")
    monkeypatch.setenv("NVKE_SIM_DRIVER_FAILURE_RATE", "0")
    pool = make_pool(make_cluster(tenant, "prod"), name="gpu", gpu_model="l4", nodes=3, gpus_per_node=2)
    reconcile(pool.pk)
    return pool


def grid_states(page) -> dict[str, str]:
    return page.evaluate(
        """() => Object.fromEntries(Array.from(document.querySelectorAll("[data-upgrade-node]"))
            .map(cell => [cell.dataset.upgradeNode, cell.querySelector(".node-state").textContent]))"""
    )


def tick_to_the_end(page, run: UpgradeRun, status: str) -> None:
    """Tick the run until it settles in `status`, then wait for the page's badge to say so live."""
    for _ in range(200):
        if not tick_once(run):
            break
    run.refresh_from_db()
    assert run.status == status
    until(
        page,
        f"document.querySelector('[data-run-status=\"{run.pk}\"]').textContent === '{status}'",
        lambda: publish_run(UpgradeRun.objects.get(pk=run.pk)),
    )


def test_start_an_upgrade_watch_the_grid_live_and_pause_then_resume(owner_page, upgrade_pool):
    pool, page = upgrade_pool, owner_page
    names = sorted(Node.objects.filter(pool=pool).values_list("name", flat=True))
    page.goto(f"/pools/{pool.pk}/")
    page.get_by_role("link", name="Driver upgrade").first.click()
    expect(page.get_by_role("heading", name=f"Driver upgrade of {pool.name}")).to_be_visible()
    page.get_by_label("Target driver release").select_option(TARGET)
    page.get_by_label("Max unavailable").fill("1")
    page.get_by_label("Canary nodes").fill("0")
    page.get_by_label("Canary bake (s)").fill("0")
    page.get_by_role("button", name="Start upgrade").click()

    run = UpgradeRun.objects.get(pool=pool)
    expect(page).to_have_url(re.compile(rf"/upgrades/{run.pk}/$"))
    expect(page.locator(".messages")).to_contain_text(f"Upgrade of {pool.name} to {TARGET} started.")
    status = page.locator(f'[data-run-status="{run.pk}"]')
    expect(status).to_have_text("running")
    cells = page.locator("#node-grid [data-upgrade-node]")
    expect(cells).to_have_count(3)
    assert grid_states(page) == dict.fromkeys(names, "upgrade-required")
    expect(page.locator("body")).to_have_attribute("data-live-state", "open")
    mark(page)

    # The first ticks take one node (max unavailable 1) out of service; the grid follows live.
    for _ in range(2):
        assert tick_once(run)
    in_flight = [row.name for row in run.nodes.exclude(state="upgrade-required")]
    assert len(in_flight) == 1, in_flight
    moved = run.nodes.get(name=in_flight[0]).state
    until(
        page,
        f"document.querySelector('[data-upgrade-node=\"{in_flight[0]}\"] .node-state')"
        f".textContent === '{moved}'",
        lambda: publish_run(UpgradeRun.objects.get(pk=run.pk)),
    )
    expect(page.locator(f'[data-upgrade-node="{in_flight[0]}"]')).to_have_class(re.compile(f"node-{moved}"))
    expect(page.locator("#run-history")).to_contain_text("Cordoned")
    assert page.evaluate(NOT_RELOADED)
    screenshot(page, "upgrade-run-first-node-in-flight")

    # Pause through the page's control (a plain form: the page reloads with the result).
    page.get_by_role("button", name="Pause").click()
    expect(page.locator(".messages")).to_contain_text("Pause: run is paused.")
    expect(status).to_have_text("paused")
    assert UpgradeRun.objects.get(pk=run.pk).status == "paused"
    expect(page.get_by_role("button", name="Pause")).to_have_count(0)
    expect(page.locator("body")).to_have_attribute("data-live-state", "open")
    mark(page)
    # Paused: the node in flight finishes, no other node starts.
    for _ in range(50):
        if not tick_once(run) or run.nodes.get(name=in_flight[0]).state == "upgrade-done":
            break
    assert run.nodes.get(name=in_flight[0]).state == "upgrade-done"
    assert run.nodes.filter(state="upgrade-required").count() == 2
    until(
        page,
        f"document.querySelector('[data-upgrade-node=\"{in_flight[0]}\"] .node-state')"
        ".textContent === 'upgrade-done'",
        lambda: publish_run(UpgradeRun.objects.get(pk=run.pk)),
    )
    assert page.evaluate(NOT_RELOADED)

    page.get_by_role("button", name="Resume").click()
    expect(page.locator(".messages")).to_contain_text("Resume: run is running.")
    expect(status).to_have_text("running")
    expect(page.locator("body")).to_have_attribute("data-live-state", "open")
    mark(page)

    # Ticked to the end: every cell and the run's badge turn over without a reload.
    tick_to_the_end(page, run, "completed")
    page.wait_for_function(
        "() => Array.from(document.querySelectorAll('#node-grid .node-state'))"
        ".every(el => el.textContent === 'upgrade-done')"
    )
    assert grid_states(page) == dict.fromkeys(names, "upgrade-done")
    expect(page.locator("#run-summary")).to_contain_text("3 / 0 / 3")
    expect(page.get_by_role("link", name="Roll back to 580.105.08")).to_be_visible()
    assert page.evaluate(NOT_RELOADED)


def test_abort_asks_first_then_the_grid_settles_live(owner_page, upgrade_pool):
    pool, page = upgrade_pool, owner_page
    page.goto(f"/pools/{pool.pk}/upgrade/")
    page.get_by_label("Target driver release").select_option(TARGET)
    page.get_by_label("Max unavailable").fill("1")
    page.get_by_role("button", name="Start upgrade").click()
    run = UpgradeRun.objects.get(pool=pool)
    status = page.locator(f'[data-run-status="{run.pk}"]')
    expect(status).to_have_text("running")
    assert tick_once(run)  # one node starts: it is to be cordoned
    (started,) = run.nodes.exclude(state="upgrade-required")
    assert started.state == "cordon-required"

    # Abort shows a confirmation first; Cancel changes nothing.
    page.get_by_role("link", name="Abort").click()
    question = page.get_by_role("heading", name=f"Abort the upgrade of {pool.name} to {TARGET}?")
    expect(question).to_be_visible()
    screenshot(page, "upgrade-abort-confirmation")
    page.get_by_role("link", name="Cancel").click()
    expect(page).to_have_url(re.compile(rf"/upgrades/{run.pk}/$"))
    expect(status).to_have_text("running")
    assert UpgradeRun.objects.get(pk=run.pk).status == "running"

    page.get_by_role("link", name="Abort").click()
    expect(question).to_be_visible()
    page.get_by_role("button", name="Abort upgrade").click()
    expect(page).to_have_url(re.compile(rf"/upgrades/{run.pk}/$"))
    expect(page.locator(".messages")).to_contain_text("Abort: run is aborting.")
    expect(status).to_have_text("aborting")
    cell = page.locator(f'[data-upgrade-node="{started.name}"] .node-state')
    expect(cell).to_have_text("cordon-required")
    expect(page.locator("body")).to_have_attribute("data-live-state", "open")
    mark(page)

    tick_to_the_end(page, run, "aborted")
    # The started node went back into service on its old driver; no node was left half-way.
    expect(cell).to_have_text("upgrade-required")
    assert set(grid_states(page).values()) == {"upgrade-required"}
    expect(page.locator("#run-history")).to_contain_text("cordon-required → upgrade-required")
    assert not Node.objects.filter(pool=pool, cordoned=True).exists()
    expect(page.get_by_role("button", name="Pause")).to_have_count(0)
    expect(page.get_by_role("link", name="Abort")).to_have_count(0)
    assert page.evaluate(NOT_RELOADED)


def test_a_node_whose_install_failed_is_marked_kept_cordoned_live(owner_page, upgrade_pool):
    pool, page = upgrade_pool, owner_page
    victim = Node.objects.filter(pool=pool).order_by("name").first()
    SimFault.objects.create(operation="install_driver", target=victim.name, reason="DkmsBuildFailed")
    page.goto(f"/pools/{pool.pk}/upgrade/")
    page.get_by_label("Target driver release").select_option(TARGET)
    page.get_by_label("Max unavailable").fill("2")
    page.get_by_label("Failure budget").fill("5")
    expect(page.get_by_label("Failed nodes")).to_have_value("keep-cordoned")  # the default
    page.get_by_role("button", name="Start upgrade").click()
    run = UpgradeRun.objects.get(pool=pool)
    expect(page.locator(f'[data-run-status="{run.pk}"]')).to_have_text("running")
    expect(page.locator("[data-failed-nodes]")).to_have_text("kept cordoned")
    expect(page.locator("[data-kept-cordoned]")).to_have_count(0)
    expect(page.locator("body")).to_have_attribute("data-live-state", "open")
    mark(page)

    tick_to_the_end(page, run, "failed")
    cell = page.locator(f'[data-upgrade-node="{victim.name}"]')
    expect(cell.locator("[data-kept-cordoned]")).to_have_text("kept cordoned")
    expect(cell).to_have_class(re.compile("node-kept-cordoned"))
    expect(page.locator("[data-kept-cordoned]")).to_have_count(1)
    expect(page.locator("#run-summary")).to_contain_text("1 failed node out of service: retry or roll back")
    expect(page.locator("#run-history")).to_contain_text("Kept cordoned: its driver is not validated")
    assert Node.objects.get(pk=victim.pk).cordoned
    assert page.evaluate(NOT_RELOADED)
    screenshot(page, "upgrade-run-node-kept-cordoned")

    # Repaired by hand: returned to service through its cell's link, after a confirmation.
    expect(page.get_by_role("link", name="Return to service")).to_have_count(1)
    cell.get_by_role("link", name="Return to service").click()
    expect(page.get_by_role("heading", name=f"Return {victim.name} to service?")).to_be_visible()
    screenshot(page, "upgrade-run-return-to-service-confirmation")
    assert Node.objects.get(pk=victim.pk).cordoned  # asking changed nothing
    page.get_by_role("button", name=f"Return {victim.name} to service").click()
    expect(page.locator(".messages")).to_contain_text(f"Node {victim.name} is back in service")
    expect(cell.locator("[data-returned-to-service]")).to_have_text(
        "returned to service, driver not validated"
    )
    expect(page.locator("[data-kept-cordoned]")).to_have_count(0)
    expect(page.get_by_role("link", name="Return to service")).to_have_count(0)
    assert not Node.objects.get(pk=victim.pk).cordoned
    screenshot(page, "upgrade-run-node-returned-to-service")


# --- live telemetry ----------------------------------------------------------------------------------


@pytest.fixture
def telemetry_pool(tenant, make_cluster, make_pool) -> NodePool:
    """One node of two fractional L4 GPUs, with no samples in Redis yet."""
    pool = make_pool(
        make_cluster(tenant, "prod"), name="frac", gpu_model="l4", nodes=1, gpus_per_node=2,
        sharing_mode="fractional",
    )  # fmt: skip
    reconcile(pool.pk)
    ids = list(Gpu.objects.filter(node__pool=pool).values_list("pk", flat=True))
    store.client().delete(*(store.gpu_key(i) for i in ids))  # ids recur from an earlier run's database
    return pool


def write_samples(pool: NodePool, values: dict[int, tuple[float, float]]) -> None:
    """Write one sample per GPU (gpu id -> (util %, memory MiB)) into Redis, as the ingest API does."""
    now = time.time()
    node = Node.objects.get(pool=pool)
    samples = [
        store.Sample(gpu_id=g, ts=now, values={"util": u, "mem": m, "temp": 50, "power": 60, "sm": 1800},
                     claims={})
        for g, (u, m) in values.items()
    ]  # fmt: skip
    store.write(node.pk, samples, now)


def canvas_image(page, selector: str) -> str:
    return page.locator(selector).evaluate("canvas => canvas.toDataURL()")


CLOCK = r"\d\d:\d\d:\d\d"  # the charts' time format (HH:MM:SS)


def legend_value(card, label: str):
    """The value in `card`'s chart legend (uPlot's .u-legend) for the series labelled `label`."""
    row = card.locator(".u-legend .u-series").filter(has=card.page.locator(".u-label", has_text=label))
    return row.locator(".u-value")


def test_pool_telemetry_charts_follow_new_samples_without_reload(owner_page, telemetry_pool):
    pool, page = telemetry_pool, owner_page
    first, second = Gpu.objects.filter(node__pool=pool).order_by("index").values_list("pk", flat=True)
    write_samples(pool, {first: (20, 4096), second: (40, 8192)})  # the page's first values

    page.goto(f"/telemetry/pools/{pool.pk}/")
    expect(page.locator("[data-telemetry-state]")).to_have_text("Live: 2 GPUs.")
    gpu_card = page.locator(f'[data-series="gpu-{first}"]')
    pool_card = page.locator(f'[data-series="pool-{pool.pk}"]')
    expect(gpu_card.locator('[data-value="util"]')).to_have_text("20 %")
    expect(gpu_card.locator('[data-value="mem"]')).to_have_text("4.0 GiB")
    expect(pool_card.locator('[data-value="util"]')).to_have_text("30 %")
    # Every card has a uPlot chart: a time axis and a value axis, and a legend naming both series.
    expect(page.locator("[data-series] [data-chart] .uplot")).to_have_count(3)
    expect(gpu_card.locator(".u-axis")).to_have_count(2)
    expect(gpu_card.locator(".u-legend .u-label")).to_have_text(["Time", "Utilization", "Memory used"])
    chart = f'[data-series="gpu-{first}"] [data-chart] canvas'
    before = canvas_image(page, chart)  # one point: axes, no line yet
    mark(page)
    screenshot(page, "telemetry-pool-first-values")

    busy = {first: (85, 12288), second: (45, 8192)}
    write_samples(pool, busy)
    until(  # written again (a newer sample) if the page's stream had not started reading yet
        page,
        f'document.querySelector(\'[data-series="gpu-{first}"] [data-value="util"]\')'
        ".textContent === '85 %'",
        lambda: write_samples(pool, busy),
    )
    expect(gpu_card.locator('[data-value="mem"]')).to_have_text("12.0 GiB")
    expect(pool_card.locator('[data-value="util"]')).to_have_text("65 %")
    expect(pool_card.locator('[data-value="mem"]')).to_have_text("20.0 GiB")
    page.wait_for_function(  # drawn on the next animation frame after the values
        "([selector, before]) => document.querySelector(selector).toDataURL() !== before", arg=[chart, before]
    )
    assert canvas_image(page, chart) != before  # the line from 20 % to 85 % is on the chart now
    # The time axis is labelled with clock times (drawn on the canvas, mirrored as text on the chart).
    expect(gpu_card.locator("[data-chart]")).to_have_attribute(
        "data-time-ticks", re.compile(rf"^{CLOCK}( {CLOCK})*$")
    )

    # The legend shows the newest values; pointing at the chart, those of the sample under the cursor.
    expect(legend_value(gpu_card, "Utilization")).to_have_text("85 %")
    expect(legend_value(gpu_card, "Memory used")).to_have_text(f"{round(100 * 12288 / gpu_memory(first))} %")
    plot = gpu_card.locator(".u-over")
    box = plot.bounding_box()
    plot.hover(position={"x": 1, "y": box["height"] / 2})  # left of the oldest sample: the oldest
    expect(legend_value(gpu_card, "Utilization")).to_have_text("20 %")
    expect(legend_value(gpu_card, "Memory used")).to_have_text(f"{round(100 * 4096 / gpu_memory(first))} %")
    expect(legend_value(gpu_card, "Time")).to_have_text(re.compile(rf"^{CLOCK}$"))
    plot.hover(position={"x": box["width"] - 1, "y": box["height"] / 2})  # right of the newest: the newest
    expect(legend_value(gpu_card, "Utilization")).to_have_text("85 %")
    screenshot(page, "telemetry-pool-legend-under-the-cursor")
    assert page.evaluate(NOT_RELOADED)


def gpu_memory(gpu_id: int) -> int:
    return Gpu.objects.get(pk=gpu_id).memory_mib


def test_telemetry_charts_are_drawn_at_the_screens_pixel_density(
    browser_context_factory, owner, telemetry_pool
):
    pool = telemetry_pool
    gpus = list(Gpu.objects.filter(node__pool=pool).values_list("pk", flat=True))
    write_samples(pool, {g: (50, 8192) for g in gpus})
    page = browser_context_factory(device_scale_factor=2).new_page()  # a HiDPI ("retina") screen
    sign_in(page, owner)
    page.goto(f"/telemetry/gpus/{gpus[0]}/")
    expect(page.locator("[data-telemetry-state]")).to_have_text("Live: 1 GPU.")
    expect(page.locator('[data-value="util"]')).to_have_text("50 %")
    canvas = page.locator("[data-chart] canvas")
    # Twice as many canvas pixels as CSS pixels each way: not an upscaled, blurry 1x bitmap.
    size = canvas.evaluate(
        "c => ({width: c.width, height: c.height, css: c.getBoundingClientRect().toJSON()})"
    )
    assert size["css"]["width"] > 300
    assert size["width"] == round(2 * size["css"]["width"]), size
    assert size["height"] == round(2 * size["css"]["height"]), size
    screenshot(page, "telemetry-gpu-hidpi")
    # The cluster's heatmap too: its cells are drawn at twice the CSS pixels.
    page.goto(f"/telemetry/clusters/{pool.cluster_id}/")
    expect(page.locator("[data-telemetry-state]")).to_have_text(f"Live: {len(gpus)} GPUs.")
    heatmap = page.locator("[data-heatmap]")
    page.wait_for_function(  # drawn
        "() => document.querySelector('[data-heatmap]').getContext('2d')"
        ".getImageData(1, 1, 1, 1).data[3] === 255"
    )
    size = heatmap.evaluate(
        "c => ({width: c.width, height: c.height, css: c.getBoundingClientRect().toJSON()})"
    )
    assert size["width"] == round(2 * size["css"]["width"]) and size["height"] == round(
        2 * size["css"]["height"]
    )


def test_cluster_heatmap_recolours_a_gpu_without_reload(owner_page, telemetry_pool):
    pool, page = telemetry_pool, owner_page
    # telemetry.js draws one cell per GPU in the order of their ids: the lowest id is the first cell.
    first, second = Gpu.objects.filter(node__pool=pool).order_by("pk").values_list("pk", flat=True)
    write_samples(pool, {first: (0, 1024), second: (0, 1024)})

    page.goto(f"/telemetry/clusters/{pool.cluster_id}/")
    expect(page.locator("[data-telemetry-state]")).to_have_text("Live: 2 GPUs.")
    expect(page.locator(".heatmap-legend")).to_contain_text("0 % 100 % utilization, no data yet")
    expect(page.locator(f'[data-series="pool-{pool.pk}"] [data-value="util"]')).to_have_text("0 %")
    # The first cell's colour, read from the canvas: idle GPUs are blue-grey.
    first_cell = (
        "() => Array.from(document.querySelector('[data-heatmap]').getContext('2d')"
        ".getImageData(1, 1, 1, 1).data)"
    )
    page.wait_for_function(f"({first_cell})()[3] === 255")  # drawn
    idle = page.evaluate(first_cell)
    assert idle[2] > idle[0], idle  # blue over red
    mark(page)

    busy = {first: (100, 20000), second: (0, 1024)}
    write_samples(pool, busy)
    until(page, f"({first_cell})()[0] > ({first_cell})()[2]", lambda: write_samples(pool, busy))  # red
    expect(page.locator(f'[data-series="pool-{pool.pk}"] [data-value="util"]')).to_have_text("50 %")
    assert page.evaluate(NOT_RELOADED)
