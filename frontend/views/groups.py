"""Claim group pages: a cluster's groups (gangs), and a group's page showing where its members landed on
the topology (node, NVLink clique, rack, zone) or why the group waits."""

from django.db.models import Prefetch
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, render

from claims import allocator
from claims.models import Allocation, Claim, ClaimGroup, GpuShare
from clusters.models import Cluster
from nvke.tenancy.context import TenantContext

from .shared import live, tenant_view

LEVELS = (("nvlink", "NVLink domains"), ("rack", "racks"), ("zone", "zones"))


@tenant_view
def group_list(request: HttpRequest, context: TenantContext, pk: int) -> HttpResponse:
    cluster = get_object_or_404(Cluster.objects.restrict(context), pk=pk)
    groups = ClaimGroup.objects.restrict(context).filter(cluster=cluster).prefetch_related("claims")
    rows = []
    for group in groups.order_by("namespace", "name"):
        placed = sum(1 for c in group.claims.all() if c.status == Claim.Status.ALLOCATED)
        rows.append({"group": group, "placed": placed, "whole": placed >= group.min_members})
    return render(
        request,
        "frontend/group_list.html",
        {
            "cluster": cluster,
            "rows": rows,
            "live": live(f"cluster={cluster.pk}", refresh_on=f"claims:{cluster.pk}"),
        },
    )


@tenant_view
def group_detail(request: HttpRequest, context: TenantContext, pk: int) -> HttpResponse:
    group = get_object_or_404(ClaimGroup.objects.restrict(context).select_related("cluster"), pk=pk)
    shares = GpuShare.objects.select_related("gpu").order_by("gpu__index")
    members = (
        Claim.objects.filter(group=group)
        .select_related("allocation__node__pool", "preempted_by")
        .prefetch_related(Prefetch("allocation__shares", queryset=shares))
        .order_by("name")
    )
    rows = [_member(claim) for claim in members]
    placed = [row for row in rows if row["node"]]
    spread = [
        (words, sorted({row["topology"][level] for row in placed if level in row["topology"]}))
        for level, words in LEVELS
    ]
    return render(
        request,
        "frontend/group_detail.html",
        {
            "group": group,
            "rows": rows,
            "placed": len(placed),
            "nodes": sorted({row["node"] for row in placed}),
            "spread": [(words, names) for words, names in spread if names],
            "waiting": next((row["claim"].pending_reason for row in rows if not row["node"]), ""),
            "live": live(f"cluster={group.cluster_id}", refresh_on=f"claims:{group.cluster_id}"),
        },
    )


def _member(claim: Claim) -> dict:
    allocation: Allocation | None = (
        getattr(claim, "allocation", None) if claim.status == Claim.Status.ALLOCATED else None
    )
    node = allocation.node if allocation else None
    return {
        "claim": claim,
        "node": node.name if node else "",
        "pool": node.pool if node else None,
        "gpus": [share.gpu.index for share in allocation.shares.all()] if allocation else [],
        "topology": allocator.topology_of(node.labels) if node else {},
    }
