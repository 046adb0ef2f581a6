"""The operator's console (staff only): the whole fleet across tenants — tenants with their use and
quotas, capacity by region and model, upgrades and rollouts in flight, failing nodes and GPUs — with
links into the admin console for edits. Reads only (frontend/fleet_console.py)."""

from django.http import HttpRequest, HttpResponse
from django.shortcuts import render

from .. import fleet_console
from .shared import staff_view


@staff_view
def fleet_console_page(request: HttpRequest) -> HttpResponse:
    nodes, gpus = fleet_console.failing_nodes(), fleet_console.failing_gpus()
    return render(
        request,
        "frontend/fleet.html",
        {
            "tenants": fleet_console.tenants(),
            "capacity": fleet_console.capacity_by_region(),
            "runs": fleet_console.runs_in_flight(),
            "rollouts": fleet_console.rollouts_in_flight(),
            "failing_nodes": nodes[: fleet_console.FAILING_SHOWN],
            "failing_nodes_count": nodes.count(),
            "failing_gpus": gpus[: fleet_console.FAILING_SHOWN],
            "failing_gpus_count": gpus.count(),
        },
    )
