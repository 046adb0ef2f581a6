"""Node pool pages: create (with the compatibility and capacity hints), a pool's page with its GPU
snapshot and its scale, autoscaling and rescaling forms, delete."""

from django.contrib import messages
from django.db.models import Prefetch
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse
from django.views.decorators.http import require_POST

from catalog.models import SharingMode
from clusters.models import Cluster
from nodepools import selectors as pool_selectors
from nodepools import services as pool_services
from nodepools.models import Node, NodePool
from nvke.errors import DomainError
from nvke.tenancy.context import TenantContext
from telemetry import policy as rescaling_policy

from ..forms import PoolAutoscalingForm, PoolCreateForm, PoolRescalingForm, PoolScaleForm, add_domain_error
from ..pool_hints import capacity_hints, pool_hints, shortfall
from .shared import gpus_with_shares, live, require_change, tenant_view


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
                pool.refresh_from_db(fields=["status"])  # the embedded default provisions it at commit
                done = pool.status == NodePool.Status.READY
                messages.success(request, f"Node pool {pool.name} is {'ready' if done else 'being created'}.")
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


FRACTION_MODES = (SharingMode.TIME_SLICING, SharingMode.MPS, SharingMode.FRACTIONAL)


def _pool_page(
    request: HttpRequest,
    pool: NodePool,
    scale_form: PoolScaleForm | None = None,
    rescaling_form: PoolRescalingForm | None = None,
    autoscaling_form: PoolAutoscalingForm | None = None,
    status: int = 200,
) -> HttpResponse:
    nodes = pool.nodes.prefetch_related(Prefetch("gpus", queryset=gpus_with_shares()))
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
