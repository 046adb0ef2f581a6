from rest_framework.exceptions import NotFound
from rest_framework.permissions import SAFE_METHODS, BasePermission

from nvke.tenancy.context import acts_as_operator, resolve_tenant
from nvke.tenancy.models import ApiToken
from nvke.tenancy.roles import Action

READ_ONLY_TOKEN = "This API token is read-only."
OPERATOR_TOKEN = "An operator token acts in no tenant: it reads and runs the fleet endpoints."


def read_only_token(request) -> bool:
    auth = getattr(request, "auth", None)
    return isinstance(auth, ApiToken) and auth.read_only


def operator_token(request) -> bool:
    auth = getattr(request, "auth", None)
    return isinstance(auth, ApiToken) and auth.operator


def operator_request(request) -> bool:
    """A staff user signed in, or with an operator token (`acts_as_operator`, as the operators' stream
    decides)."""
    auth = getattr(request, "auth", None)
    return acts_as_operator(request.user, auth if isinstance(auth, ApiToken) else None)


class IsOperator(BasePermission):
    """The platform's operators (`operator_request`); a read-only token of theirs may only read."""

    message = "This is for the platform's operators."

    def has_permission(self, request, view) -> bool:
        if not operator_request(request):
            return False
        if request.method not in SAFE_METHODS and read_only_token(request):
            self.message = READ_ONLY_TOKEN
            return False
        return True


class TenantRolePermission(BasePermission):
    """Authenticated, a member of a tenant, and in a role that allows the action: reads need the view's
    `read_action` (default `view`), writes its `write_action` (default `change`) and a token that is
    not read-only."""

    message = "Your role in this tenant does not allow this action."

    def has_permission(self, request, view) -> bool:
        if not request.user or not request.user.is_authenticated:
            return False
        context = resolve_tenant(request)
        if context is None and operator_token(request):
            if view.kwargs:  # a tenant's object: as for another tenant's, 404
                raise NotFound()
            self.message = OPERATOR_TOKEN
            return False
        if context is None:
            self.message = "You are not a member of any tenant."
            return False
        if request.method in SAFE_METHODS:
            return context.allows(getattr(view, "read_action", Action.VIEW))
        if read_only_token(request):
            self.message = READ_ONLY_TOKEN
            return False
        return context.allows(getattr(view, "write_action", Action.CHANGE))


class AuthenticatedReadOnly(BasePermission):
    """The catalog: any signed-in user reads it; operators edit it in the admin."""

    def has_permission(self, request, view) -> bool:
        return bool(request.user and request.user.is_authenticated and request.method in SAFE_METHODS)
