"""A real websocket client, connected to a real ASGI server, receives status changes."""

import json
import time

import pytest
from django.test import Client
from django.utils import timezone
from websockets.exceptions import ConnectionClosed
from websockets.sync.client import connect

from catalog.models import KubernetesVersion, Region
from clusters.services import create_cluster
from nvke.realtime import flush
from nvke.tenancy.context import TenantContext

pytestmark = pytest.mark.integration


def session_cookie(user) -> str:
    browser = Client()
    browser.force_login(user)
    return f"sessionid={browser.cookies['sessionid'].value}"


def open_socket(server, user, path="/ws/events/"):
    return connect(
        f"ws://127.0.0.1:{server.port}{path}",
        additional_headers={"Cookie": session_cookie(user), "Origin": f"http://127.0.0.1:{server.port}"},
        open_timeout=10,
    )


def token_socket(server, raw: str, path: str = "/ws/events/", **options):
    """A client that is not a browser: an API token in the Authorization header, no cookie, no Origin."""
    headers = {"Authorization": f"Bearer {raw}", **options.pop("additional_headers", {})}
    return connect(
        f"ws://127.0.0.1:{server.port}{path}", additional_headers=headers, open_timeout=10, **options
    )


def close_code(socket, timeout_s: float = 10) -> int:
    """Read until the server closes the socket, which must happen within `timeout_s`; its close code."""
    deadline = time.monotonic() + timeout_s
    with pytest.raises(ConnectionClosed) as closed:
        while True:
            socket.recv(timeout=max(deadline - time.monotonic(), 0.01))
    return closed.value.rcvd.code


def receive_until(socket, predicate, limit=20):
    seen = []
    for _ in range(limit):
        event = json.loads(socket.recv(timeout=10))
        seen.append(event)
        if predicate(event):
            return event, seen
    raise AssertionError(f"no matching event among {seen}")


def test_client_receives_cluster_status_changes(asgi_server, owner, make_member, catalog):
    tenant = owner.memberships.get().tenant
    outsider = make_member("globex", "owner")
    with open_socket(asgi_server, owner) as mine, open_socket(asgi_server, outsider) as theirs:
        cluster = create_cluster(
            context=TenantContext(tenant, "owner"),
            name="live",
            kubernetes_version=KubernetesVersion.objects.get(version="1.35"),
            region=Region.objects.get(name="us-east-1"),
            control_plane_nodes=1,
        )
        event, seen = receive_until(mine, lambda e: e["status"] == "running")
        assert event == {
            "type": "cluster.status",
            "cluster": cluster.pk,
            "name": "live",
            "status": "running",
            "reason": "",
            "message": "",
        }
        assert seen[0]["status"] == "provisioning"
        # The other tenant's socket hears nothing of it.
        with pytest.raises(TimeoutError):
            theirs.recv(timeout=1)


def assert_refused(server, path, user=None, token=None):
    """A refused stream is accepted and closed at once with 4403, never sending an event."""
    if token is not None:
        ws = token_socket(server, token, path)
    elif user is None:
        ws = connect(
            f"ws://127.0.0.1:{server.port}{path}",
            additional_headers={"Origin": f"http://127.0.0.1:{server.port}"},
            open_timeout=10,
        )
    else:
        ws = open_socket(server, user, path)
    with ws, pytest.raises(ConnectionClosed) as closed:
        ws.recv(timeout=10)
    assert closed.value.rcvd.code == 4403


def test_sockets_refuse_strangers(asgi_server, owner, make_member, make_cluster):
    foreign = make_cluster(make_member("globex", "owner").memberships.get().tenant, "secret")
    mine = make_cluster(owner.memberships.get().tenant, "mine")
    assert_refused(asgi_server, f"/ws/events/?cluster={foreign.pk}", owner)
    assert_refused(asgi_server, "/ws/events/?cluster=not-a-number", owner)
    assert_refused(asgi_server, "/ws/events/")  # anonymous
    flush()  # the clusters' own events (sent after a short linger) are out before the socket opens
    with open_socket(asgi_server, owner, f"/ws/events/?cluster={mine.pk}") as ws:
        with pytest.raises(TimeoutError):
            ws.recv(timeout=0.5)  # accepted, and quiet until something changes


def test_events_committed_together_arrive_as_frames_in_order(asgi_server, owner):
    """A transaction's events travel as one channel-layer message per group; the client still gets
    one frame per event, in the order they were broadcast."""
    from django.db import transaction

    from nvke.realtime import broadcast

    tenant = owner.memberships.get().tenant
    with open_socket(asgi_server, owner) as socket:
        with transaction.atomic():
            for n in range(50):
                broadcast(tenant.pk, {"type": "test.tick", "n": n})
        flush()
        frames = [json.loads(socket.recv(timeout=10)) for _ in range(50)]
    assert [f["n"] for f in frames] == list(range(50))


