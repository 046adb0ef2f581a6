"""Rate limits per token and per user, and per address for failed authentications and anonymous
handshakes: 429 (or 4429) with Retry-After once a caller is over its rate; atomic under concurrency."""

import secrets
import threading
import time
from types import SimpleNamespace

import pytest
from django.core.cache import cache
from rest_framework.test import APIClient

from nvke import ratelimit
from nvke.api.throttling import TokenRateThrottle
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
    accepted and closed with 4429 (the server cannot answer a handshake with 429)."""
    settings.NVKE_RATE_LIMITS = {"token": "2/minute", "user": "100/minute"}
    raw = ApiToken.issue(tenant=owner.memberships.get().tenant, user=owner, name="a")[1]
    assert [ws_outcome("/ws/events/", token=raw) for _ in range(3)] == ["open", "open", "closed 4429"]
    assert bearer(raw).get("/api/v1/me/").status_code == 429  # the same budget as the API's
    settings.NVKE_RATE_LIMITS = {"token": "100/minute", "user": "3/minute"}
    other = ApiToken.issue(tenant=owner.memberships.get().tenant, user=owner, name="b")[1]
    assert ws_outcome("/ws/telemetry/", token=other) == "closed 4429"  # the user is past 3 this minute


def test_concurrent_clients_never_get_past_the_limit(owner, settings):
    """16 clients at once against one token's limit, each check through its own Redis connection: DRF's
    cache throttle (read the history, append, write it back) let 960 of 960 through a limit of 600;
    the counter is one Redis script per check, so exactly the limit passes."""
    limit = 600
    settings.NVKE_RATE_LIMITS = {"token": f"{limit}/day", "user": "1000000/day"}
    token, _ = ApiToken.issue(tenant=owner.memberships.get().tenant, user=owner, name="a")
    request = SimpleNamespace(user=owner, auth=token)

    def burst() -> tuple[int, int]:
        cache.clear()
        window = int(time.time() // 86400)
        barrier = threading.Barrier(16)
        allowed: list[int] = []

        def client() -> None:
            barrier.wait()
            allowed.append(sum(TokenRateThrottle().allow_request(request, None) for _ in range(limit // 10)))

        threads = [threading.Thread(target=client) for _ in range(16)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        return sum(allowed), int(time.time() // 86400) - window

    allowed, windows_crossed = burst()
    if windows_crossed:  # the day turned during the burst: the sliding window let a little more in
        allowed, windows_crossed = burst()
    assert allowed == limit


@pytest.mark.parametrize("redis", [True, False], ids=["redis", "memory"])
def test_the_window_slides(settings, monkeypatch, redis):
    """The previous window's count weighs in by the share of it still inside the sliding window, so no
    burst of twice the limit fits across a boundary; the retry time is when the count falls back."""
    if not redis:
        settings.REDIS_URL = ""  # the in-process counters, emptied before each test (tests/conftest.py)
    clock = [6000.0 + 50]  # 50 s into a minute window
    monkeypatch.setattr(ratelimit.time, "time", lambda: clock[0])
    assert [ratelimit.hit("slide", 3, 60).allowed for _ in range(4)] == [True, True, True, False]
    clock[0] = 6060.0 + 10  # 10 s into the next: 3 × 50/60 = 2.5 still count
    first, second = ratelimit.hit("slide", 3, 60), ratelimit.hit("slide", 3, 60)
    assert first.allowed and not second.allowed
    # 2.5 + 1 ≥ 3 until the previous window's share is below 2: 3 × (1 − t/60) < 2 from t = 20 s.
    assert second.retry_after_s == pytest.approx(10.0)
    clock[0] = 6060.0 + 21
    assert ratelimit.hit("slide", 3, 60).allowed


@pytest.mark.parametrize("redis", [True, False], ids=["redis", "memory"])
def test_several_counters_in_one_call_count_each_within_its_own_limit(settings, redis):
    """A request's token and user counters go to Redis in one call: each counts the request when within
    its own limit, even when the other refuses, as two separate throttles did."""
    if not redis:
        settings.REDIS_URL = ""  # the in-process counters, emptied before each test (tests/conftest.py)
    tight, loose = ("both-tight", 2, 60), ("both-loose", 5, 60)
    decisions = [[d.allowed for d in ratelimit.hit_all([tight, loose])] for _ in range(4)]
    assert decisions == [[True, True], [True, True], [False, True], [False, True]]
    refused = ratelimit.hit_all([tight, loose])[0]
    assert not refused.allowed and refused.retry_after_s >= 1
    assert ratelimit.hit("both-loose", 5, 60).allowed is False  # the refused requests counted there
    assert ratelimit.hit_all([]) == []


def test_failed_token_authentications_are_limited_per_address(owner, settings):
    """Random bearer tokens from one address: 401 up to the limit, then 429 for every token request
    from there (a working token too) before any lookup; another address is not affected."""
    settings.NVKE_RATE_LIMIT_AUTH_FAILURES = "20/minute"
    guesser = APIClient(REMOTE_ADDR="203.0.113.5")
    codes = []
    for _ in range(30):
        guesser.credentials(HTTP_AUTHORIZATION=f"Bearer nvke_{secrets.token_urlsafe(32)}")
        codes.append(guesser.get("/api/v1/me/").status_code)
    assert codes == [401] * 20 + [429] * 10
    _, raw = ApiToken.issue(tenant=owner.memberships.get().tenant, user=owner, name="a")
    guesser.credentials(HTTP_AUTHORIZATION=f"Bearer {raw}")
    refused = guesser.get("/api/v1/me/")
    assert refused.status_code == 429 and int(refused["Retry-After"]) > 0
    assert refused.data["code"] == "throttled"
    elsewhere = APIClient(REMOTE_ADDR="203.0.113.6")
    elsewhere.credentials(HTTP_AUTHORIZATION=f"Bearer {raw}")
    assert elsewhere.get("/api/v1/me/").status_code == 200


@pytest.mark.django_db(transaction=True)
def test_bad_token_and_anonymous_handshakes_are_limited_per_address(owner, settings):
    settings.NVKE_RATE_LIMIT_AUTH_FAILURES = "3/minute"
    settings.NVKE_RATE_LIMIT_ANONYMOUS = "2/minute"
    outcomes = [ws_outcome("/ws/events/", token=f"nvke_{secrets.token_urlsafe(8)}") for _ in range(5)]
    assert outcomes == ["refused"] * 3 + ["closed 4429"] * 2
    assert [ws_outcome("/ws/events/") for _ in range(4)] == ["closed 4403"] * 2 + ["closed 4429"] * 2
    # A signed-in session is not counted as anonymous.
    assert [ws_outcome("/ws/events/", owner) for _ in range(3)] == ["open"] * 3
