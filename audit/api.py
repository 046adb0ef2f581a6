from rest_framework import serializers

from nvke.api.viewsets import ReadOnlyTenantViewSet
from nvke.tenancy.roles import Action

from .filtersets import AuditEntryFilter
from .models import AuditEntry


class AuditEntrySerializer(serializers.ModelSerializer):
    class Meta:
        model = AuditEntry
        fields = [
            "id",
            "created_at",
            "actor",
            "actor_user",
            "actor_token",
            "ip",
            "action",
            "object_type",
            "object_id",
            "object_repr",
            "changes",
        ]


class AuditEntryViewSet(ReadOnlyTenantViewSet):
    """The tenant's audit log, newest first: every create, update and delete, by whom (user or token),
    from which address, with the changed fields before and after. Owners and admins only; read-only."""

    queryset = AuditEntry.objects.all()
    serializer_class = AuditEntrySerializer
    filterset_class = AuditEntryFilter
    read_action = Action.MANAGE
    ordering_fields = ["created_at"]