def test_removing_a_member_closes_their_open_streams(asgi_server, owner, make_member):
    """Events and telemetry sockets of a removed member close with 4403; another member's stay open."""
    from nvke.tenancy.models import Membership
    from nvke.tenancy.services import remove_member

    tenant = owner.memberships.get().tenant
    leaving = make_member("acme", "member", username="leaving")
    staying = make_member("acme", "member", username="staying")
    with (
        open_socket(asgi_server, leaving) as events,
        open_socket(asgi_server, leaving, "/ws/telemetry/") as telemetry,
        open_socket(asgi_server, staying) as other,
    ):
        json.loads(telemetry.recv(timeout=10))  # the telemetry stream's hello: it is open
        remove_member(context=TenantContext(tenant, "owner"), membership=Membership.objects.get(user=leaving))
        assert [close_code(socket) for socket in (events, telemetry)] == [4403, 4403]
        with pytest.raises(TimeoutError):
            other.recv(timeout=0.5)  # still open, and quiet


def test_deactivating_a_user_or_taking_staff_away_closes_their_streams(asgi_server, owner, make_member):
    """Deactivated (as the admin does: the user row saved): every stream of the user, session and token,
    closes with 4403; no longer staff: only the operators' stream; deleted: every stream."""
    from django.contrib.auth import get_user_model

    from nvke.tenancy.models import ApiToken

    leaving = make_member("acme", "member", username="leaving")
    _, raw = ApiToken.issue(tenant=owner.memberships.get().tenant, user=leaving, name="script")
    operator = make_member("acme", "member", username="operator")
    get_user_model().objects.filter(pk=operator.pk).update(is_staff=True)
    operator.refresh_from_db()
    with (
        open_socket(asgi_server, leaving) as events,
        token_socket(asgi_server, raw, "/ws/telemetry/") as telemetry,
        open_socket(asgi_server, operator, "/ws/events/?rollouts=1") as operators,
        open_socket(asgi_server, operator) as operators_tenant,
        open_socket(asgi_server, owner) as other,
    ):
        json.loads(telemetry.recv(timeout=10))  # the telemetry stream's hello: it is open
        leaving.last_login = timezone.now()
        leaving.save(update_fields=["last_login"])  # a sign-in: nothing closes
        with pytest.raises(TimeoutError):
            events.recv(timeout=0.5)
        leaving.is_active = False
        leaving.save()
        assert [close_code(events), close_code(telemetry)] == [4403, 4403]
        operator.is_staff = False
        operator.save()
        assert close_code(operators) == 4403
        with pytest.raises(TimeoutError):
            operators_tenant.recv(timeout=0.5)  # their tenant's stream stays: they are still a member
        operator.delete()
        assert close_code(operators_tenant) == 4403
        with pytest.raises(TimeoutError):
            other.recv(timeout=0.5)  # someone else's stays open


def test_claim_events_name_the_pool_they_concern(asgi_server, owner, api, make_cluster, make_pool):
    """So a pool's pages follow only their own claims: placed and released in a pool, moved within it
    (from_pool), pending without one."""
    from nodepools.services import reconcile

    cluster = make_cluster(owner.memberships.get().tenant, "prod")
    pool = make_pool(cluster, name="frac", nodes=1, gpus_per_node=4, sharing_mode="fractional")
    pool.placement_policy = "spread"
    pool.save()
    reconcile(pool.pk)

    def claim(name, percent):
        body = {"cluster": cluster.pk, "name": name, "kind": "fraction", "compute_percent": percent}
        return api.post("/api/v1/claims/", body, format="json").data

    def event(socket, type_, claim_id=None):
        flush()
        wanted = lambda e: e["type"] == type_ and claim_id in (None, e["claim"])  # noqa: E731
        return receive_until(socket, wanted, limit=50)[0]

    with open_socket(asgi_server, owner, f"/ws/events/?cluster={cluster.pk}") as socket:
        spread = [claim(f"s{i}", 25) for i in range(4)]  # one per GPU
        assert event(socket, "claim.status", spread[0]["id"])["pool"] == pool.pk
        assert api.post(f"/api/v1/clusters/{cluster.pk}/defrag/", {"max_moves": 1}).status_code == 200
        moved = event(socket, "claim.moved")
        assert moved["claim"] in {c["id"] for c in spread}
        assert (moved["pool"], moved["from_pool"]) == (pool.pk, pool.pk)
        full = claim("full", 100)  # the GPU the move emptied
        assert full["status"] == "allocated"
        waiting = claim("waiting", 100)
        assert waiting["status"] == "pending"
        assert event(socket, "claim.status", waiting["id"])["pool"] is None
        assert api.delete(f"/api/v1/claims/{full['id']}/").status_code == 204
        assert event(socket, "claim.released", full["id"])["pool"] == pool.pk
