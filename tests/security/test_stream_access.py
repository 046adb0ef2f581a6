"""Access that ends between a websocket's handshake check and its joining the groups that close it
(token revoked, member removed, staff flag taken) sends its close to nobody: the stream checks again
once joined. The window is forced by ending access right after the consumer resolved its tenant."""

import pytest
from channels.db import database_sync_to_async

import clusters.consumers
import telemetry.consumers
from nvke.tenancy.models import ApiToken, Membership
from nvke.tenancy.services import revoke_token

from .test_isolation_matrix import ws_outcome

RESOLVERS = {
    "/ws/events/": (clusters.consumers, "_group_for"),
    "/ws/telemetry/": (telemetry.consumers, "resolve_view"),
}


def end_access_after_resolving(monkeypatch, path: str, end_access) -> None:
    module, name = RESOLVERS[path]
    resolve = getattr(module, name)

    async def resolve_then_end_access(*args):
        resolved = await resolve(*args)
        await database_sync_to_async(end_access)()
        return resolved

    monkeypatch.setattr(module, name, resolve_then_end_access)


@pytest.fixture
def token(owner) -> str:
    _, raw = ApiToken.issue(tenant=owner.memberships.get().tenant, user=owner, name="stream")
    return raw


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("path", RESOLVERS)
def test_a_token_revoked_during_the_handshake_closes_the_stream(monkeypatch, path, token):
    assert ws_outcome(path, token=token) == "open"
    end_access_after_resolving(monkeypatch, path, lambda: revoke_token(ApiToken.objects.get()))
    assert ws_outcome(path, token=token) == "closed 4403"


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("path", RESOLVERS)
def test_a_member_removed_during_the_handshake_sees_the_stream_closed(monkeypatch, path, owner):
    assert ws_outcome(path, owner) == "open"
    end_access_after_resolving(monkeypatch, path, lambda: Membership.objects.filter(user=owner).delete())
    assert ws_outcome(path, owner) == "closed 4403"


@pytest.mark.django_db(transaction=True)
def test_staff_flag_taken_during_the_handshake_closes_the_operators_stream(monkeypatch, owner):
    owner.is_staff = True
    owner.save()
    assert ws_outcome("/ws/events/?rollouts=1", owner) == "open"

    def take_staff_flag():
        owner.is_staff = False
        owner.save()

    end_access_after_resolving(monkeypatch, "/ws/events/", take_staff_flag)
    assert ws_outcome("/ws/events/?rollouts=1", owner) == "closed 4403"


@pytest.mark.django_db(transaction=True)
def test_an_operator_token_revoked_during_the_handshake_closes_the_operators_stream(monkeypatch, owner):
    """The operators' stream checked only the staff flag once joined, not the token it was opened with."""
    owner.is_staff = True
    owner.save()
    _, raw = ApiToken.issue(tenant=None, user=owner, name="operator")
    assert ws_outcome("/ws/events/?rollouts=1", token=raw) == "open"
    end_access_after_resolving(monkeypatch, "/ws/events/", lambda: revoke_token(ApiToken.objects.get()))
    assert ws_outcome("/ws/events/?rollouts=1", token=raw) == "closed 4403"
