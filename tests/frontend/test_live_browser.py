"""live.js in a real browser: headless Chromium on a page served by a real daphne, events sent through
Redis the way the services send them. Skipped where Chromium is not installed."""

import json
import shutil
import subprocess
import tempfile
import time
import urllib.request

import pytest
from django.test import Client
from websockets.sync.client import connect

from clusters.models import Cluster
from clusters.services import cluster_event
from nodepools.claims import create_claim, release_claim
from nodepools.models import Claim
from nodepools.services import reconcile
from nvke.realtime import broadcast
from nvke.tenancy.context import TenantContext
from tests.integration import processes

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome")

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(CHROMIUM is None, reason="Chromium is not installed"),
]


class Browser:
    """Just enough of the Chrome DevTools Protocol: set a cookie, open a page, evaluate JavaScript."""

    def __init__(self, socket):
        self.socket = socket
        self.next_id = 0

    def call(self, method: str, **params):
        self.next_id += 1
        self.socket.send(json.dumps({"id": self.next_id, "method": method, "params": params}))
        while True:
            message = json.loads(self.socket.recv(timeout=30))
            if message.get("id") == self.next_id:
                assert "error" not in message, message
                return message["result"]

    def evaluate(self, expression: str):
        return self.call("Runtime.evaluate", expression=expression, returnByValue=True)["result"].get("value")

    def wait_for(self, expression: str, what: str, poke=None, timeout_s: float = 20) -> None:
        """Poll a JavaScript condition; `poke` runs between polls (e.g. re-sends an event until the
        page's socket has joined its group)."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.evaluate(expression):
                return
            if poke:
                poke()
            time.sleep(0.3)
        raise AssertionError(f"timed out waiting for {what}: {self.evaluate('document.body.outerHTML')}")


@pytest.fixture
def browser():
    port = processes.free_port()
    profile = tempfile.mkdtemp(prefix="nvke-chromium-")
    proc = subprocess.Popen(
        [CHROMIUM, "--headless=new", "--no-sandbox", "--disable-gpu", f"--remote-debugging-port={port}",
         f"--user-data-dir={profile}", "about:blank"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/json/list", timeout=1) as response:
                    pages = [t for t in json.load(response) if t["type"] == "page"]
                if pages:
                    break
            except OSError:
                pass
            assert time.monotonic() < deadline, "Chromium did not start"
            time.sleep(0.2)
        with connect(pages[0]["webSocketDebuggerUrl"], max_size=None) as socket:
            yield Browser(socket)
    finally:
        proc.terminate()
        proc.wait(10)
        shutil.rmtree(profile, ignore_errors=True)


def test_cluster_page_follows_events(asgi_server, browser, owner, make_cluster):
    try:
        follow_events(asgi_server.url, browser, owner, make_cluster)
    except AssertionError as error:
        raise AssertionError(f"{error}\n--- daphne ---\n{asgi_server.log[-4000:]}") from None


def open_as(browser: "Browser", daphne: str, user, path: str) -> None:
    """Sign `user` in (a real session cookie) and open `path` in the browser."""
    session = Client()
    session.force_login(user)
    browser.call("Network.enable")
    browser.call("Network.setCookie", name="sessionid", value=session.cookies["sessionid"].value, url=daphne)
    browser.call("Page.enable")
    browser.call("Page.navigate", url=f"{daphne}{path}")


def follow_events(daphne: str, browser: "Browser", owner, make_cluster) -> None:
    cluster = make_cluster(owner.memberships.get().tenant, "live", status=Cluster.Status.PROVISIONING)
    open_as(browser, daphne, owner, f"/clusters/{cluster.pk}/")
    badge = f"document.querySelector('[data-cluster-status=\"{cluster.pk}\"]')"
    browser.wait_for(f"{badge} && {badge}.textContent === 'provisioning'", "the cluster page")

    # The provider finished: the row changes, then the services broadcast after commit.
    cluster.status, cluster.endpoint = Cluster.Status.RUNNING, "https://live.example:6443"
    cluster.set_condition("Ready", True, "Provisioned", "The control plane is serving.")
    cluster.save()
    send = lambda: broadcast(cluster.tenant_id, cluster_event(cluster), cluster_id=cluster.pk)  # noqa: E731
    browser.wait_for(f"{badge}.textContent === 'running'", "the live status", poke=send)
    assert browser.evaluate(f"{badge}.className") == "status status-running"
    # The endpoint and conditions come from re-fetching the page's live regions.
    browser.wait_for(
        "document.getElementById('cluster-summary').textContent.includes('https://live.example:6443')",
        "the refreshed summary",
    )
    assert "Provisioned" in browser.evaluate("document.getElementById('cluster-conditions').textContent")

    # Deleted elsewhere: the page leaves for the cluster list.
    broadcast(cluster.tenant_id, cluster_event(cluster, "cluster.deleted"), cluster_id=cluster.pk)
    browser.wait_for("location.pathname === '/clusters/'", "the move to the cluster list")


def test_claims_list_follows_claim_events(asgi_server, browser, owner, make_cluster, make_pool):
    try:
        follow_claims(asgi_server.url, browser, owner, make_cluster, make_pool)
    except AssertionError as error:
        raise AssertionError(f"{error}\n--- daphne ---\n{asgi_server.log[-4000:]}") from None


def follow_claims(daphne: str, browser: "Browser", owner, make_cluster, make_pool) -> None:
    tenant = owner.memberships.get().tenant
    cluster = make_cluster(tenant, "live")
    pool = make_pool(cluster, name="frac", nodes=1, gpus_per_node=1, sharing_mode="fractional")
    reconcile(pool.pk)
    context = TenantContext(tenant, "owner")
    big = create_claim(context=context, cluster=cluster, name="big", kind="fraction", gpu_memory_mib=20480)
    late = create_claim(context=context, cluster=cluster, name="late", kind="fraction", gpu_memory_mib=8192)
    assert (big.status, late.status) == ("allocated", "pending")

    open_as(browser, daphne, owner, f"/clusters/{cluster.pk}/claims/")
    badge = f"document.querySelector('[data-claim-status=\"{late.pk}\"]')"
    browser.wait_for(f"{badge} && {badge}.textContent === 'pending'", "the claims page")

    # Released elsewhere: its row goes; the waiting claim is placed, and its row refreshes with figures.
    release_claim(big)  # places `late` after commit (tasks run eagerly in tests)
    assert Claim.objects.get(pk=late.pk).status == "allocated"

    def send() -> None:
        event = {"cluster": cluster.pk, "namespace": "default", "reason": ""}
        broadcast(tenant.pk, {**event, "type": "claim.released", "claim": big.pk, "name": "big",
                              "status": "allocated"}, cluster_id=cluster.pk)  # fmt: skip
        broadcast(tenant.pk, {**event, "type": "claim.status", "claim": late.pk, "name": "late",
                              "status": "allocated"}, cluster_id=cluster.pk)  # fmt: skip

    browser.wait_for(f"{badge}.textContent === 'allocated'", "the live claim status", poke=send)
    browser.wait_for(f"!document.querySelector('[data-claim-row=\"{big.pk}\"]')", "the released row gone")
    row = f"document.querySelector('[data-claim-row=\"{late.pk}\"]')"
    browser.wait_for(f"{row} && {row}.textContent.includes('8Gi')", "the refreshed GPU-MEMORY column")
