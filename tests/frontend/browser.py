"""Real-browser tests: Playwright for Python driving Debian's Chromium against a live uvicorn (HTTP and
websockets on this test's database and Redis). A new browser test takes a few lines:

    pytestmark = BROWSER_TEST

    def test_cluster_page(owner_page, tenant, make_cluster):
        cluster = make_cluster(tenant, "prod")
        owner_page.goto(f"/clusters/{cluster.pk}/")
        expect(owner_page.get_by_role("heading", name="prod")).to_be_visible()

`page` is a page that is not signed in; `owner_page` is signed in as the `owner` fixture's user;
`sign_in(page, user)` signs in someone else. Paths are relative to the live server. Every browser test
saves a screenshot of its page when it ends (`<test>.png`; `<test>-FAILED.png` plus the server's log
`<test>-server.log` on failure) under $NVKE_TEST_ARTIFACTS (default test-artifacts/, git-ignored);
`screenshot(page, label)` saves more along the way. Browsers are never downloaded: without
/usr/bin/chromium (.ci/run installs it) the tests skip and say so."""

import glob
import os
import re
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from django.db import connections
from django.test import Client
from playwright.sync_api import Error as PlaywrightError
from playwright.sync_api import expect

from tests.integration.processes import ROOT

CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu"]
ARTIFACTS = Path(os.environ.get("NVKE_TEST_ARTIFACTS") or ROOT / "test-artifacts")
LAPTOP = {"width": 1280, "height": 900}
TABLET = {"width": 768, "height": 1024}
HOST = "127.0.0.1"  # where the asgi_server fixture listens
TIMEOUT_MS = 20_000  # a loaded 2-core CI machine runs uvicorn, a worker and Chromium at once

expect.set_options(timeout=TIMEOUT_MS)  # assertions wait as long as actions do

BROWSER_TEST = [
    pytest.mark.integration,
    pytest.mark.browser,
    pytest.mark.skipif(not CHROMIUM.exists(), reason=f"Chromium is not installed at {CHROMIUM}"),
]


def artifact_path(name: str) -> Path:
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    return ARTIFACTS / re.sub(r"[^A-Za-z0-9_.-]+", "-", name).replace("-.", ".")


def screenshot(page, label: str) -> Path:
    """Save the whole page as <artifacts>/<label>.png and return the path."""
    path = artifact_path(f"{label}.png")
    page.screenshot(path=str(path), full_page=True)
    return path


def sign_in(page, user) -> None:
    """Give the page's browser a real session of `user` (as if they had signed in)."""
    session = Client()
    session.force_login(user)
    page.context.add_cookies(
        [{"name": "sessionid", "value": session.cookies["sessionid"].value, "domain": HOST, "path": "/"}]
    )


@pytest.fixture
def browser_context_factory(asgi_server, request) -> Iterator[Callable]:
    """new_context(**options) -> a fresh browser context on the live server (1280px wide unless told).
    Chromium is started for this test and stopped after it; the last page of every context is
    screenshotted when the test ends."""
    from playwright.sync_api import sync_playwright

    # Playwright's sync API keeps an event loop running in this thread; the test's own ORM calls are
    # still plain synchronous code, so let Django allow them for the test's duration.
    previous = os.environ.get("DJANGO_ALLOW_ASYNC_UNSAFE")
    os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"] = "1"
    contexts = []
    for stale in ARTIFACTS.glob(f"{glob.escape(request.node.name)}*"):  # from an earlier run
        stale.unlink()
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)

        def new_context(**options):
            context = browser.new_context(base_url=asgi_server.url, viewport=LAPTOP, **options)
            context.set_default_timeout(TIMEOUT_MS)
            contexts.append(context)
            return context

        try:
            yield new_context
        finally:
            _save_artifacts(request, contexts, asgi_server)
            browser.close()
            # Connections the test opened while Playwright's event loop ran outlive pytest-django's
            # clean-up (the test database could not be dropped at the end): close them here.
            connections.close_all()
            if previous is None:
                os.environ.pop("DJANGO_ALLOW_ASYNC_UNSAFE", None)
            else:
                os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"] = previous


def _save_artifacts(request, contexts, server) -> None:
    report = getattr(request.node, "report_call", None)
    failed = report is None or report.failed
    name = request.node.name + ("-FAILED" if failed else "")
    for number, context in enumerate(contexts):
        for page in context.pages[-1:]:
            try:
                screenshot(page, name if number == 0 else f"{name}-{number}")
            except Exception as error:  # a crashed page must not hide the test's own failure
                print(f"no screenshot of {name}: {error}")
    if failed:
        artifact_path(f"{request.node.name}-server.log").write_text(server.log)


@pytest.fixture
def page(browser_context_factory):
    """A Playwright page on the live server, not signed in."""
    return browser_context_factory().new_page()


@pytest.fixture
def owner_page(page, owner):
    """A Playwright page signed in as `owner` (an owner of tenant 'acme')."""
    sign_in(page, owner)
    return page


NOT_RELOADED = "window.__marker === 1"  # after mark(page): the page was updated live, not reloaded


def mark(page) -> None:
    """Tag the document: the tag survives live updates, not a reload or a navigation."""
    page.evaluate("window.__marker = 1")


def tick_once(run) -> bool:
    """One tick of an upgrade run, in this process; False once the run has settled."""
    from upgrades.controller import tick

    run.refresh_from_db()
    return tick(run.pk, run.tick_seq) is not None


def until(page, condition: str, poke: Callable[[], None], timeout_s: float = 20) -> None:
    """Wait for a JavaScript condition, calling `poke` (re-sending what the page should hear) between
    tries: the page's socket may not have joined its group when the first message goes out."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            page.wait_for_function(condition, timeout=1000)
            return
        except PlaywrightError:
            if time.monotonic() > deadline:
                raise AssertionError(f"timed out waiting for {condition}") from None
            poke()
