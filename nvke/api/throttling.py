"""API rate limits, per token and per user, and per client address for failed authentications and
anonymous websocket handshakes. Counted atomically in Redis (nvke/ratelimit.py), so every web process
counts together and concurrent requests cannot slip past a limit together. Over a limit: 429 with
Retry-After. Rates come from settings (NVKE_RATE_LIMIT_*) and are read per request, so tests can change
them."""

from types import SimpleNamespace

from django.conf import settings
from rest_framework.throttling import BaseThrottle

from nvke import ratelimit
from nvke.ratelimit import parse_rate
from nvke.tenancy.models import ApiToken


class _CounterThrottle(BaseThrottle):
    scope = ""

    def __init__(self) -> None:
        self.retry_after_s: float | None = None

    def get_cache_key(self, request, view) -> str | None:
        raise NotImplementedError

    def allow_request(self, request, view) -> bool:
        rate = settings.NVKE_RATE_LIMITS.get(self.scope)
        key = self.get_cache_key(request, view)
        if not rate or key is None:
            return True
        decision = ratelimit.hit(key, *parse_rate(rate))
        self.retry_after_s = decision.retry_after_s
        return decision.allowed

    def wait(self) -> float | None:
        return self.retry_after_s


class TokenRateThrottle(_CounterThrottle):
    """Requests made with one API token."""

    scope = "token"

    def get_cache_key(self, request, view) -> str | None:
        if not isinstance(request.auth, ApiToken):
            return None
        return f"token:{request.auth.pk}"


class UserRateThrottle(_CounterThrottle):
    """Requests of one user, by session and all their tokens together."""

    scope = "user"

    def get_cache_key(self, request, view) -> str | None:
        if not request.user or not request.user.is_authenticated:
            return None
        return f"user:{request.user.pk}"


class RequestRateThrottle(BaseThrottle):
    """The API's throttle: the token's and the user's limits checked in one Redis round trip (as two
    throttles they cost two on every request). Like DRF with several throttles, each counter counts
    the request when within its own limit, even when the other refuses; the wait is the longer one."""

    parts = (TokenRateThrottle, UserRateThrottle)

    def __init__(self) -> None:
        self.retry_after_s: float | None = None

    def allow_request(self, request, view) -> bool:
        checks = []
        for part in self.parts:
            rate = settings.NVKE_RATE_LIMITS.get(part.scope)
            key = part().get_cache_key(request, view)
            if rate and key is not None:
                checks.append((key, *parse_rate(rate)))
        refused = [d.retry_after_s for d in ratelimit.hit_all(checks) if not d.allowed]
        self.retry_after_s = max(refused, default=None)
        return not refused

    def wait(self) -> float | None:
        return self.retry_after_s


def handshake_allowed(token: ApiToken) -> bool:
    """A websocket handshake with a token counts as one request of the token and of its user, in the
    same counters as the API."""
    return RequestRateThrottle().allow_request(SimpleNamespace(user=token.user, auth=token), None)


def anonymous_handshake_allowed(address: str | None) -> bool:
    """A websocket handshake without a credential, counted per client address."""
    key = f"ws-anonymous:{address or 'unknown'}"
    return ratelimit.hit(key, *parse_rate(settings.NVKE_RATE_LIMIT_ANONYMOUS)).allowed
