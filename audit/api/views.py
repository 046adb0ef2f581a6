from audit.filtersets import AuditEntryFilter
from audit.models import AuditEntry
from nvke.api.viewsets import ReadOnlyTenantViewSet
from nvke.tenancy.roles import Action

from .serializers import AuditEntrySerializer


class AuditEntryViewSet(ReadOnlyTenantViewSet):
    """The tenant's audit log, newest first: every create, update and delete, by whom (user or token),
    from which address, with the changed fields before and after. Owners and admins only; read-only."""

    queryset = AuditEntry.objects.all()
    serializer_class = AuditEntrySerializer
    filterset_class = AuditEntryFilter
    read_action = Action.MANAGE
    ordering_fields = ["created_at"]
