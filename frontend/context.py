from nvke.tenancy.context import resolve_tenant
from nvke.tenancy.models import Membership
from nvke.tenancy.roles import Action


def tenant_context(request) -> dict:
    """The current tenant and role for every template, whether the role may change things (and manage
    tokens), and the user's memberships for the tenant switcher (evaluated only if a template reads
    them)."""
    if not getattr(request, "user", None) or not request.user.is_authenticated:
        return {}
    context = resolve_tenant(request)
    return {
        "tenant_context": context,
        "can_change": context is not None and context.allows(Action.CHANGE),
        "can_manage": context is not None and context.allows(Action.MANAGE),
        "tenant_memberships": Membership.objects.filter(user=request.user).select_related("tenant"),
    }
