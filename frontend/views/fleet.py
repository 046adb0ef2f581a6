"""The operator's console (staff only): the whole fleet across tenants — tenants with their use and
quotas, capacity by region and model, upgrades and rollouts in flight, failing nodes and GPUs — with
links into the admin console for edits. Reads only (upgrades/fleet_overview.py)."""

from django.contrib import messages
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.views.decorators.http import require_POST

from nvke.tenancy import services
from nvke.tenancy.models import ApiToken
from upgrades import fleet_overview

from .account import token_page
from .shared import staff_view


@staff_view
def fleet_console_page(request: HttpRequest) -> HttpResponse:
    nodes, gpus = fleet_overview.failing_nodes(), fleet_overview.failing_gpus()
    return render(
        request,
        "frontend/fleet.html",
        {
            "tenants": fleet_overview.tenants(),
            "capacity": fleet_overview.capacity_by_region(),
            "runs": fleet_overview.runs_in_flight(),
            "rollouts": fleet_overview.rollouts_in_flight(),
            "failing_nodes": nodes[: fleet_overview.FAILING_SHOWN],
            "failing_nodes_count": nodes.count(),
            "failing_gpus": gpus[: fleet_overview.FAILING_SHOWN],
            "failing_gpus_count": gpus.count(),
        },
    )


def _operator_tokens():
    return ApiToken.objects.select_related("user").filter(tenant=None, revoked_at__isnull=True)


@staff_view
def operator_tokens(request: HttpRequest) -> HttpResponse:
    """Operator tokens: in no tenant, for the API's fleet endpoints. Every operator sees them all."""
    return token_page(request, None, _operator_tokens(), operator=True)


@require_POST
@staff_view
def operator_token_revoke(request: HttpRequest, pk: int) -> HttpResponse:
    token = get_object_or_404(_operator_tokens(), pk=pk)
    services.revoke_token(token)
    messages.success(request, f"Token {token.name} is revoked.")
    return redirect("fleet-tokens")
