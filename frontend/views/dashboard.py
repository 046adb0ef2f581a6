"""The fleet overview: clusters by status, GPU capacity by model, savings from sharing and the last
week's usage, and the clusters that need attention."""

import datetime

from django.db.models import Count
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.utils import timezone

from claims import usage
from claims.savings import savings
from clusters.models import Cluster
from nvke.tenancy.context import TenantContext

from ..overview import capacity_by_model, clusters_needing_attention
from .shared import live, tenant_view


@tenant_view
def dashboard(request: HttpRequest, context: TenantContext) -> HttpResponse:
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
