"""Password guessing: after too many failed sign-ins from one address — for one username, or for all of
them — sign-ins from there are refused for a while. The authentication backend enforces it (web UI,
admin, anything that checks a password through Django), and the sign-in page says so with a 429."""

from django.conf import settings
from django.contrib.auth.backends import ModelBackend
from django.contrib.auth.signals import user_logged_in, user_login_failed
from django.core.cache import cache
from django.dispatch import receiver

from nvke.addresses import request_address


def _counters(request, username: str) -> list[tuple[str, int]]:
    ip = request_address(request) or "unknown"
    return [
        (f"login-failures:{ip}", settings.NVKE_LOGIN_FAILURES_PER_ADDRESS),
        (f"login-failures:{ip}:{username.lower()}", settings.NVKE_LOGIN_FAILURES_PER_USER),
    ]


def refused_for(request, username: str) -> int | None:
    """Seconds until sign-ins from this address (for this username) are taken again, or None."""
    counts = cache.get_many([key for key, _ in _counters(request, username)])
    if any(counts.get(key, 0) >= limit for key, limit in _counters(request, username)):
        return settings.NVKE_LOGIN_LOCKOUT_S
    return None


@receiver(user_login_failed)
def _count_failure(sender, credentials, request=None, **kwargs) -> None:
    if request is None:
        return
    for key, _ in _counters(request, credentials.get("username") or ""):
        # The window starts at the first failure; counting on does not extend it.
        cache.add(key, 0, timeout=settings.NVKE_LOGIN_LOCKOUT_S)
        try:
            cache.incr(key)
        except ValueError:  # expired between add and incr
            cache.set(key, 1, timeout=settings.NVKE_LOGIN_LOCKOUT_S)


@receiver(user_logged_in)
def _forget_failures(sender, request=None, user=None, **kwargs) -> None:
    if request is not None and user is not None:
        cache.delete(_counters(request, user.get_username())[1][0])


class ThrottledModelBackend(ModelBackend):
    """Django's password check, refused while the address is locked out."""

    def authenticate(self, request, username=None, password=None, **kwargs):
        if request is not None and refused_for(request, username or ""):
            return None
        return super().authenticate(request, username=username, password=password, **kwargs)
