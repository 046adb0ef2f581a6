"""Assets are served by the app itself (whitenoise), no CDN."""

import pytest
from django.test import Client


@pytest.mark.parametrize(
    ("path", "content_type", "marker"),
    [
        ("/static/frontend/live.js", "text/javascript", b"new WebSocket("),
        ("/static/frontend/pool_form.js", "text/javascript", b"pool-hints-data"),
        ("/static/frontend/app.css", "text/css", b".status-running"),
    ],
)
def test_static_assets_are_served(path, content_type, marker):
    response = Client().get(path)
    assert response.status_code == 200
    assert response["Content-Type"].startswith(content_type)
    assert marker in b"".join(response.streaming_content)
