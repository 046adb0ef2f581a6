from nvke.tenancy.context import resolve_tenant


def tenant_context(request) -> dict:
    """The current tenant and role, for every template."""
    if not getattr(request, "user", None) or not request.user.is_authenticated:
        return {}
    return {"tenant_context": resolve_tenant(request)}
