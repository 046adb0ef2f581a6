"""Tenant workflows in a real browser: Chromium through Playwright on a live uvicorn (see browser.py).
Events reach the page the way the services send them: over Redis to the page's websocket."""

import re

import pytest
from django.contrib.auth.hashers import PBKDF2PasswordHasher
from playwright.sync_api import expect

from catalog.models import GpuModel
from claims.allocator import create_claim, release_claim
from claims.models import Claim
from clusters.events import cluster_event
from clusters.models import Cluster
from nodepools.events import pool_event
from nodepools.models import NodePool
from nodepools.services import reconcile, update_pool
from nvke.realtime import broadcast
from nvke.tenancy.context import TenantContext
from nvke.tenancy.models import Membership, Tenant

from .browser import BROWSER_TEST, LAPTOP, NOT_RELOADED, TABLET, mark, screenshot, until

pytestmark = BROWSER_TEST


def listening(page) -> None:
    """Wait for the page's websocket to open and its catch-up re-fetch to land (so what changes next
    reaches the page only through an event), then tag the document: `still_same_page` then proves an
    update came without a reload."""
    expect(page.locator("body")).to_have_attribute("data-live-state", "open")
    expect(page.locator("[data-live-indicator]")).to_have_text("Live")
    expect(page.locator("body")).to_have_attribute("data-live-refreshes", re.compile(r"^[1-9]"))
    page.evaluate("window.__notReloaded = true")


def still_same_page(page) -> bool:
    return page.evaluate("window.__notReloaded === true")


# --- sign in and out ---------------------------------------------------------------------------------


def test_sign_in_then_out(page, owner):
    # The live server hashes passwords as production does (the suite's settings use a fast hasher).
    owner.password = PBKDF2PasswordHasher().encode("pw-secret-123", PBKDF2PasswordHasher().salt())
    owner.save(update_fields=["password"])
    page.goto("/clusters/")
    expect(page).to_have_url(re.compile(r"/login/\?next=/clusters/$"))
    page.get_by_label("Username").fill(owner.username)
    page.get_by_label("Password").fill("wrong-password")
    page.get_by_role("button", name="Sign in").click()
    expect(page.get_by_role("alert")).to_contain_text("enter a correct username and password")

    page.get_by_label("Password").fill("pw-secret-123")
    page.get_by_role("button", name="Sign in").click()
    expect(page.get_by_role("heading", name="Clusters", exact=True)).to_be_visible()
    expect(page.locator(".username")).to_have_text(owner.username)
    expect(page.locator(".tenant-name")).to_have_text("Acme")

    page.get_by_role("button", name="Sign out").click()
    expect(page.get_by_role("heading", name="Sign in to NVKE")).to_be_visible()
    page.goto("/")
    expect(page).to_have_url(re.compile(r"/login/\?next=/$"))


def test_switch_tenant_from_the_header(owner_page, owner, tenant, make_cluster):
    globex = Tenant.objects.create(name="Globex", slug="globex")
    Membership.objects.create(tenant=globex, user=owner, role="viewer")
    make_cluster(tenant, "acme-cluster")
    make_cluster(globex, "globex-cluster")
    page = owner_page
    page.goto("/clusters/")
    expect(page.get_by_role("link", name="acme-cluster")).to_be_visible()
    expect(page.locator(".role-badge")).to_have_text("owner")

    page.get_by_label("Tenant").select_option(label="Globex")
    page.get_by_role("button", name="Switch").click()
    expect(page.locator(".messages")).to_contain_text("You are now working in Globex as viewer.")
    page.goto("/clusters/")
    expect(page.get_by_role("link", name="globex-cluster")).to_be_visible()
    expect(page.get_by_role("link", name="acme-cluster")).to_have_count(0)
    expect(page.get_by_role("link", name="New cluster")).to_have_count(0)  # a viewer creates nothing


# --- forms -------------------------------------------------------------------------------------------


def test_a_validation_error_is_shown_next_to_its_field(owner_page, catalog):
    owner_page.goto("/clusters/new/")
    owner_page.get_by_label("Name").fill("Not_A_Label")
    owner_page.get_by_role("button", name="Create cluster").click()

    name = owner_page.get_by_label("Name")
    expect(name).to_have_attribute("aria-invalid", "true")
    errors = owner_page.locator("#field-name .errorlist")
    expect(errors).to_contain_text("lower-case")
    # The message is announced with the control, and the typed value is kept for correcting.
    expect(name).to_have_attribute("aria-describedby", re.compile(r"\bid_name_error\b"))
    expect(name).to_have_value("Not_A_Label")
    assert not Cluster.objects.exists()


