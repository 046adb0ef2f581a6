"""API rate limits, per token and per user, counted in the shared cache (Redis in production, so every
web process counts together). Over the limit: 429 with Retry-After. Rates come from settings
(NVKE_RATE_LIMIT_TOKEN, NVKE_RATE_LIMIT_USER) and are read per request, so tests can change them."""

from types import SimpleNamespace

from django.conf import settings
from rest_framework.throttling import SimpleRateThrottle

from nvke.tenancy.models import ApiToken


class _SettingsRateThrottle(SimpleRateThrottle):
    def get_rate(self) -> str | None:
        return settings.NVKE_RATE_LIMITS.get(self.scope)


class TokenRateThrottle(_SettingsRateThrottle):
    """Requests made with one API token."""

    scope = "token"

    def get_cache_key(self, request, view) -> str | None:
        if not isinstance(request.auth, ApiToken):
            return None
        return self.cache_format % {"scope": self.scope, "ident": request.auth.pk}


class UserRateThrottle(_SettingsRateThrottle):
    """Requests of one user, by session and all their tokens together."""

    scope = "user"

    def get_cache_key(self, request, view) -> str | None:
        if not request.user or not request.user.is_authenticated:
            return None
        return self.cache_format % {"scope": self.scope, "ident": request.user.pk}


def handshake_allowed(token: ApiToken) -> bool:
    """A websocket handshake with a token counts as one request of the token and of its user, in the
    same counters as the API. Like DRF, every throttle counts the request even when another refuses."""
    request = SimpleNamespace(user=token.user, auth=token)
    throttles = (TokenRateThrottle(), UserRateThrottle())
    return all([throttle.allow_request(request, None) for throttle in throttles])
