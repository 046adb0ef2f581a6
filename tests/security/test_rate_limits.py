"""Rate limits per token and per user, and per address for failed authentications and anonymous
handshakes: 429 (or 4429) with Retry-After once a caller is over its rate; atomic under concurrency."""

import secrets
import threading
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
    assert sum(allowed) == limit


@pytest.mark.parametrize("redis", [True, False], ids=["redis", "memory"])
def test_no_stretch_of_the_period_holds_more_than_the_limit(settings, monkeypatch, redis):
    """The limit holds over every stretch of the rate's period, not per fixed window: a burst at the end
    of one minute and more 31 s later (the approximation weighed the first burst at half by then and let
    1.5 × the limit through in 31 s) get the limit through, no more; each request leaves the count a
    period after it passed, which is what Retry-After says."""
    if not redis:
        settings.REDIS_URL = ""  # the in-process counters, emptied before each test (tests/conftest.py)
    clock = [0.0]
    monkeypatch.setattr(ratelimit.time, "time", lambda: clock[0])
    passed = []  # times let through
    for at, tries in ((6059.0, 700), (6090.0, 700), (6110.0, 10)):
        clock[0] = at
        passed += [at for _ in range(tries) if ratelimit.hit("bound", 600, 60).allowed]
    assert passed == [6059.0] * 600  # 6090 and 6110 are within a minute of the first burst
    refused = ratelimit.hit("bound", 600, 60)
    assert not refused.allowed and refused.retry_after_s == pytest.approx(6059 + 60 - 6110, abs=0.01)
    clock[0] = 6059.0 + 60.01
    assert [ratelimit.hit("bound", 600, 60).allowed for _ in range(601)] == [True] * 600 + [False]


def test_without_redis_requests_are_503_with_a_code_not_500(owner, settings):
    """Redis down: an authenticated request is refused as unavailable with the limiter's code (not a
    500, and not let through uncounted); so is a failed authentication, which the limiter counts too."""
    settings.NVKE_RATE_LIMITS = {"token": "600/minute", "user": "1200/minute"}
    raw = ApiToken.issue(tenant=owner.memberships.get().tenant, user=owner, name="a")[1]
    settings.REDIS_URL = "redis://127.0.0.1:1/0"  # nothing listens on port 1
    ratelimit._client.cache_clear()
    ratelimit._scripts.cache_clear()
    try:
        for client in (bearer(raw), bearer("nvke_not-a-token")):
            response = client.get("/api/v1/me/")
            assert response.status_code == 503, response.content
            assert response.json()["code"] == "rate_limiter_unavailable"
    finally:
        ratelimit._client.cache_clear()
        ratelimit._scripts.cache_clear()


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


@pytest.mark.parametrize("path", ["/login/", "/admin/login/"])
def test_without_redis_a_sign_in_page_says_503_not_500(client, settings, path):
    """The sign-in lockout lives in Redis too: with it down, a sign-in is refused as unavailable."""
    settings.REDIS_URL = "redis://127.0.0.1:1/0"  # nothing listens on port 1
    ratelimit._client.cache_clear()
    ratelimit._scripts.cache_clear()
    try:
        response = client.post(path, {"username": "someone", "password": "guess"})
        assert response.status_code == 503, response.content[:200]
        assert b"Redis" in response.content and response["Retry-After"] == "5"
    finally:
        ratelimit._client.cache_clear()
        ratelimit._scripts.cache_clear()