def test_create_a_cluster_and_a_pool_through_the_forms(owner_page, celery_worker_process, catalog):
    page = owner_page
    page.goto("/clusters/")
    expect(page.get_by_text("No clusters yet")).to_be_visible()
    page.get_by_role("link", name="New cluster").first.click()
    page.get_by_label("Name").fill("train")
    page.get_by_label("Region").select_option("us-east-1")
    page.get_by_label("Control plane nodes").select_option("1")
    page.get_by_role("button", name="Create cluster").click()

    expect(page.get_by_role("heading", name="train")).to_be_visible()
    cluster = Cluster.objects.get(name="train")
    # The worker provisions it; the page hears so over its websocket.
    expect(page.locator(f'[data-cluster-status="{cluster.pk}"]')).to_have_text("running")
    expect(page.locator("#cluster-summary")).to_contain_text(".k8s.nvke.local:6443")

    page.get_by_role("link", name="Add node pool").click()
    page.get_by_label("Name").fill("h100")
    page.get_by_label("GPU model").select_option("h100-sxm5-80gb")
    page.get_by_label("GPUs per node").fill("2")
    page.get_by_label("Nodes", exact=True).fill("1")
    page.get_by_label("Sharing mode").select_option("exclusive")
    page.get_by_role("button", name="Create node pool").click()

    pool = NodePool.objects.get(name="h100")
    expect(page.get_by_role("heading", name=re.compile("Node pool h100"))).to_be_visible()
    expect(page.locator(f'[data-pool-status="{pool.pk}"]')).to_have_text("ready")
    expect(page.locator(f'[data-pool-nodes="{pool.pk}"]')).to_have_text("1/1")
    expect(page.locator("#pool-nodes .gpu")).to_have_count(2)


def test_pool_form_hints_follow_the_chosen_gpu(owner_page, tenant, make_cluster, hopper_only_driver):
    cluster = make_cluster(tenant, "prod")
    page = owner_page
    page.goto(f"/clusters/{cluster.pk}/pools/new/")
    hints = page.locator("#pool-hints")
    driver = page.get_by_label("Driver")
    hopper_only = page.locator('#id_driver_release option[value="600.10.01"]')
    page.get_by_label("GPU model").select_option("h100-sxm5-80gb")
    driver.select_option("600.10.01")

    page.get_by_label("GPU model").select_option("b200-sxm-180gb")
    b200 = GpuModel.objects.get(name="b200-sxm-180gb")
    expect(hints.locator(".hints-title")).to_contain_text(f"{b200.display_name}: ")
    expect(hints.locator('[data-hint="driver-refused"]')).to_have_text(
        "600.10.01 does not fit: Driver branch 600 (600.10.01) does not support Blackwell."
    )
    expect(hopper_only).to_be_disabled()
    expect(driver).not_to_have_value("600.10.01")  # moved to a driver that fits
    screenshot(page, "pool-form-hints-b200")

    page.get_by_label("GPU model").select_option("l4")
    expect(hopper_only).to_be_enabled()
    expect(page.locator('#id_sharing_mode option[value="mig"]')).to_be_disabled()
    expect(hints.locator('[data-hint="mig"]')).to_have_text("L4 24GB does not support MIG.")
    expect(page.get_by_label("GPUs per node")).to_have_attribute("max", "8")

    page.get_by_label("GPU model").select_option("h100-sxm5-80gb")
    page.get_by_label("Sharing mode").select_option("mig")
    expect(hints.locator('[data-hint="drivers"]')).to_contain_text("Drivers that fit with MIG: ")
    expect(hints.locator('[data-hint="mig"]')).to_contain_text("3g.40gb")


def test_deleting_a_pool_asks_first(owner_page, frac_pool):
    page = owner_page
    page.goto(f"/pools/{frac_pool.pk}/")
    page.get_by_role("link", name="Delete node pool").click()
    expect(page.get_by_role("heading", name="Delete node pool frac and its 1 node?")).to_be_visible()
    page.get_by_role("link", name="Cancel").click()
    expect(page).to_have_url(re.compile(rf"/pools/{frac_pool.pk}/$"))
    assert NodePool.objects.get(pk=frac_pool.pk).status == "ready"

    page.get_by_role("link", name="Delete node pool").click()
    page.get_by_role("button", name="Delete node pool").click()
    expect(page).to_have_url(re.compile(rf"/clusters/{frac_pool.cluster_id}/$"))
    expect(page.locator(".messages")).to_contain_text("Node pool frac is being deleted.")
    assert NodePool.objects.get(pk=frac_pool.pk).status == "deleting"  # a worker would now tear it down


