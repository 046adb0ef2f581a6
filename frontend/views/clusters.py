"""Cluster pages: the list with its filters, create, attach (with the RBAC manifest NVKE needs), a
cluster's page, its kubeconfig and nvke-agent downloads, delete."""

import yaml
from django.conf import settings
from django.contrib import messages
from django.core.exceptions import PermissionDenied
from django.core.paginator import Paginator
from django.db.models import Count, Q
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse
from django.views.decorators.http import require_POST

from claims.models import Claim
from clusters import services as cluster_services
from clusters.addons import BY_NAME as ADDON_CATALOG
from clusters.kubeconfig import kubeconfig_filename, kubeconfig_yaml, parse_kubeconfig
from clusters.models import Cluster
from nodepools.models import Node
from nvke.errors import DomainError
from nvke.providers.kubernetes import rbac
from nvke.tenancy.context import TenantContext
from nvke.tenancy.roles import Action
from telemetry.agent_manifest import agent_manifest

from ..forms import ClusterAttachForm, ClusterCreateForm, add_domain_error, cluster_filter
from .shared import live, require_change, tenant_view

CLUSTERS_PER_PAGE = 50


def _pools_with_ready_nodes(pools):
    return pools.select_related("gpu_model", "driver_release").annotate(
        nodes_ready=Count("nodes", filter=Q(nodes__status=Node.Status.READY))
    )


@tenant_view
def cluster_list(request: HttpRequest, context: TenantContext) -> HttpResponse:
    clusters = (
        Cluster.objects.restrict(context)
        .select_related("region", "kubernetes_version")
        .annotate(pool_count=Count("node_pools"))
        .order_by("name")  # aggregation drops Meta.ordering; pages need a stable order
    )
    filterset = cluster_filter(request.GET or None, clusters)
    page = Paginator(filterset.qs, CLUSTERS_PER_PAGE).get_page(request.GET.get("page"))
    return render(
        request,
        "frontend/cluster_list.html",
        {
            "filter": filterset,
            "page_obj": page,
            "filtered": any(request.GET.get(name) for name in filterset.form.fields),
            "live": live(refresh_on="*"),  # new clusters appear, counts of pools change
        },
    )


@tenant_view
def cluster_create(request: HttpRequest, context: TenantContext) -> HttpResponse:
    require_change(context)
    form = ClusterCreateForm(request.POST or None)
    if request.method == "POST" and form.is_valid():
        try:
            cluster = cluster_services.create_cluster(context=context, **form.cleaned_data)
        except DomainError as error:
            add_domain_error(form, error)
        else:
            cluster.refresh_from_db(fields=["status"])  # the embedded default provisions it at commit
            done = cluster.status == Cluster.Status.RUNNING
            messages.success(request, f"Cluster {cluster.name} is {'running' if done else 'being created'}.")
            return redirect("cluster-detail", pk=cluster.pk)
    return render(request, "frontend/cluster_form.html", {"form": form}, status=400 if form.errors else 200)


@tenant_view
def cluster_attach(request: HttpRequest, context: TenantContext) -> HttpResponse:
    require_change(context)
    form = ClusterAttachForm(request.POST or None, request.FILES or None)
    if request.method == "POST" and form.is_valid():
        data = form.cleaned_data
        try:
            if data["kubeconfig"]:
                text = data["kubeconfig"].read().decode("utf-8", errors="replace")
                endpoint, token, ca_bundle = parse_kubeconfig(text)
            else:
                endpoint, token, ca_bundle = data["endpoint"], data["token"], data["ca_bundle"]
            cluster = cluster_services.attach_cluster(
                context=context, name=data["name"], endpoint=endpoint, token=token, ca_bundle=ca_bundle
            )
        except DomainError as error:
            add_domain_error(form, error)
            checks = error.details.get("checks", [])
        else:
            messages.success(request, f"Cluster {cluster.name} is attached: every check passed.")
            return redirect("cluster-detail", pk=cluster.pk)
    else:
        checks = []
    return render(
        request,
        "frontend/cluster_attach.html",
        {"form": form, "checks": checks, "manifest": rbac.manifest(), "grants": rbac.RULES},
        status=400 if form.errors else 200,
    )


