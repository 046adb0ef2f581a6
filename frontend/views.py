"""Dashboard views. Thin: parse the form, check the role, call a service (writes) or read through the
tenant-restricted querysets, then render or redirect. Another tenant's object is a 404."""

import datetime
from collections.abc import Callable
from functools import wraps

import yaml
from django.conf import settings
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied
from django.core.paginator import Paginator
from django.db.models import Count, Prefetch, Q, Sum
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse
from django.utils import timezone
from django.views.decorators.http import require_POST

from catalog.models import SharingMode
from claims import allocator, usage
from claims.models import Allocation, Claim, GpuShare
from claims.pod_templates import pod_template, serves_dra
from claims.savings import savings
from claims.sizing import sizing_hints
from clusters import services as cluster_services
from clusters.addons import BY_NAME as ADDON_CATALOG
from clusters.kubeconfig import kubeconfig_filename, kubeconfig_yaml, parse_kubeconfig
from clusters.models import Cluster
from nodepools import preflight
from nodepools import selectors as pool_selectors
from nodepools import services as pool_services
from nodepools.models import Gpu, Node, NodePool
from nodepools.sharing import isolation_detail
from nvke.errors import DomainError
from nvke.providers.kubernetes import rbac
from nvke.tenancy.context import SESSION_KEY, TenantContext, resolve_tenant
from nvke.tenancy.models import Membership
from nvke.tenancy.roles import Action
from telemetry import policy as rescaling_policy
from telemetry.agent_manifest import agent_manifest
from telemetry.models import ClaimScaling, TelemetryEvent

from .forms import (
    ClaimCreateForm,
    ClusterAttachForm,
    ClusterCreateForm,
    PoolAutoscalingForm,
    PoolCreateForm,
    PoolRescalingForm,
    PoolScaleForm,
    TenantSwitchForm,
    add_domain_error,
    claim_filter,
    cluster_filter,
)
from .overview import capacity_by_model, clusters_needing_attention
from .pool_hints import capacity_hints, pool_hints, shortfall
from .snapshot import host_usage

WS_EVENTS = "/ws/events/"  # nvke/routing.py
CLUSTERS_PER_PAGE = 50
CLAIMS_PER_PAGE = 100

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


def require_change(context: TenantContext) -> None:
    if not context.allows(Action.CHANGE):
        raise PermissionDenied("Your role in this tenant may only view.")


def live(ws_query: str = "", refresh_on: str = "", gone_on: str = "", gone_url: str = "") -> dict:
    """What live.js needs, rendered as data attributes on <body> (see base.html)."""
    return {
        "ws_url": WS_EVENTS + (f"?{ws_query}" if ws_query else ""),
        "refresh_on": refresh_on,
        "gone_on": gone_on,
        "gone_url": gone_url,
    }


def _pools_with_ready_nodes(pools):
    return pools.select_related("gpu_model", "driver_release").annotate(
        nodes_ready=Count("nodes", filter=Q(nodes__status=Node.Status.READY))
    )


# --- Overview --------------------------------------------------------------------------------------


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


# --- Clusters --------------------------------------------------------------------------------------


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
            messages.success(request, f"Cluster {cluster.name} is being created.")
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
        {"form": form, "checks": checks, "manifest": rbac.manifest()},
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


# --- Node pools ------------------------------------------------------------------------------------


