"""API tokens on the websockets, through a real uvicorn and real websocket clients: every route takes a
token of its tenant (read-only too) with no Origin and no cookie; bad tokens are refused at the
handshake (HTTP 403); revoking or deleting the token, removing its user or its expiry closes the open
streams (4403); another tenant's views are refused (4403); the Origin check still guards sessions."""

import contextlib
import datetime
import json
import urllib.request

import pytest
from django.utils import timezone
from websockets.exceptions import InvalidStatus
from websockets.sync.client import connect

from nodepools.services import reconcile
from nvke.realtime import broadcast, broadcast_operators, flush
from nvke.tenancy.context import TenantContext
from nvke.tenancy.models import ApiToken, Membership
from nvke.tenancy.services import remove_member
from tests.security.matrix import WEBSOCKETS

from .test_websocket import assert_refused, close_code, receive_until, session_cookie, token_socket

pytestmark = pytest.mark.integration


@pytest.fixture
def fleet(owner, make_cluster, make_pool) -> dict[str, int]:
    """A cluster of acme's with a pool, a node and its GPUs, for every view of every route."""
    cluster = make_cluster(owner.memberships.get().tenant, "live")
    pool = make_pool(cluster, nodes=1, gpus_per_node=2)
    reconcile(pool.pk)
    flush()  # their events are out before any socket opens
    return {"cluster": cluster.pk, "pool": pool.pk, "gpu": pool.nodes.get().gpus.order_by("pk").first().pk}


def issue(user, **options) -> tuple[ApiToken, str]:
    return ApiToken.issue(tenant=user.memberships.get().tenant, user=user, name="stream", **options)


def views(objects: dict[str, int]) -> list[str]:
    """Every websocket route (tests/security/matrix.py), whole and with each object it can be narrowed to."""
    paths = []
    for route, ws in WEBSOCKETS.items():
        paths.append(f"/{route}")
        paths += [f"/{route}?{param}={objects[param]}" for param in ws.obj_params]
    return paths


def refused_status(server, path: str, **options) -> int:
    """The HTTP status of a handshake the server must refuse before accepting."""
    with pytest.raises(InvalidStatus) as refused:
        connect(f"ws://127.0.0.1:{server.port}{path}", open_timeout=10, **options)
    return refused.value.response.status_code


@pytest.mark.parametrize("scope", ["read-only", "read-write"])
def test_a_token_opens_every_route_of_its_tenant(asgi_server, owner, fleet, scope):
    tenant = owner.memberships.get().tenant
    token, raw = issue(owner, scope=scope)
    with contextlib.ExitStack() as stack:
        sockets = {path: stack.enter_context(token_socket(asgi_server, raw, path)) for path in views(fleet)}
        assert len(sockets) == 6
        # Fleet views hear the tenant's group, the others the cluster's.
        broadcast(tenant.pk, {"type": "test.ping"}, cluster_id=fleet["cluster"])
        flush()
        for path, socket in sockets.items():
            _, seen = receive_until(socket, lambda event: event["type"] == "test.ping")
            if path.startswith("/ws/telemetry/"):
                hello = seen[0]
                assert hello["type"] == "telemetry.hello" and hello["view"].startswith(f"tenant-{tenant.pk}.")
    token.refresh_from_db()
    assert token.last_used_at is not None


def test_bad_tokens_are_refused_at_the_handshake(asgi_server, owner, make_member):
    past = timezone.now() - datetime.timedelta(seconds=1)
    revoked_token, revoked = issue(owner)
    revoked_token.revoked_at = timezone.now()
    revoked_token.save()
    deactivated = make_member("acme", "member")
    _, of_deactivated = issue(deactivated)
    deactivated.is_active = False
    deactivated.save()
    _, good = issue(owner)
    # With an allowed Origin, a handshake whose token were ignored would be accepted as anonymous (and
    # closed with 4403): a 403 here comes from the token check.
    origin = {"Origin": asgi_server.url}
    bearers = ["nvke_unknown", revoked, of_deactivated, issue(owner, expires_at=past)[1], f"{good} extra"]
    handshakes = [{"additional_headers": {"Authorization": f"Bearer {raw}", **origin}} for raw in bearers]
    handshakes.append({"additional_headers": origin, "subprotocols": ["nvke", "nvke.bearer.nvke_unknown"]})
    for path in ("/ws/events/", "/ws/telemetry/"):
        assert [refused_status(asgi_server, path, **handshake) for handshake in handshakes] == [403] * 6
    assert_refused(asgi_server, "/ws/events/")  # no credentials at all: as before, accepted and closed


def test_revoking_a_token_closes_its_streams_and_no_other(asgi_server, owner):
    token, raw = issue(owner)
    _, other = issue(owner)
    with (
        token_socket(asgi_server, raw) as events,
        token_socket(asgi_server, raw, "/ws/telemetry/") as telemetry,
        token_socket(asgi_server, other) as kept,
    ):
        assert json.loads(telemetry.recv(timeout=10))["type"] == "telemetry.hello"
        revoke = urllib.request.Request(
            f"{asgi_server.url}/api/v1/tokens/{token.pk}/",
            method="DELETE",
            headers={"Authorization": f"Bearer {other}"},
        )
        with urllib.request.urlopen(revoke, timeout=10) as response:
            assert response.status == 204
        assert [close_code(events), close_code(telemetry)] == [4403, 4403]
        with pytest.raises(TimeoutError):
            kept.recv(timeout=0.5)  # still open, and quiet


