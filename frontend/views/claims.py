"""GPU claim pages: a cluster's claims with their filters, create, a claim's page (where it landed or
why it waits, its rescaling and the pod that uses it), release."""

from django.conf import settings
from django.contrib import messages
from django.core.paginator import Paginator
from django.db.models import Prefetch, Q, QuerySet, Sum
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse

from audit.models import AuditEntry
from claims import allocator
from claims.models import Allocation, Claim, GpuShare
from claims.pod_templates import pod_template, serves_dra
from claims.selectors import preemption_notice
from claims.sizing import sizing_hints
from clusters.models import Cluster
from nodepools.sharing import held_isolation
from nvke.errors import DomainError
from nvke.tenancy.context import TenantContext
from telemetry.models import ClaimScaling, TelemetryEvent

from .. import audit_lines
from ..forms import RELEASED, ClaimCreateForm, add_domain_error, claim_filter
from .shared import live, require_change, tenant_view

CLAIMS_PER_PAGE = 100


def _released(context: TenantContext, cluster: Cluster, namespace: str) -> QuerySet[AuditEntry]:
    """The cluster's released claims, newest first: their delete entries in the audit log, which keeps
    what each asked for and who released it."""
    entries = AuditEntry.objects.restrict(context).filter(
        object_type="claims.claim", action=AuditEntry.Action.DELETE, changes__cluster_id__0=cluster.pk
    )
    return entries.filter(changes__namespace__0=namespace) if namespace else entries


def _claims_page(request: HttpRequest, context: TenantContext, cluster: Cluster, claims) -> dict:
    namespaces = list(cluster.claims.order_by("namespace").values_list("namespace", flat=True).distinct())
    filterset = claim_filter(request.GET or None, claims, namespaces)
    if request.GET.get("status") == RELEASED:
        released = _released(context, cluster, request.GET.get("namespace", ""))
        return {
            "filters": filterset.form,
            "filtered": True,
            "showing_released": True,
            "released": Paginator(released, CLAIMS_PER_PAGE).get_page(request.GET.get("page")),
        }
    page = Paginator(filterset.qs, CLAIMS_PER_PAGE).get_page(request.GET.get("page"))
    for claim in page:
        claim.isolation_held = _isolation_of(claim, getattr(claim, "allocation", None))[0]
    return {
        "filters": filterset.form,
        "filtered": any(request.GET.get(name) for name in filterset.form.fields),
        "page_obj": page,
    }


def _isolation_of(claim: Claim, allocation) -> tuple[str, str]:
    """The placed claim's isolation as its node enforces it, and in words (("", "") when not placed)."""
    if allocation is None:
        return "", ""
    return held_isolation(
        allocation.isolation,
        kind=claim.kind,
        source=claim.source,
        sharing_mode=allocation.node.pool.sharing_mode,
        facts=allocation.node.preflight,
    )


@tenant_view
def claim_list(request: HttpRequest, context: TenantContext, pk: int) -> HttpResponse:
    cluster = get_object_or_404(Cluster.objects.restrict(context), pk=pk)
    allocated = Q(status=Claim.Status.ALLOCATED)  # a pending claim holds nothing, whatever rows linger
    claims = (
        Claim.objects.restrict(context)
        .filter(cluster=cluster)
        .select_related("allocation__node__pool")
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
            **_claims_page(request, context, cluster, claims),
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
            claim = allocator.create_claim(
                context=context, cluster=cluster, source=Claim.Source.UI, **form.claim_fields()
            )
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
    return get_object_or_404(
        Claim.objects.restrict(context).select_related("cluster", "pool", "preempted_by", "group"), pk=pk
    )


def _allocation_of(claim: Claim) -> Allocation | None:
    if claim.status != Claim.Status.ALLOCATED:
        return None
    return (
        Allocation.objects.filter(claim=claim)
        .select_related("node__pool__gpu_model")
        .prefetch_related(Prefetch("shares", queryset=GpuShare.objects.select_related("gpu")))
        .first()
    )


RECENT_MOVES = 10  # the allocator's moves of a claim shown on its page (claims/allocator/moves.py)


def _moves(context: TenantContext, claim: Claim) -> list[tuple[AuditEntry, audit_lines.Line]]:
    entries = AuditEntry.objects.restrict(context).filter(
        object_type="claims.claim", object_id=str(claim.pk), changes__has_key="node"
    )
    return [(entry, audit_lines.line(entry)) for entry in entries[:RECENT_MOVES]]


RECENT_DECISIONS = 10  # rescaling decisions shown on a claim's page (telemetry/rescale.py)


@tenant_view
def claim_detail(request: HttpRequest, context: TenantContext, pk: int) -> HttpResponse:
    claim = _get_claim(context, pk)
    allocation = _allocation_of(claim)
    shares = list(allocation.shares.all()) if allocation else []
    scaling = ClaimScaling.objects.filter(claim=claim).first()
    isolation, isolation_words = _isolation_of(claim, allocation)
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
            "grace_ends": preemption_notice(claim),
            "isolation": isolation,
            "isolation_detail": isolation_words,
            "moves": _moves(context, claim),
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
