"""Password guessing: after too many failed sign-ins from one address — for one username, or for all of
them — sign-ins from there are refused for a while. The authentication backend enforces it (web UI,
admin, anything that checks a password through Django), and the sign-in page says so with a 429."""

from django.conf import settings
from django.contrib.auth.backends import ModelBackend
from django.contrib.auth.signals import user_logged_in, user_login_failed
from django.dispatch import receiver

from nvke import ratelimit
from nvke.addresses import request_address


def _counters(request, username: str) -> list[tuple[str, int]]:
    ip = request_address(request) or "unknown"
    return [
        (f"login-failures:{ip}", settings.NVKE_LOGIN_FAILURES_PER_ADDRESS),
        (f"login-failures:{ip}:{username.lower()}", settings.NVKE_LOGIN_FAILURES_PER_USER),
    ]


def refused_for(request, username: str) -> int | None:
    """Seconds until sign-ins from this address (for this username) are taken again, or None."""
    counters = _counters(request, username)
    counts = ratelimit.failures(*(key for key, _ in counters))
    if any(count >= limit for count, (_, limit) in zip(counts, counters, strict=True)):
        return settings.NVKE_LOGIN_LOCKOUT_S
    return None


@receiver(user_login_failed)
def _count_failure(sender, credentials, request=None, **kwargs) -> None:
    if request is None:
        return
    for key, _ in _counters(request, credentials.get("username") or ""):
        # The window starts at the first failure; counting on does not extend it (one atomic step:
        # Django's cache.incr checks, then increments, and could leave a counter without expiry).
        ratelimit.add_failure(key, settings.NVKE_LOGIN_LOCKOUT_S)


@receiver(user_logged_in)
def _forget_failures(sender, request=None, user=None, **kwargs) -> None:
    if request is not None and user is not None:
        ratelimit.forget(_counters(request, user.get_username())[1][0])


class ThrottledModelBackend(ModelBackend):
    """Django's password check, refused while the address is locked out."""

    def authenticate(self, request, username=None, password=None, **kwargs):
        if request is not None and refused_for(request, username or ""):
            return None
        return super().authenticate(request, username=username, password=password, **kwargs)