def test_edits_and_deletion_in_the_admin_close_the_tokens_streams(asgi_server, owner):
    """The admin saves the row itself (revoked_at or expires_at set) or deletes it."""
    revoked, raw_revoked = issue(owner)
    expired, raw_expired = issue(owner)
    deleted, raw_deleted = issue(owner)
    with (
        token_socket(asgi_server, raw_revoked) as first,
        token_socket(asgi_server, raw_expired) as second,
        token_socket(asgi_server, raw_deleted) as third,
    ):
        revoked.revoked_at = expired.expires_at = timezone.now()
        revoked.save()
        expired.save()
        deleted.delete()
        assert [close_code(socket) for socket in (first, second, third)] == [4403, 4403, 4403]


def test_removing_the_member_closes_their_token_streams(asgi_server, owner, make_member):
    tenant = owner.memberships.get().tenant
    leaving = make_member("acme", "member", username="leaving")
    with token_socket(asgi_server, issue(leaving)[1], "/ws/telemetry/") as telemetry:
        assert json.loads(telemetry.recv(timeout=10))["type"] == "telemetry.hello"
        remove_member(context=TenantContext(tenant, "owner"), membership=Membership.objects.get(user=leaving))
        assert close_code(telemetry) == 4403


def test_a_stream_closes_when_its_token_expires(asgi_server, owner):
    token, raw = issue(owner, expires_at=timezone.now() + datetime.timedelta(seconds=5))
    with token_socket(asgi_server, raw, "/ws/telemetry/") as telemetry:
        assert json.loads(telemetry.recv(timeout=10))["type"] == "telemetry.hello"
        assert close_code(telemetry, timeout_s=20) == 4403
    assert timezone.now() >= token.expires_at


def test_a_token_sees_only_its_own_tenant(asgi_server, owner, fleet, make_member):
    """Another tenant's token is refused acme's clusters, pools and GPUs (4403), even beside a session
    cookie of acme's owner: the token fixes the tenant."""
    _, theirs = issue(make_member("globex", "owner"))
    for path in views(fleet):
        if "?" in path:
            assert_refused(asgi_server, path, token=theirs)
    path = f"/ws/events/?cluster={fleet['cluster']}"
    with token_socket(asgi_server, theirs, path, additional_headers={"Cookie": session_cookie(owner)}) as ws:
        assert close_code(ws) == 4403


def test_the_origin_check_still_guards_sessions(asgi_server, owner):
    """A session cookie needs an allowed Origin (a browser always sends one): another site's page, or
    no Origin at all, is refused at the handshake. A token works with any Origin or none."""
    cookie = session_cookie(owner)
    evil = {"Cookie": cookie, "Origin": "https://evil.example"}
    assert refused_status(asgi_server, "/ws/events/", additional_headers=evil) == 403
    assert refused_status(asgi_server, "/ws/events/", additional_headers={"Cookie": cookie}) == 403
    _, raw = issue(owner)
    with token_socket(
        asgi_server, raw, "/ws/telemetry/", additional_headers={"Origin": "https://dash.example"}
    ) as ws:
        assert json.loads(ws.recv(timeout=10))["type"] == "telemetry.hello"


def test_a_token_offered_as_a_subprotocol_is_not_echoed(asgi_server, owner):
    """For clients that cannot set headers: the server answers the `nvke` subprotocol, never the token."""
    _, raw = issue(owner)
    with connect(
        f"ws://127.0.0.1:{asgi_server.port}/ws/telemetry/",
        subprotocols=["nvke", f"nvke.bearer.{raw}"],
        open_timeout=10,
    ) as ws:
        assert ws.subprotocol == "nvke"
        assert ws.response.headers["Sec-WebSocket-Protocol"] == "nvke"
        assert json.loads(ws.recv(timeout=10))["type"] == "telemetry.hello"


def test_the_operators_stream_takes_an_operator_token_never_a_staff_users_tenant_token(asgi_server, owner):
    """As on the fleet endpoints: a tenant token acts in its tenant only, whoever holds it. A staff
    user's tenant token opened the operators' stream, which spans every tenant."""
    owner.is_staff = True
    owner.save()
    _, tenant_token = issue(owner)
    _, operator_token = ApiToken.issue(tenant=None, user=owner, name="operator")
    assert_refused(asgi_server, "/ws/events/?rollouts=1", token=tenant_token)
    with token_socket(asgi_server, operator_token, "/ws/events/?rollouts=1") as operators:
        broadcast_operators({"type": "test.ping"})
        flush()
        receive_until(operators, lambda event: event["type"] == "test.ping")