@tenant_view
def pool_create(request: HttpRequest, context: TenantContext, pk: int) -> HttpResponse:
    cluster = get_object_or_404(Cluster.objects.select_related("region").restrict(context), pk=pk)
    require_change(context)
    capacity = capacity_hints(cluster, context.tenant.pk)
    form = PoolCreateForm(request.POST or None, attached=cluster.attached, capacity=capacity)
    if request.method == "POST" and form.is_valid():
        try:
            pool = pool_services.new_pool(context=context, cluster=cluster, **form.pool_fields())
            short = capacity is not None and shortfall(
                cluster.region.name,
                pool.gpu_model,
                capacity.get(pool.gpu_model.name),
                pool.gpus_per_node,
                pool.node_count,
            )
            if short and not form.cleaned_data["wait_for_capacity"]:  # a pool that waits is rarely meant
                form.add_error("wait_for_capacity", f"{short} Tick this to create it anyway.")
            else:
                pool = pool_services.create_pool(context=context, cluster=cluster, **form.pool_fields())
                messages.success(request, f"Node pool {pool.name} is being created.")
                return redirect("pool-detail", pk=pool.pk)
        except DomainError as error:
            add_domain_error(form, error)
    hints = {
        "models": pool_hints(form.fields["driver_release"].queryset),
        "capacity": capacity,
        "region": cluster.region.name if cluster.region else "",
    }
    return render(
        request,
        "frontend/pool_form.html",
        {"form": form, "cluster": cluster, "hints": hints},
        status=400 if form.errors else 200,
    )


def _gpus_with_shares():
    """GPUs in index order with each claim share (and its claim) prefetched, for the GPU snapshot."""
    shares = GpuShare.objects.select_related("allocation__claim").order_by("mig_start", "pk")
    return Gpu.objects.order_by("index").prefetch_related(Prefetch("shares", queryset=shares))


FRACTION_MODES = (SharingMode.TIME_SLICING, SharingMode.MPS, SharingMode.FRACTIONAL)


def _pool_page(
    request: HttpRequest,
    pool: NodePool,
    scale_form: PoolScaleForm | None = None,
    rescaling_form: PoolRescalingForm | None = None,
    autoscaling_form: PoolAutoscalingForm | None = None,
    status: int = 200,
) -> HttpResponse:
    nodes = pool.nodes.prefetch_related(Prefetch("gpus", queryset=_gpus_with_shares()))
    rescaling_row = rescaling_policy.row_of(pool)
    rescaling = rescaling_policy.of_row(rescaling_row)
    return render(
        request,
        "frontend/pool_detail.html",
        {
            "pool": pool,
            "nodes": nodes,
            "nodes_ready": sum(1 for node in nodes if node.status == Node.Status.READY),
            "scale_form": scale_form or PoolScaleForm(pool=pool),
            "autoscaler": pool_selectors.autoscaling(pool),
            "autoscaling_form": autoscaling_form or PoolAutoscalingForm(pool=pool),
            "rescaling": rescaling,
            "rescaling_custom": rescaling_row is not None,
            "rescaling_form": rescaling_form or PoolRescalingForm(policy=rescaling),
            "takes_fractions": pool.sharing_mode in FRACTION_MODES,
            "mig": pool.sharing_mode == SharingMode.MIG,
            "live": live(
                f"cluster={pool.cluster_id}",
                refresh_on=f"pool:{pool.pk}",  # its claims (events name their pool) move the GPU snapshot
                gone_on=f"pool:{pool.pk}",
                gone_url=reverse("cluster-detail", args=[pool.cluster_id]),
            ),
        },
        status=status,
    )


def _get_pool(context: TenantContext, pk: int) -> NodePool:
    return get_object_or_404(
        NodePool.objects.restrict(context).select_related(
            "cluster", "gpu_model", "driver_release", "rescaling"
        ),
        pk=pk,
    )


@tenant_view
def pool_detail(request: HttpRequest, context: TenantContext, pk: int) -> HttpResponse:
    return _pool_page(request, _get_pool(context, pk))


@require_POST
@tenant_view
def pool_scale(request: HttpRequest, context: TenantContext, pk: int) -> HttpResponse:
    pool = _get_pool(context, pk)
    require_change(context)
    form = PoolScaleForm(request.POST, pool=pool)
    if form.is_valid():
        try:
            pool = pool_services.update_pool(pool, node_count=form.cleaned_data["node_count"])
        except DomainError as error:
            add_domain_error(form, error)
        else:
            messages.success(request, f"Node pool {pool.name} is scaling to {pool.node_count} nodes.")
            return redirect("pool-detail", pk=pool.pk)
    return _pool_page(request, pool, scale_form=form, status=400)


