"""The header's tenant switcher, for users in several tenants: which one the session acts in."""

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect
from django.views.decorators.http import require_POST

from nvke.tenancy.context import SESSION_KEY
from nvke.tenancy.models import Membership

from ..forms import TenantSwitchForm


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
