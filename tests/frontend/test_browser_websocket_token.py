"""A browser cannot set headers on a websocket: a page of another site (a dashboard) streams with an
API token offered as the `nvke.bearer.<token>` subprotocol beside `nvke`, and Chromium accepts the
server's answer (`nvke`)."""

from nvke.tenancy.models import ApiToken

from .browser import BROWSER_TEST

pytestmark = BROWSER_TEST

FIRST_MESSAGE = """([url, protocols]) => new Promise((resolve, reject) => {
    const socket = new WebSocket(url, protocols);
    socket.onmessage = (event) => {
        resolve({protocol: socket.protocol, type: JSON.parse(event.data).type});
        socket.close();
    };
    socket.onclose = (event) => reject(new Error(`closed with ${event.code}`));
})"""


def test_a_page_of_another_site_streams_with_a_token_subprotocol(page, owner, asgi_server):
    _, raw = ApiToken.issue(tenant=owner.memberships.get().tenant, user=owner, name="dashboard")
    page.set_content("<title>dashboard</title>")  # about:blank: an opaque origin, no cookie of NVKE's
    url = f"ws://127.0.0.1:{asgi_server.port}/ws/telemetry/"
    first = page.evaluate(FIRST_MESSAGE, [url, ["nvke", f"nvke.bearer.{raw}"]])
    assert first == {"protocol": "nvke", "type": "telemetry.hello"}
