"""What the view modules share: the tenant_view and staff_view decorators and the role checks, the
live.js settings of a page, and the GPU query behind the pool and node snapshots. It imports no other
view module, so every one of them may import it."""

from collections.abc import Callable
from functools import wraps

from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied
from django.db.models import Prefetch, QuerySet
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import render

from claims.models import GpuShare
from nodepools.models import Gpu
from nvke.tenancy.context import TenantContext, resolve_tenant
from nvke.tenancy.roles import Action

WS_EVENTS = "/ws/events/"  # nvke/routing.py

TenantView = Callable[..., HttpResponse]


def tenant_view(view: TenantView) -> Callable[..., HttpResponse]:
    """Sign-in required; the view gets the request's tenant context. A user in no tenant gets a page
    that says so instead of empty lists."""

    @login_required
    @wraps(view)
    def wrapper(request: HttpRequest, *args, **kwargs) -> HttpResponse:
        context = resolve_tenant(request)
        if context is None:
            return render(request, "frontend/no_tenant.html", status=403)
        return view(request, context, *args, **kwargs)

    return wrapper


def staff_view(view: Callable[..., HttpResponse]) -> Callable[..., HttpResponse]:
    """Sign-in required; anyone but staff (the platform's operators) gets a 404, as if the page did
    not exist."""

    @login_required
    @wraps(view)
    def wrapper(request: HttpRequest, *args, **kwargs) -> HttpResponse:
        if not request.user.is_staff:
            raise Http404("No such page.")
        return view(request, *args, **kwargs)

    return wrapper


def require_change(context: TenantContext) -> None:
    if not context.allows(Action.CHANGE):
        raise PermissionDenied("Your role in this tenant may only view.")


def require_manage(context: TenantContext) -> None:
    if not context.allows(Action.MANAGE):
        raise PermissionDenied("Only the tenant's owners and admins may do this.")


def live(ws_query: str = "", refresh_on: str = "", gone_on: str = "", gone_url: str = "") -> dict:
    """What live.js needs, rendered as data attributes on <body> (see base.html)."""
    return {
        "ws_url": WS_EVENTS + (f"?{ws_query}" if ws_query else ""),
        "refresh_on": refresh_on,
        "gone_on": gone_on,
        "gone_url": gone_url,
    }


def gpus_with_shares() -> QuerySet[Gpu]:
    """GPUs in index order with each claim share (and its claim) prefetched, for the GPU snapshot of a
    pool's page and a node's."""
    shares = GpuShare.objects.select_related("allocation__claim").order_by("mig_start", "pk")
    return Gpu.objects.order_by("index").prefetch_related(Prefetch("shares", queryset=shares))
