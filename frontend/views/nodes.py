"""A node's page: each GPU's memory and compute to scale, one segment per claim, and the host's CPU and
memory held."""

from django.db.models import Count, Sum
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, render
from django.urls import reverse

from catalog.models import SharingMode
from claims.models import Allocation, Claim
from nodepools import preflight
from nodepools.models import Node
from nvke.tenancy.context import TenantContext

from ..snapshot import host_usage
from .shared import gpus_with_shares, live, tenant_view


@tenant_view
def node_detail(request: HttpRequest, context: TenantContext, pk: int) -> HttpResponse:
    node = get_object_or_404(
        Node.objects.restrict(context).select_related("pool__cluster", "pool__gpu_model"), pk=pk
    )
    pool = node.pool
    held = Allocation.objects.filter(node=node, claim__status=Claim.Status.ALLOCATED).aggregate(
        cpu=Sum("cpu_milli"), memory=Sum("host_memory_mib"), claims=Count("pk")
    )
    return render(
        request,
        "frontend/node_detail.html",
        {
            "node": node,
            "pool": pool,
            "gpus": gpus_with_shares().filter(node=node),
            "mig": pool.sharing_mode == SharingMode.MIG,
            "host": host_usage(node, held["cpu"] or 0, held["memory"] or 0),
            "preflight_failures": preflight.failures(node, pool),
            "claim_count": held["claims"],
            "live": live(
                f"cluster={pool.cluster_id}",
                refresh_on=f"pool:{pool.pk}",  # node sync and its claims move it
                gone_on=f"pool:{pool.pk}",
                gone_url=reverse("cluster-detail", args=[pool.cluster_id]),
            ),
        },
    )