@require_POST
@tenant_view
def pool_autoscaling(request: HttpRequest, context: TenantContext, pk: int) -> HttpResponse:
    pool = _get_pool(context, pk)
    require_change(context)
    form = PoolAutoscalingForm(request.POST, pool=pool)
    if form.is_valid():
        try:
            pool = pool_services.update_pool(pool, **form.cleaned_data)
        except DomainError as error:
            add_domain_error(form, error)
        else:
            state = "on" if pool.autoscaling else "off"
            messages.success(request, f"Node pool {pool.name}'s autoscaling is {state}.")
            return redirect(reverse("pool-detail", args=[pool.pk]) + "#autoscaling")
    return _pool_page(request, pool, autoscaling_form=form, status=400)


@require_POST
@tenant_view
def pool_rescaling(request: HttpRequest, context: TenantContext, pk: int) -> HttpResponse:
    pool = _get_pool(context, pk)
    require_change(context)
    form = PoolRescalingForm(request.POST, policy=rescaling_policy.of_row(rescaling_policy.row_of(pool)))
    if form.is_valid():
        try:
            rescaling_policy.set_pool_policy(pool, form.cleaned_data, reset=True)
        except DomainError as error:
            add_domain_error(form, error)
        else:
            messages.success(request, f"Node pool {pool.name}'s rescaling policy is saved.")
            return redirect(reverse("pool-detail", args=[pool.pk]) + "#rescaling")
    return _pool_page(request, pool, rescaling_form=form, status=400)


@tenant_view
def pool_delete(request: HttpRequest, context: TenantContext, pk: int) -> HttpResponse:
    pool = _get_pool(context, pk)
    require_change(context)
    if request.method == "POST":
        pool_services.delete_pool(pool)
        messages.success(request, f"Node pool {pool.name} is being deleted.")
        return redirect("cluster-detail", pk=pool.cluster_id)
    return render(
        request, "frontend/pool_confirm_delete.html", {"pool": pool, "node_count": pool.nodes.count()}
    )


# --- Nodes -----------------------------------------------------------------------------------------


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
            "gpus": _gpus_with_shares().filter(node=node),
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


# --- GPU claims ------------------------------------------------------------------------------------


def _claims_page(request: HttpRequest, cluster: Cluster, claims) -> dict:
    namespaces = list(cluster.claims.order_by("namespace").values_list("namespace", flat=True).distinct())
    filterset = claim_filter(request.GET or None, claims, namespaces)
    return {
        "filters": filterset.form,
        "filtered": any(request.GET.get(name) for name in filterset.form.fields),
        "page_obj": Paginator(filterset.qs, CLAIMS_PER_PAGE).get_page(request.GET.get("page")),
    }


@tenant_view
def claim_list(request: HttpRequest, context: TenantContext, pk: int) -> HttpResponse:
    cluster = get_object_or_404(Cluster.objects.restrict(context), pk=pk)
    allocated = Q(status=Claim.Status.ALLOCATED)  # a pending claim holds nothing, whatever rows linger
    claims = (
        Claim.objects.restrict(context)
        .filter(cluster=cluster)
        .select_related("allocation__node")
        .annotate(
            memory_held=Sum("allocation__shares__memory_mib", filter=allocated),
            compute_held=Sum("allocation__shares__compute_milli", filter=allocated),
            guaranteed_held=Sum("allocation__shares__guaranteed_milli", filter=allocated),
        )
        .order_by("namespace", "name")
    )
    return render(
        request,
        "frontend/claim_list.html",
        {
            "cluster": cluster,
            **_claims_page(request, cluster, claims),
            "live": live(f"cluster={cluster.pk}", refresh_on=f"claims:{cluster.pk}"),
        },
    )