# --- claims and the GPU snapshot ---------------------------------------------------------------------


@pytest.fixture
def frac_pool(tenant, make_cluster, make_pool) -> NodePool:
    """A running cluster with one node holding one L4 (22.5Gi), shared fractionally."""
    cluster = make_cluster(tenant, "prod")
    pool = make_pool(cluster, name="frac", nodes=1, gpus_per_node=1, sharing_mode="fractional")
    reconcile(pool.pk)
    return pool


def test_a_claim_from_the_form_shows_in_the_gpu_snapshot(owner_page, frac_pool):
    page = owner_page
    page.goto(f"/clusters/{frac_pool.cluster_id}/claims/")
    page.get_by_role("link", name="New claim").first.click()
    page.get_by_label("Name", exact=True).fill("infer")
    page.get_by_label("Kind").select_option("fraction")
    page.get_by_label("GPU memory").fill("6Gi")
    page.get_by_label("Compute ceiling %").fill("25")
    page.get_by_role("button", name="Create claim").click()

    claim = Claim.objects.get(name="infer")
    expect(page.locator(f'[data-claim-status="{claim.pk}"]')).to_have_text("allocated")
    page.get_by_role("link", name="frac").click()
    segment = page.locator(f'[data-claim-segment="{claim.pk}"]')
    expect(segment).to_have_text("infer")
    # 6Gi of the L4's 23034 MiB, drawn to scale.
    width = segment.evaluate("el => el.style.width")
    assert width == f"{round(6144 / 23034 * 100, 2):g}%"
    expect(page.locator(".gpu-figures").first).to_contain_text("6Gi / 22.5Gi (27%)")

    # The node page draws the claim on the GPU's memory and compute bars.
    page.locator("#pool-nodes [data-node-row] a").first.click()
    expect(page.get_by_role("heading", name=re.compile("^Node "))).to_be_visible()
    expect(page.locator(f'[data-claim-segment="{claim.pk}"]')).to_have_attribute(
        "style", f"left: 0%; width: {width}"
    )
    expect(page.locator(f'[data-claim-compute="{claim.pk}"]')).to_have_text("25%")
    assert page.locator(f'[data-claim-compute="{claim.pk}"]').evaluate("el => el.style.width") == "25%"
    expect(page.locator('[data-gpu-health="0"]')).to_have_text("healthy")


# --- live updates without reload ---------------------------------------------------------------------


def test_a_pool_page_shows_new_nodes_without_reload(owner_page, frac_pool):
    page = owner_page
    page.goto(f"/pools/{frac_pool.pk}/")
    nodes = page.locator(f'[data-pool-nodes="{frac_pool.pk}"]')
    expect(nodes).to_have_text("1/1")
    listening(page)

    reconcile(update_pool(frac_pool, node_count=2).pk)  # two nodes now; the service broadcast after commit
    pool = NodePool.objects.get(pk=frac_pool.pk)
    assert (pool.status, pool.nodes.count()) == ("ready", 2)
    until(
        page,
        f"document.querySelector('[data-pool-nodes=\"{pool.pk}\"]').textContent === '2/2'",
        lambda: broadcast(pool.tenant_id, pool_event(pool), cluster_id=pool.cluster_id),
    )
    expect(page.locator("#pool-nodes [data-node-row]")).to_have_count(2)  # the region re-fetched
    assert still_same_page(page)
    screenshot(page, "pool-after-scale-up")


def test_a_change_while_the_socket_was_down_reaches_the_page_when_it_opens(owner_page, tenant, make_cluster):
    cluster = make_cluster(tenant, "prod", status=Cluster.Status.PROVISIONING)
    page = owner_page
    connect = {"allowed": False}

    def route(ws):  # the events socket, refused until the test allows it: the page keeps retrying
        if connect["allowed"]:
            ws.connect_to_server()
        else:
            ws.close(code=1011)

    page.route_web_socket(re.compile(r"/ws/events/"), route)
    page.goto(f"/clusters/{cluster.pk}/")
    heading = page.locator(f'#cluster-heading [data-cluster-status="{cluster.pk}"]')
    expect(heading).to_have_text("provisioning")
    expect(page.locator("body")).to_have_attribute("data-live-state", "reconnecting")
    mark(page)

    Cluster.objects.filter(pk=cluster.pk).update(status=Cluster.Status.RUNNING)  # and no event is sent
    connect["allowed"] = True
    expect(page.locator("body")).to_have_attribute("data-live-state", "open")
    # Only the catch-up re-fetch (htmx's, on open) can bring it: the title's badge and the summary.
    expect(heading).to_have_text("running")
    expect(heading).to_have_class("status status-running")
    expect(page.locator("body")).to_have_attribute("data-live-refreshes", "1")
    assert page.evaluate(NOT_RELOADED)


