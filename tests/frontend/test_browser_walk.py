"""Every page at laptop and phone width in Chromium, as the tenant's owner and as the operator: no page
wider than the screen, no short word broken mid-word in a cell ("ad d", "7 0%"), the claims list says
its table scrolls sideways at 390 px, and each page's load time is written to
test-artifacts/page-loads-<width>px.json (a screenshot of each page lies beside it)."""

import json

import pytest
from playwright.sync_api import expect

from claims.allocator import create_claim
from nodepools.services import reconcile
from nvke.tenancy.context import TenantContext

from .browser import BROWSER_TEST, artifact_path, screenshot, sign_in

pytestmark = BROWSER_TEST

# Words of a cell whose pieces lie on more than one line: only words short enough to fit any cell
# (long names and UUIDs may break where they must); a hyphen or a slash is a word's end.
BROKEN_WORDS = """() => {
  const broken = [];
  for (const cell of document.querySelectorAll('td, th, dd, dt, .status, .button, .stat-value')) {
    const walker = document.createTreeWalker(cell, NodeFilter.SHOW_TEXT);
    for (let node = walker.nextNode(); node; node = walker.nextNode()) {
      for (const m of node.data.matchAll(/[^\\s\\-\\/_.,;:()]+/g)) {
        if (m[0].length > 12) continue;
        const range = document.createRange();
        range.setStart(node, m.index);
        range.setEnd(node, m.index + m[0].length);
        const rects = [...range.getClientRects()].filter(r => r.width > 0);
        const tops = new Set(rects.map(r => Math.round(r.top)));
        if (tops.size > 1) broken.push(m[0]);
      }
    }
  }
  return broken;
}"""
LOAD_MS = (
    "() => { const n = performance.getEntriesByType('navigation')[0]; return n.loadEventEnd - n.startTime; }"
)


@pytest.fixture
def fleet(tenant, owner, make_cluster, make_pool):
    cluster = make_cluster(tenant, "prod")
    pool = make_pool(cluster, name="l4-mps", sharing_mode="mps", nodes=1)
    reconcile(pool.pk)
    claim = create_claim(
        context=TenantContext(tenant, "owner"), cluster=cluster, name="llm-infer", kind="fraction",
        gpu_memory_mib=8192, compute_percent=70,
    )  # fmt: skip
    return {"cluster": cluster, "pool": pool, "claim": claim, "node": pool.nodes.first()}


def walk(page, paths: list[str], width: int, who: str) -> dict[str, float]:
    """Visit each path; check width and words; screenshot; the load times by path (ms)."""
    page.set_viewport_size({"width": width, "height": 900})
    loads, problems = {}, []
    for path in paths:
        response = page.goto(path)
        assert response.status == 200, (path, response.status)
        page.wait_for_load_state("load")
        loads[path] = round(page.evaluate(LOAD_MS), 1)
        if (wide := page.evaluate("document.documentElement.scrollWidth")) > width:
            problems.append(f"{path}: {wide} px wide")
        if broken := page.evaluate(BROKEN_WORDS):
            problems.append(f"{path}: broken words {broken[:5]}")
        screenshot(page, f"walk-{who}-{width}px-{path.strip('/').replace('/', '-') or 'home'}")
    assert problems == []
    return loads


@pytest.mark.parametrize("width", [1280, 390])
def test_every_page_fits_and_keeps_its_words_whole(
    browser_context_factory, owner, django_user_model, fleet, width
):
    cluster, pool, claim, node = fleet["cluster"], fleet["pool"], fleet["claim"], fleet["node"]
    tenant_paths = [
        "/", "/clusters/", f"/clusters/{cluster.pk}/", f"/pools/{pool.pk}/", f"/nodes/{node.pk}/",
        f"/clusters/{cluster.pk}/claims/", f"/claims/{claim.pk}/", f"/clusters/{cluster.pk}/claims/new/",
        f"/clusters/{cluster.pk}/pools/new/", f"/clusters/{cluster.pk}/maintenance/",
        f"/clusters/{cluster.pk}/versions/", f"/pools/{pool.pk}/upgrade/", "/clusters/new/",
        "/clusters/attach/", "/usage/", "/telemetry/", f"/telemetry/pools/{pool.pk}/", "/account/tokens/",
        "/account/members/", "/account/audit/", "/getting-started/", "/invitations/",
    ]  # fmt: skip
    page = browser_context_factory().new_page()
    sign_in(page, owner)
    loads = walk(page, tenant_paths, width, "owner")

    page.goto(f"/clusters/{cluster.pk}/claims/")
    hint = page.locator("[data-scroll-hint]")
    (expect(hint).to_be_visible if width < 700 else expect(hint).to_be_hidden)()

    operator = django_user_model.objects.create_user("operator", password="pw-secret-123", is_staff=True)
    staff = browser_context_factory().new_page()
    sign_in(staff, operator)
    loads |= walk(
        staff, ["/fleet/", "/fleet/tokens/", "/fleet-rollouts/", "/fleet-rollouts/new/"], width, "operator"
    )
    artifact_path(f"page-loads-{width}px.json").write_text(json.dumps(loads, indent=1))
