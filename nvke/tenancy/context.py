"""Which tenant a request acts in, and in which role.

A token fixes its tenant. A browser session keeps the tenant the user last switched to, or the first
one the user belongs to. Every tenant-scoped query starts from this."""

from dataclasses import dataclass

from .models import ApiToken, Membership, Tenant
from .roles import Action, role_allows

SESSION_KEY = "nvke_tenant_id"


@dataclass(frozen=True)
class TenantContext:
    tenant: Tenant
    role: str

    def allows(self, action: Action) -> bool:
        return role_allows(self.role, action)


def find_context(user, *, session=None, token: ApiToken | None = None) -> TenantContext | None:
    """The user's tenant: the token's, else the session's choice if still a member, else the first."""
    if not user.is_authenticated:
        return None
    if token is not None and hasattr(token, "member_role"):  # read with the token (`active_token`)
        return TenantContext(token.tenant, token.member_role) if token.member_role else None
    memberships = Membership.objects.select_related("tenant__quota").filter(user=user)
    if token is not None:
        memberships = memberships.filter(tenant_id=token.tenant_id)
    else:
        wanted = session.get(SESSION_KEY) if session is not None else None
        if wanted and memberships.filter(tenant_id=wanted).exists():
            memberships = memberships.filter(tenant_id=wanted)
    membership = memberships.order_by("tenant__name").first()
    return TenantContext(membership.tenant, membership.role) if membership else None


def acts_as_operator(user, token: ApiToken | None) -> bool:
    """Whether a request or a socket acts for the platform's operators (in no tenant): a staff user
    signed in, or with an operator token. A tenant token acts in its tenant only, whoever holds it: a
    staff user's tenant token opens neither the fleet endpoints nor the operators' stream."""
    if not (user and user.is_authenticated and user.is_staff):
        return False
    return token is None or token.operator


def resolve_tenant(request) -> TenantContext | None:
    """The request's tenant context, computed once per request."""
    if not hasattr(request, "_nvke_tenant"):
        auth = getattr(request, "auth", None)
        request._nvke_tenant = find_context(
            request.user,
            session=getattr(request, "session", None),
            token=auth if isinstance(auth, ApiToken) else None,
        )
    return request._nvke_tenant
