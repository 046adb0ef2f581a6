"""API tokens on websocket handshakes, for clients that are not browsers (scripts, dashboards, tools).

A handshake names its token in `Authorization: Bearer nvke_…` or, where the client cannot set headers
(a browser), as the subprotocol `nvke.bearer.nvke_…` offered beside `nvke` (the server answers `nvke`,
never the secret). Never in the query string: URLs end up in logs.

A handshake with a token never reaches the session stack: cookies are not read, and the tenant is the
token's. It skips the Origin check too, which guards against another site riding on a browser's
session cookie; a token is sent by no browser on its own. A bad token (unknown, malformed, revoked,
expired, its user deactivated) is refused before the socket is accepted, which the server answers
with HTTP 403, and counts as a failed authentication of the client's address, as on the API; past
NVKE_RATE_LIMIT_AUTH_FAILURES every token handshake from there is accepted, then closed with 4429, before
any lookup. A handshake counts as one request against the token's and its user's API rate limits (over
them: 4429 too). Handshakes without a token go to `session_app`; those that turn out to have no
signed-in session either are counted per address (`AnonymousHandshakeLimit`, NVKE_RATE_LIMIT_ANONYMOUS;
over it: 4429 instead of 4403)."""

from channels.db import database_sync_to_async
from channels.security.websocket import WebsocketDenier

from nvke.addresses import scope_address
from nvke.api.throttling import anonymous_handshake_allowed, handshake_allowed
from nvke.consumers import SUBPROTOCOL, ThrottledConsumer
from nvke.tenancy.authentication import active_token, auth_failures_exceeded, count_auth_failure
from nvke.tenancy.models import ApiToken

BEARER_SUBPROTOCOL = f"{SUBPROTOCOL}.bearer."


def presented_token(scope: dict) -> str | None:
    """The raw token a handshake carries; "" for a malformed Bearer header; None without one. Other
    Authorization schemes are left alone, as on the API (a browser may replay cached Basic auth)."""
    for name, value in scope.get("headers", ()):
        if name == b"authorization":
            parts = value.decode("latin-1").split()
            if parts and parts[0] == "Bearer":
                return parts[1] if len(parts) == 2 else ""
    for protocol in scope.get("subprotocols", ()):
        if protocol.startswith(BEARER_SUBPROTOCOL):
            return protocol.removeprefix(BEARER_SUBPROTOCOL)
    return None


@database_sync_to_async
def _authenticate(raw: str, address: str | None) -> tuple[ApiToken | None, bool]:
    """The working token `raw` names (or None), and whether this handshake is within its rate limits
    and those of its address's failed authentications."""
    if auth_failures_exceeded(address):
        return None, False
    token = active_token(raw) if raw else None
    if token is None:
        count_auth_failure(address)
        return None, True
    return token, handshake_allowed(token)


class TokenAuthMiddleware:
    """Routes each websocket handshake: with a token to `token_app` as the token's user (scope `user`
    and `token`), else to `session_app`."""

    def __init__(self, token_app, session_app) -> None:
        self.token_app = token_app
        self.session_app = session_app
        self.deny = WebsocketDenier.as_asgi()
        self.throttled = ThrottledConsumer.as_asgi()

    async def __call__(self, scope, receive, send):
        raw = presented_token(scope)
        if raw is None:
            return await self.session_app(scope, receive, send)
        token, allowed = await _authenticate(raw, scope_address(scope))
        if not allowed:
            return await self.throttled(scope, receive, send)
        if token is None:
            return await self.deny(scope, receive, send)
        return await self.token_app({**scope, "user": token.user, "token": token}, receive, send)


class AnonymousHandshakeLimit:
    """Inside the session stack: a handshake that has no signed-in user is counted per client address,
    and past the limit it is closed with 4429 (it would have been refused with 4403 anyway)."""

    def __init__(self, app) -> None:
        self.app = app
        self.throttled = ThrottledConsumer.as_asgi()

    async def __call__(self, scope, receive, send):
        user = scope.get("user")
        if user is None or not user.is_authenticated:
            allowed = await database_sync_to_async(anonymous_handshake_allowed)(scope_address(scope))
            if not allowed:
                return await self.throttled(scope, receive, send)
        return await self.app(scope, receive, send)