@tenant_view
def cluster_rbac_manifest(request: HttpRequest, context: TenantContext) -> HttpResponse:
    response = HttpResponse(rbac.manifest(), content_type="application/yaml; charset=utf-8")
    response["Content-Disposition"] = 'attachment; filename="nvke-rbac.yaml"'
    return response


@tenant_view
@require_POST
def cluster_agent_manifest(request: HttpRequest, context: TenantContext, pk: int) -> HttpResponse:
    """Download the nvke-agent install for an attached cluster; it issues fresh node tokens, so it is
    for owners and admins, as node tokens are."""
    if not context.allows(Action.MANAGE):
        raise PermissionDenied("Only owners and admins issue node tokens.")
    cluster = get_object_or_404(Cluster.objects.restrict(context), pk=pk, attached=True)
    body = agent_manifest(cluster, request.build_absolute_uri("/"))
    response = HttpResponse(
        yaml.safe_dump(body, sort_keys=False), content_type="application/yaml; charset=utf-8"
    )
    response["Content-Disposition"] = f'attachment; filename="{cluster.name}-nvke-agent.yaml"'
    response["Cache-Control"] = "no-store"
    return response


@tenant_view
def cluster_detail(request: HttpRequest, context: TenantContext, pk: int) -> HttpResponse:
    cluster = get_object_or_404(
        Cluster.objects.restrict(context).select_related("region", "kubernetes_version"), pk=pk
    )
    claim_counts = dict(cluster.claims.values_list("status").annotate(n=Count("pk")).order_by())
    nodes = (
        Node.objects.restrict(context)
        .filter(pool__cluster=cluster)
        .select_related("pool")
        .annotate(
            gpu_count=Count("gpus", distinct=True),
            gpus_healthy=Count("gpus", filter=Q(gpus__healthy=True), distinct=True),
            claim_count=Count(
                "allocations", filter=Q(allocations__claim__status=Claim.Status.ALLOCATED), distinct=True
            ),
        )
        .order_by("pool__name", "name")
    )
    return render(
        request,
        "frontend/cluster_detail.html",
        {
            "cluster": cluster,
            # The simulator plays every cluster NVKE provisions on the embedded default.
            "simulated": (cluster.provider or settings.NVKE_PROVIDER) == "simulator" and not cluster.attached,
            "pools": _pools_with_ready_nodes(cluster.node_pools.all()),
            "nodes": nodes,
            "addons": [(addon, ADDON_CATALOG.get(addon.name)) for addon in cluster.addons.all()],
            "claim_counts": {
                "total": sum(claim_counts.values()),
                **{status: claim_counts.get(status, 0) for status in Claim.Status.values},
            },
            "live": live(
                f"cluster={cluster.pk}",
                refresh_on=f"cluster:{cluster.pk}",
                gone_on=f"cluster:{cluster.pk}",
                gone_url=reverse("cluster-list"),
            ),
        },
    )


@tenant_view
def cluster_kubeconfig(request: HttpRequest, context: TenantContext, pk: int) -> HttpResponse:
    """Download the cluster's kubeconfig; a cluster with no endpoint yet has none (404). It carries the
    cluster-admin token, so it is for members and up: a viewer gets 403."""
    cluster = get_object_or_404(
        Cluster.objects.restrict(context).select_related("tenant", "region", "kubernetes_version"),
        pk=pk,
        status=Cluster.Status.RUNNING,
        endpoint__gt="",
        attached=False,  # NVKE holds only its service account's token for an attached cluster
    )
    require_change(context)
    response = HttpResponse(
        kubeconfig_yaml(cluster, request.user.get_username()), content_type="application/yaml; charset=utf-8"
    )
    response["Content-Disposition"] = f'attachment; filename="{kubeconfig_filename(cluster)}"'
    response["Cache-Control"] = "no-store"
    return response


@tenant_view
def cluster_delete(request: HttpRequest, context: TenantContext, pk: int) -> HttpResponse:
    cluster = get_object_or_404(Cluster.objects.restrict(context), pk=pk)
    require_change(context)
    if request.method == "POST":
        cluster_services.delete_cluster(cluster)
        messages.success(request, f"Cluster {cluster.name} is being deleted.")
        return redirect("cluster-list")
    return render(
        request,
        "frontend/cluster_confirm_delete.html",
        {"cluster": cluster, "pool_count": cluster.node_pools.count()},
    )
