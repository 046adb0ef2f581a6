"""Live telemetry pages: the fleet or a cluster (heatmap, per-pool charts), a pool (per-GPU charts),
a GPU. The page renders the GPU list and the recent decisions; telemetry.js draws the charts from one
websocket (ws/telemetry/, coalesced frames) and adds decisions as they arrive. Another tenant's
cluster, pool or GPU is a 404."""

from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, render

from clusters.models import Cluster
from nodepools.models import Gpu, NodePool
from nvke.tenancy.context import TenantContext
from telemetry.models import ClaimScaling, TelemetryEvent

from ..chart_history import chart_history
from .shared import tenant_view

WS_TELEMETRY = "/ws/telemetry/"  # nvke/routing.py
RECENT_EVENTS = 20


def _page(
    request, template: str, context: TenantContext, ws_query: str, events, history: dict, **extra
) -> HttpResponse:
    return render(
        request,
        f"frontend/telemetry/{template}",
        {
            "telemetry_ws": WS_TELEMETRY + (f"?{ws_query}" if ws_query else ""),
            "history": history,  # the charts start from it (telemetry.js)
            "events": events.select_related("claim", "gpu__node", "node")[:RECENT_EVENTS],
            **extra,
        },
    )


@tenant_view
def fleet(request: HttpRequest, context: TenantContext) -> HttpResponse:
    pools = (
        NodePool.objects.restrict(context)
        .select_related("cluster", "gpu_model")
        .order_by("cluster__name", "name")
    )
    throttled = ClaimScaling.objects.restrict(context).filter(state=ClaimScaling.State.THROTTLED)
    return _page(
        request,
        "fleet.html",
        context,
        "",
        TelemetryEvent.objects.restrict(context),
        chart_history(Gpu.objects.restrict(context), per_gpu=False, per_pool=True),
        pools=pools,
        throttled=throttled.select_related("claim"),
    )


@tenant_view
def cluster(request: HttpRequest, context: TenantContext, pk: int) -> HttpResponse:
    """The fleet page, for one cluster: its GPUs' heatmap and its pools' charts."""
    instance = get_object_or_404(Cluster.objects.restrict(context), pk=pk)
    pools = NodePool.objects.restrict(context).filter(cluster=instance).select_related("cluster", "gpu_model")
    throttled = ClaimScaling.objects.restrict(context).filter(
        state=ClaimScaling.State.THROTTLED, claim__cluster=instance
    )
    return _page(
        request,
        "fleet.html",
        context,
        f"cluster={pk}",
        TelemetryEvent.objects.restrict(context).filter(cluster=instance),
        chart_history(
            Gpu.objects.restrict(context).filter(node__pool__cluster=instance), per_gpu=False, per_pool=True
        ),
        pools=pools.order_by("name"),
        throttled=throttled.select_related("claim"),
        cluster=instance,
    )


@tenant_view
def pool(request: HttpRequest, context: TenantContext, pk: int) -> HttpResponse:
    node_pool = get_object_or_404(NodePool.objects.restrict(context).select_related("cluster"), pk=pk)
    gpus = Gpu.objects.restrict(context).filter(node__pool=node_pool).select_related("node")
    return _page(
        request,
        "pool.html",
        context,
        f"pool={pk}",
        TelemetryEvent.objects.restrict(context).filter(cluster=node_pool.cluster_id),
        chart_history(gpus, per_gpu=True, per_pool=True),
        pool=node_pool,
        gpus=gpus,
    )


@tenant_view
def gpu(request: HttpRequest, context: TenantContext, pk: int) -> HttpResponse:
    device = get_object_or_404(Gpu.objects.restrict(context).select_related("node__pool__cluster"), pk=pk)
    return _page(
        request,
        "gpu.html",
        context,
        f"gpu={pk}",
        TelemetryEvent.objects.restrict(context).filter(gpu=device),
        chart_history(Gpu.objects.filter(pk=device.pk), per_gpu=True, per_pool=False),
        gpu=device,
    )
