from rest_framework.permissions import SAFE_METHODS, BasePermission

from nvke.tenancy.context import resolve_tenant
from nvke.tenancy.roles import Action


class TenantRolePermission(BasePermission):
    """Authenticated, a member of a tenant, and in a role that allows the action: reads need `view`,
    writes need the view's `write_action` (default `change`)."""

    message = "Your role in this tenant does not allow this action."

    def has_permission(self, request, view) -> bool:
        if not request.user or not request.user.is_authenticated:
            return False
        context = resolve_tenant(request)
        if context is None:
            self.message = "You are not a member of any tenant."
            return False
        action = (
            Action.VIEW if request.method in SAFE_METHODS else getattr(view, "write_action", Action.CHANGE)
        )
        return context.allows(action)


class AuthenticatedReadOnly(BasePermission):
    """The catalog: any signed-in user reads it; operators edit it in the admin."""

    def has_permission(self, request, view) -> bool:
        return bool(request.user and request.user.is_authenticated and request.method in SAFE_METHODS)
