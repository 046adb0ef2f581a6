"""Assets are served by the app itself (whitenoise), no CDN."""

import re

import pytest
from django.test import Client


@pytest.mark.parametrize(
    ("path", "content_type", "marker"),
    [
        ("/static/frontend/socket.js", "text/javascript", b"new WebSocket("),
        ("/static/frontend/live.js", "text/javascript", b"NVKE.socket.open("),
        ("/static/frontend/telemetry.js", "text/javascript", b"NVKE.socket.open("),
        ("/static/frontend/vendor/htmx/htmx.min.js", "text/javascript", b"htmx"),
        ("/static/frontend/vendor/uplot/uPlot.iife.min.js", "text/javascript", b"uPlot (v1.6."),
        ("/static/frontend/vendor/uplot/uPlot.min.css", "text/css", b".u-legend"),
        ("/static/frontend/pool_form.js", "text/javascript", b"pool-hints-data"),
        ("/static/frontend/claim_form.js", "text/javascript", b"data-claim-form"),
        ("/static/frontend/app.css", "text/css", b".status-running"),
    ],
)
def test_static_assets_are_served(path, content_type, marker):
    response = Client().get(path)
    assert response.status_code == 200
    assert response["Content-Type"].startswith(content_type)
    assert marker in b"".join(response.streaming_content)


@pytest.mark.django_db
def test_live_pages_load_socket_js_then_htmx_then_live_js_from_the_app(ui):
    html = ui.get("/").content.decode()
    scripts = re.findall(r'<script src="([^"]+)"', html)
    assert scripts == [
        "/static/frontend/socket.js",
        "/static/frontend/vendor/htmx/htmx.min.js",
        "/static/frontend/live.js",
    ]
    # The element htmx re-fetches the live regions with: the page itself, on live.js' event.
    assert re.search(r'<div hidden data-live-refresh hx-get="/" hx-trigger="nvke-refresh from:body', html)


@pytest.mark.django_db
def test_api_docs_load_swagger_ui_from_the_app(ui):
    page = ui.get("/api/docs/").content.decode()
    assert "cdn.jsdelivr.net" not in page and "unpkg.com" not in page
    assets = [src for src in ("swagger-ui-bundle.js", "swagger-ui.css") if src in page]
    assert assets == ["swagger-ui-bundle.js", "swagger-ui.css"]
    bundle = next(line for line in page.split('"') if line.endswith("swagger-ui-bundle.js"))
    assert bundle.startswith("/static/drf_spectacular_sidecar/")
    response = ui.get(bundle)
    assert response.status_code == 200
    assert b"SwaggerUIBundle" in b"".join(response.streaming_content)