def test_a_node_page_draws_a_new_claim_without_reload(owner_page, tenant, frac_pool):
    node = frac_pool.nodes.get()
    page = owner_page
    page.goto(f"/nodes/{node.pk}/")
    expect(page.locator("#node-gpus .gpu-figures").first).to_have_text("0Gi / 22.5Gi (0%)")
    listening(page)

    claim = create_claim(
        context=TenantContext(tenant, "owner"), cluster=frac_pool.cluster, name="live", kind="fraction",
        gpu_memory_mib=11517, compute_percent=50,
    )  # fmt: skip
    assert claim.status == "allocated"
    event = {
        "type": "claim.status", "claim": claim.pk, "cluster": claim.cluster_id, "pool": frac_pool.pk,
        "status": "allocated",
    }  # fmt: skip
    until(
        page,
        f"document.querySelector('[data-claim-segment=\"{claim.pk}\"]') !== null",
        lambda: broadcast(tenant.pk, event, cluster_id=claim.cluster_id),
    )
    expect(page.locator(f'[data-claim-segment="{claim.pk}"]')).to_have_attribute(
        "style", "left: 0%; width: 50%"
    )
    expect(page.locator(f'[data-claim-compute="{claim.pk}"]')).to_have_attribute(
        "style", "left: 0%; width: 50%"
    )
    expect(page.locator("#node-gpus .gpu-figures").first).to_have_text("11.2Gi / 22.5Gi (50%)")
    assert still_same_page(page)


def test_a_claim_page_follows_a_rescaling_decision(owner_page, tenant, frac_pool):
    import time

    from telemetry import rescale
    from tests.telemetry.test_rescale import report

    claim = create_claim(
        context=TenantContext(tenant, "owner"), cluster=frac_pool.cluster, name="infer", kind="fraction",
        gpu_memory_mib=2048, compute_percent=40,
    )  # fmt: skip
    page = owner_page
    page.goto(f"/claims/{claim.pk}/")
    rescaling = page.locator(f'[data-claim-rescaling="{claim.pk}"]')
    expect(rescaling).to_contain_text("It holds what it asked for")
    listening(page)

    report(claim, [95] * 31, time.time() - 40)  # 30 s above the pressure threshold
    assert rescale.rescale() == [(claim.pk, "claim.grown")]
    event = {"type": "telemetry.event", "kind": "claim.grown", "cluster": claim.cluster_id, "claim": claim.pk}
    until(
        page,
        f"document.querySelector('[data-claim-rescaling=\"{claim.pk}\"]').textContent.includes('Grown')",
        lambda: broadcast(tenant.pk, event, cluster_id=claim.cluster_id),
    )
    expect(rescaling).to_contain_text("it holds 60% compute and asked for 40%")
    expect(page.locator("#claim-rescaling .event-log li").first).to_contain_text("grew from 40% to 60%")
    assert still_same_page(page)


def test_a_claims_list_follows_claim_events(owner_page, tenant, frac_pool):
    cluster = frac_pool.cluster
    context = TenantContext(tenant, "owner")
    big = create_claim(context=context, cluster=cluster, name="big", kind="fraction", gpu_memory_mib=20480)
    late = create_claim(context=context, cluster=cluster, name="late", kind="fraction", gpu_memory_mib=8192)
    assert (big.status, late.status) == ("allocated", "pending")

    page = owner_page
    page.goto(f"/clusters/{cluster.pk}/claims/")
    badge = f"document.querySelector('[data-claim-status=\"{late.pk}\"]')"
    expect(page.locator(f'[data-claim-status="{late.pk}"]')).to_have_text("pending")
    listening(page)

    release_claim(big)  # places `late` after commit (tasks run eagerly in the test process)
    assert Claim.objects.get(pk=late.pk).status == "allocated"

    def send() -> None:
        event = {"cluster": cluster.pk, "namespace": "default", "reason": ""}
        broadcast(tenant.pk, {**event, "type": "claim.released", "claim": big.pk, "name": "big",
                              "status": "allocated"}, cluster_id=cluster.pk)  # fmt: skip
        broadcast(tenant.pk, {**event, "type": "claim.status", "claim": late.pk, "name": "late",
                              "status": "allocated"}, cluster_id=cluster.pk)  # fmt: skip

    until(page, f"{badge}.textContent === 'allocated'", send)
    expect(page.locator(f'[data-claim-row="{big.pk}"]')).to_have_count(0)
    expect(page.locator(f'[data-claim-row="{late.pk}"]')).to_contain_text("8Gi")  # refreshed figures
    assert still_same_page(page)