@tenant_view
def claim_create(request: HttpRequest, context: TenantContext, pk: int) -> HttpResponse:
    cluster = get_object_or_404(Cluster.objects.restrict(context), pk=pk)
    require_change(context)
    form = ClaimCreateForm(request.POST or None, cluster=cluster)
    if request.method == "POST" and form.is_valid():
        try:
            claim = allocator.create_claim(context=context, cluster=cluster, **form.claim_fields())
        except DomainError as error:
            add_domain_error(form, error)
        else:
            if claim.status == Claim.Status.ALLOCATED:
                messages.success(request, f"Claim {claim} is allocated.")
            else:
                messages.warning(request, f"Claim {claim} is pending: {claim.pending_reason}")
            return redirect("claim-detail", pk=claim.pk)
    return render(
        request,
        "frontend/claim_form.html",
        {"form": form, "cluster": cluster},
        status=400 if form.errors else 200,
    )


def _get_claim(context: TenantContext, pk: int) -> Claim:
    return get_object_or_404(Claim.objects.restrict(context).select_related("cluster", "pool"), pk=pk)


def _allocation_of(claim: Claim) -> Allocation | None:
    if claim.status != Claim.Status.ALLOCATED:
        return None
    return (
        Allocation.objects.filter(claim=claim)
        .select_related("node__pool__gpu_model")
        .prefetch_related(Prefetch("shares", queryset=GpuShare.objects.select_related("gpu")))
        .first()
    )


RECENT_DECISIONS = 10  # rescaling decisions shown on a claim's page (telemetry/rescale.py)


@tenant_view
def claim_detail(request: HttpRequest, context: TenantContext, pk: int) -> HttpResponse:
    claim = _get_claim(context, pk)
    allocation = _allocation_of(claim)
    pool = allocation.node.pool if allocation else None
    shares = list(allocation.shares.all()) if allocation else []
    scaling = ClaimScaling.objects.filter(claim=claim).first()
    return render(
        request,
        "frontend/claim_detail.html",
        {
            "claim": claim,
            # Rescaling changes what it holds, never what it asked for.
            "scaling": scaling,
            "requested_compute": scaling.requested_compute_percent if scaling else claim.compute_percent,
            "decisions": TelemetryEvent.objects.filter(claim=claim)[:RECENT_DECISIONS],
            "pressure": {
                "percent": settings.TELEMETRY_PRESSURE_PERCENT,
                "seconds": settings.TELEMETRY_PRESSURE_S,
                "idle_s": settings.TELEMETRY_IDLE_S,
            },
            "allocation": allocation,
            "isolation": isolation_detail(allocation.isolation, pool.sharing_mode) if allocation else "",
            "shares": shares,
            "sizing": sizing_hints(claim, allocation),
            "pod_template": pod_template(claim),
            "serves_dra": serves_dra(claim),
            "live": live(
                f"cluster={claim.cluster_id}",
                refresh_on=f"claim:{claim.pk}",
                gone_on=f"claim:{claim.pk}",
                gone_url=reverse("claim-list", args=[claim.cluster_id]),
            ),
        },
    )


@tenant_view
def claim_release(request: HttpRequest, context: TenantContext, pk: int) -> HttpResponse:
    claim = _get_claim(context, pk)
    require_change(context)
    if request.method == "POST":
        allocator.release_claim(claim)
        messages.success(request, f"Claim {claim} is released.")
        return redirect("claim-list", pk=claim.cluster_id)
    return render(request, "frontend/claim_confirm_release.html", {"claim": claim})


# --- Tenant switch ---------------------------------------------------------------------------------


@require_POST
@login_required
def tenant_switch(request: HttpRequest) -> HttpResponse:
    """Act in another of the user's tenants. A tenant the user is not in does not exist for them."""
    form = TenantSwitchForm(request.POST)
    if not form.is_valid():
        raise Http404("No such tenant.")
    membership = get_object_or_404(
        Membership.objects.select_related("tenant"), user=request.user, tenant_id=form.cleaned_data["tenant"]
    )
    request.session[SESSION_KEY] = membership.tenant_id
    messages.success(request, f"You are now working in {membership.tenant.name} as {membership.role}.")
    # The page the user came from shows the old tenant's objects, which are 404 now: start over.
    return redirect("dashboard")
