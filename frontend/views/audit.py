"""The tenant's audit log page (owners and admins): each entry a sentence with a link
(frontend/audit_lines.py), newest first, filtered by who, what, action and time as the API's audit log
is (audit.filtersets)."""

from django.core.paginator import Paginator
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.utils.http import urlencode

from audit.filtersets import AuditEntryFilter
from audit.models import AuditEntry
from nvke.tenancy.context import TenantContext

from .. import audit_lines
from .shared import require_manage, tenant_view

AUDIT_PER_PAGE = 100
AUDIT_FILTERS = ("actor", "object_type", "action", "since", "until")  # what the audit page filters by


@tenant_view
def audit_log(request: HttpRequest, context: TenantContext) -> HttpResponse:
    """The tenant's audit log, newest first (owners and admins)."""
    require_manage(context)
    mine = AuditEntry.objects.restrict(context)
    asked = {key: request.GET[key] for key in AUDIT_FILTERS if request.GET.get(key)}
    found = AuditEntryFilter(asked, queryset=mine)
    entries = found.qs if found.is_valid() else mine.none()
    page = Paginator(entries, AUDIT_PER_PAGE).get_page(request.GET.get("page"))
    return render(
        request,
        "frontend/account/audit.html",
        {
            "page": page,
            "lines": list(zip(page, audit_lines.lines(page), strict=True)),
            "asked": asked,
            "query": urlencode(asked),
            "errors": found.errors if not found.is_valid() else {},
            "actors": mine.order_by("actor").values_list("actor", flat=True).distinct()[:100],
            "object_types": audit_lines.object_types(
                mine.order_by("object_type").values_list("object_type", flat=True).distinct()
            ),
        },
    )
