"""Who is acting, for the audit log. A middleware keeps the current request in a context variable; the
recorder reads the user, the API token and the client address from it when a change is saved. DRF's
authentication sets `user` and `auth` on the underlying Django request too, so token requests are
attributed to their token. Outside a request (Celery tasks, management commands) the actor is `system`,
or the control loop that says who it is (`acting_as`)."""

from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass

from nvke.addresses import request_address
from nvke.tenancy.models import ApiToken

_request: ContextVar = ContextVar("nvke_audit_request", default=None)
_system: ContextVar = ContextVar("nvke_audit_system", default="system")


@dataclass(frozen=True)
class Actor:
    label: str
    user_id: int | None = None
    token_id: int | None = None
    ip: str | None = None


def current_actor() -> Actor:
    request = _request.get()
    if request is None:
        return Actor(_system.get())
    user = getattr(request, "user", None)
    ip = request_address(request)
    if user is None or not user.is_authenticated:
        return Actor("anonymous", ip=ip)
    token = getattr(request, "auth", None)
    if isinstance(token, ApiToken):
        return Actor(f"{user.get_username()} (token {token.name} {token.key_prefix}…)", user.pk, token.pk, ip)
    return Actor(user.get_username(), user.pk, None, ip)


@contextmanager
def acting_as(system_actor: str):
    """Outside a request: changes are recorded as this control loop's (e.g. `autoscaler`), not `system`."""
    token = _system.set(system_actor)
    try:
        yield
    finally:
        _system.reset(token)


@contextmanager
def acting(request):
    token = _request.set(request)
    try:
        yield
    finally:
        _request.reset(token)


class AuditContextMiddleware:
    """Makes the request the audit log's source of who and from where, for the request's duration."""

    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        with acting(request):
            return self.get_response(request)
