"""The fleet overview: clusters by status, GPU capacity by model, savings from sharing and the last
week's usage, and the clusters that need attention."""

import datetime

from django.contrib.auth.decorators import login_required
from django.db.models import Count
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.utils import timezone

from claims import usage
from claims.savings import savings
from clusters.models import Cluster
from nvke.tenancy.context import TenantContext, resolve_tenant

from ..overview import capacity_by_model, clusters_needing_attention
from .shared import live, tenant_view


@login_required
def dashboard(request: HttpRequest) -> HttpResponse:
    """The tenant's overview; an operator in no tenant starts at the whole fleet instead."""
    if request.user.is_staff and resolve_tenant(request) is None:
        return redirect("fleet-console")
    return tenant_dashboard(request)


@tenant_view
def tenant_dashboard(request: HttpRequest, context: TenantContext) -> HttpResponse:
    clusters = Cluster.objects.restrict(context)
    by_status = dict(clusters.values_list("status").annotate(n=Count("pk")).order_by())
    recent = clusters.select_related("region").annotate(pool_count=Count("node_pools")).order_by("name")
    by_cluster, by_pool = savings(context.tenant)
    week = usage.report(context.tenant, timezone.now() - datetime.timedelta(days=7), timezone.now(), "tenant")
    return render(
        request,
        "frontend/dashboard.html",
        {
            "status_counts": [
                (value, label, by_status.get(value, 0)) for value, label in Cluster.Status.choices
            ],
            "cluster_total": sum(by_status.values()),
            "gpus_by_model": capacity_by_model(context),
            "attention": clusters_needing_attention(context),
            "clusters": recent[:10],
            "savings_clusters": by_cluster,
            "savings_pools": by_pool,
            "savings_week": week[0] if week else None,
            "live": live(refresh_on="*"),  # every event may move a count
        },
    )