def test_a_cluster_page_follows_its_status_and_leaves_when_deleted(owner_page, tenant, make_cluster):
    cluster = make_cluster(tenant, "live", status=Cluster.Status.PROVISIONING)
    page = owner_page
    page.goto(f"/clusters/{cluster.pk}/")
    badge = page.locator(f'[data-cluster-status="{cluster.pk}"]')
    expect(badge).to_have_text("provisioning")
    listening(page)

    # The provider finished: the row changes, then the services broadcast after commit.
    cluster.status, cluster.endpoint = Cluster.Status.RUNNING, "https://live.example:6443"
    cluster.set_condition("Ready", True, "Provisioned", "The control plane is serving.")
    cluster.save()
    until(
        page,
        f"document.querySelector('[data-cluster-status=\"{cluster.pk}\"]').textContent === 'running'",
        lambda: broadcast(cluster.tenant_id, cluster_event(cluster), cluster_id=cluster.pk),
    )
    expect(badge).to_have_class("status status-running")
    expect(page.locator("#cluster-summary")).to_contain_text("https://live.example:6443")
    expect(page.locator("#cluster-conditions")).to_contain_text("Provisioned")
    assert still_same_page(page)

    # Deleted elsewhere: the page leaves for the cluster list.
    broadcast(cluster.tenant_id, cluster_event(cluster, "cluster.deleted"), cluster_id=cluster.pk)
    expect(page).to_have_url(re.compile(r"/clusters/$"))


# --- laptop and tablet widths ------------------------------------------------------------------------

UNLABELLED_CONTROLS = """() => Array.from(document.querySelectorAll("input, select, textarea, button"))
    .filter(el => el.type !== "hidden" && el.offsetParent !== null)
    .filter(el => !(el.labels && el.labels.length) && !el.getAttribute("aria-label"))
    .filter(el => !(el.tagName === "BUTTON" && el.textContent.trim()))
    .map(el => el.outerHTML)"""


@pytest.mark.parametrize("viewport", [LAPTOP, TABLET], ids=["1280px", "768px"])
def test_pages_are_usable_at_laptop_and_tablet_widths(owner_page, tenant, frac_pool, make_pool, viewport):
    cluster = frac_pool.cluster
    mig = make_pool(
        cluster, name="mig", gpu_model="h100-sxm5-80gb", nodes=1, gpus_per_node=2, sharing_mode="mig"
    )
    reconcile(mig.pk)
    context = TenantContext(tenant, "owner")
    for name, fields in [
        ("infer", {"kind": "fraction", "gpu_memory_mib": 6144, "compute_percent": 25}),
        ("slice-a", {"kind": "mig", "mig_profile": "3g.40gb"}),
        ("slice-b", {"kind": "mig", "mig_profile": "1g.10gb"}),
    ]:
        assert create_claim(context=context, cluster=cluster, name=name, **fields).status == "allocated"
    page = owner_page
    page.set_viewport_size(viewport)
    pages = {
        "overview": "/",
        "cluster": f"/clusters/{cluster.pk}/",
        "pool": f"/pools/{mig.pk}/",
        "node": f"/nodes/{mig.nodes.get().pk}/",
        "claims": f"/clusters/{cluster.pk}/claims/",
        "pool-form": f"/clusters/{cluster.pk}/pools/new/",
        "claim-form": f"/clusters/{cluster.pk}/claims/new/",
    }
    for name, path in pages.items():
        page.goto(path)
        expect(page.locator("main h1")).to_be_visible()
        # Wide tables scroll inside their own box; the page itself never scrolls sideways.
        overflow = page.evaluate("document.documentElement.scrollWidth - window.innerWidth")
        assert overflow <= 0, f"{path} is {overflow}px wider than {viewport['width']}px"
        assert page.evaluate(UNLABELLED_CONTROLS) == [], f"unlabelled controls on {path}"
        screenshot(page, f"{name}-{viewport['width']}px")
