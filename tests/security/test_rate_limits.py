"""Rate limits per token and per user: 429 with Retry-After once a caller is over its rate."""

import pytest
from django.core.cache import cache
from rest_framework.test import APIClient

from nvke.tenancy.models import ApiToken

from .test_isolation_matrix import ws_outcome

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def fresh_counters():
    cache.clear()
    yield
    cache.clear()


def bearer(raw: str) -> APIClient:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {raw}")
    return client


def test_each_token_has_its_own_budget(owner, settings):
    settings.NVKE_RATE_LIMITS = {"token": "3/minute", "user": "100/minute"}
    tenant = owner.memberships.get().tenant
    first = bearer(ApiToken.issue(tenant=tenant, user=owner, name="a")[1])
    second = bearer(ApiToken.issue(tenant=tenant, user=owner, name="b")[1])
    assert [first.get("/api/v1/me/").status_code for _ in range(3)] == [200, 200, 200]
    limited = first.get("/api/v1/me/")
    assert limited.status_code == 429
    assert 0 < int(limited["Retry-After"]) <= 60
    assert limited.data["code"] == "throttled" and limited.data["details"]["retry_after_s"] > 0
    assert second.get("/api/v1/me/").status_code == 200


def test_a_user_is_limited_across_session_and_tokens(owner, settings):
    settings.NVKE_RATE_LIMITS = {"token": "100/minute", "user": "4/minute"}
    session = APIClient()
    session.force_authenticate(owner)
    token = bearer(ApiToken.issue(tenant=owner.memberships.get().tenant, user=owner, name="a")[1])
    codes = [client.get("/api/v1/me/").status_code for client in (session, token, session, token, session)]
    assert codes == [200, 200, 200, 200, 429]


@pytest.mark.django_db(transaction=True)
def test_websocket_handshakes_count_as_requests_of_the_token_and_user(owner, settings):
    """A handshake with a token is one request in the API's counters; over the limit the socket is
    accepted and closed with 4429 (daphne cannot answer a handshake with 429)."""
    settings.NVKE_RATE_LIMITS = {"token": "2/minute", "user": "100/minute"}
    raw = ApiToken.issue(tenant=owner.memberships.get().tenant, user=owner, name="a")[1]
    assert [ws_outcome("/ws/events/", token=raw) for _ in range(3)] == ["open", "open", "closed 4429"]
    assert bearer(raw).get("/api/v1/me/").status_code == 429  # the same budget as the API's
    settings.NVKE_RATE_LIMITS = {"token": "100/minute", "user": "3/minute"}
    other = ApiToken.issue(tenant=owner.memberships.get().tenant, user=owner, name="b")[1]
    assert ws_outcome("/ws/telemetry/", token=other) == "closed 4429"  # the user is past 3 this minute
