"""Account pages: API tokens, members and invitations. Thin like the package's other views: parse the
form, check the role, call nvke.tenancy.services, render. A new token's secret is rendered once, in the
response to the POST that made it, and never stored anywhere it could be shown again."""

from django import forms
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.utils import timezone
from django.views.decorators.http import require_POST

from nvke.errors import DomainError, NotFound
from nvke.tenancy import services
from nvke.tenancy.context import SESSION_KEY, TenantContext
from nvke.tenancy.models import ApiToken, Invitation, Membership
from nvke.tenancy.roles import Action, Role

from ..forms import add_domain_error
from .shared import require_manage, tenant_view

ROLE_CHOICES = [(r.value, r.name.title()) for r in Role]


class TokenForm(forms.Form):
    name = forms.CharField(max_length=100)
    scope = forms.ChoiceField(choices=ApiToken.Scope.choices, initial=ApiToken.Scope.READ_WRITE)
    expires_at = forms.DateTimeField(
        required=False,
        label="Expires at",
        help_text="UTC, e.g. 2027-01-31 00:00. Empty: never.",
        widget=forms.DateTimeInput(attrs={"type": "datetime-local"}),
    )


class InviteForm(forms.Form):
    username = forms.CharField(max_length=150)
    role = forms.ChoiceField(choices=ROLE_CHOICES, initial=Role.MEMBER)


class RoleForm(forms.Form):
    role = forms.ChoiceField(choices=ROLE_CHOICES)


def _tokens(request: HttpRequest, context: TenantContext):
    tokens = ApiToken.objects.select_related("user").filter(tenant=context.tenant, revoked_at__isnull=True)
    return tokens if context.allows(Action.MANAGE) else tokens.filter(user=request.user)


def token_page(request: HttpRequest, context: TenantContext | None, tokens, **extra) -> HttpResponse:
    """The tokens page: `tokens` (a queryset, read after any new one is issued) and a form issuing one in
    `context` (None: an operator's token, in no tenant)."""
    form = TokenForm(request.POST or None)
    secret = None
    if request.method == "POST" and form.is_valid():
        try:
            token, secret = services.issue_token(context=context, user=request.user, **form.cleaned_data)
        except DomainError as error:
            add_domain_error(form, error)
        else:
            form = TokenForm()
            messages.success(request, f"Token {token.name} is created. Copy it now: it is shown only once.")
    return render(
        request,
        "frontend/account/tokens.html",
        {"tokens": tokens, "form": form, "secret": secret, **extra},
        status=400 if form.errors else 200,
    )


@tenant_view
def token_list(request: HttpRequest, context: TenantContext) -> HttpResponse:
    """Tokens, and a form for a new one. Everyone may hold tokens; a token acts with its user's role."""
    return token_page(request, context, _tokens(request, context))


@require_POST
@tenant_view
def token_revoke(request: HttpRequest, context: TenantContext, pk: int) -> HttpResponse:
    token = get_object_or_404(_tokens(request, context), pk=pk)
    services.revoke_token(token)
    messages.success(request, f"Token {token.name} is revoked.")
    return redirect("account-tokens")


@tenant_view
def member_list(request: HttpRequest, context: TenantContext) -> HttpResponse:
    """Everyone sees the members; owners and admins invite people and revoke invitations here."""
    form = InviteForm(request.POST or None)
    if request.method == "POST":
        require_manage(context)
        if form.is_valid():
            try:
                invitation = services.invite(context=context, invited_by=request.user, **form.cleaned_data)
            except DomainError as error:
                add_domain_error(form, error)
            else:
                messages.success(
                    request,
                    f"{invitation.username} is invited as {invitation.role} until "
                    f"{invitation.expires_at:%Y-%m-%d %H:%M} UTC, if such a user exists: they accept "
                    "under Invitations.",
                )
                return redirect("account-members")
    members = Membership.objects.select_related("user").filter(tenant=context.tenant)
    can_manage = context.allows(Action.MANAGE)
    invitations = (
        Invitation.objects.restrict(context)
        .filter(expires_at__gt=timezone.now())
        .select_related("invited_by")
        if can_manage
        else Invitation.objects.none()
    )
    return render(
        request,
        "frontend/account/members.html",
        {
            "members": members,
            "invitations": invitations,
            "form": form,
            "can_manage": can_manage,
            "roles": ROLE_CHOICES,
        },
        status=400 if form.errors else 200,
    )


@require_POST
@tenant_view
def invitation_revoke(request: HttpRequest, context: TenantContext, pk: int) -> HttpResponse:
    invitation = get_object_or_404(Invitation.objects.restrict(context), pk=pk)
    require_manage(context)
    services.revoke_invitation(invitation)
    messages.success(request, f"The invitation of {invitation.username} is revoked.")
    return redirect("account-members")


@login_required
def my_invitations(request: HttpRequest) -> HttpResponse:
    """Invitations addressed to the signed-in user, from any tenant; no tenant needed to see them."""
    return render(
        request, "frontend/invitations.html", {"invitations": services.pending_invitations(request.user)}
    )


@require_POST
@login_required
def invitation_answer(request: HttpRequest, pk: int, answer: str) -> HttpResponse:
    try:
        if answer == "accept":
            membership = services.accept_invitation(user=request.user, pk=pk)
        else:
            services.decline_invitation(user=request.user, pk=pk)
    except NotFound as error:
        raise Http404(error.message) from None
    except DomainError as error:
        messages.error(request, error.message)
        return redirect("invitations")
    if answer == "decline":
        messages.success(request, "The invitation is declined.")
        return redirect("invitations")
    request.session[SESSION_KEY] = membership.tenant_id  # act in the tenant just joined
    messages.success(request, f"You are now a {membership.role} of {membership.tenant.name}.")
    return redirect("dashboard")


def _membership(context: TenantContext, pk: int) -> Membership:
    return get_object_or_404(Membership.objects.select_related("user"), tenant=context.tenant, pk=pk)


@require_POST
@tenant_view
def member_role(request: HttpRequest, context: TenantContext, pk: int) -> HttpResponse:
    membership = _membership(context, pk)
    require_manage(context)
    form = RoleForm(request.POST)
    if not form.is_valid():
        messages.error(request, "Choose one of the roles.")
        return redirect("account-members")
    try:
        services.change_role(context=context, membership=membership, role=form.cleaned_data["role"])
    except DomainError as error:
        messages.error(request, error.message)
    else:
        messages.success(request, f"{membership.user.username} is now a {form.cleaned_data['role']}.")
    return redirect("account-members")


@require_POST
@tenant_view
def member_remove(request: HttpRequest, context: TenantContext, pk: int) -> HttpResponse:
    membership = _membership(context, pk)
    require_manage(context)
    try:
        services.remove_member(context=context, membership=membership)
    except DomainError as error:
        messages.error(request, error.message)
    else:
        messages.success(request, f"{membership.user.username} is no longer a member.")
    return redirect("account-members")
