"""The README's default (`scripts/dev serve`: no Redis, no simulator process) shows live GPU utilization:
the demo's dashboard fills in Chromium at laptop and phone width."""

import re

from playwright.sync_api import expect, sync_playwright

from tests.integration.processes import demo_session, embedded_server

from .browser import BROWSER_TEST, CHROMIUM, CHROMIUM_ARGS, HOST, LAPTOP, TIMEOUT_MS, screenshot

pytestmark = BROWSER_TEST


def test_the_embedded_defaults_dashboard_is_live(tmp_path):
    with embedded_server(tmp_path) as (_, base), sync_playwright() as playwright:
        session = demo_session(base)
        browser = playwright.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        try:
            context = browser.new_context(base_url=base, viewport=LAPTOP)
            context.set_default_timeout(TIMEOUT_MS)
            context.add_cookies(
                [{"name": "sessionid", "value": session.cookies["sessionid"], "domain": HOST, "path": "/"}]
            )
            page = context.new_page()
            page.goto("/telemetry/")
            expect(page.locator("[data-telemetry-state]")).to_have_text("Live: 24 GPUs.")  # the demo's
            # Each pool's chart shows its utilization as samples arrive ("–" until the first).
            for value in page.locator(".chart-card [data-value='util']").all():
                expect(value).to_have_text(re.compile(r"^\d+ %$"))
            screenshot(page, "embedded-telemetry-1280px")
            page.set_viewport_size({"width": 390, "height": 844})
            page.wait_for_function("document.documentElement.scrollWidth <= 390")  # charts follow the width
            screenshot(page, "embedded-telemetry-390px")
        finally:
            browser.close()
