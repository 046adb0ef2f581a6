from django_filters import rest_framework as filters
from rest_framework import serializers

from nvke.api.viewsets import ReadOnlyTenantViewSet
from nvke.tenancy.roles import Action

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


class AuditEntryFilter(filters.FilterSet):
    since = filters.IsoDateTimeFilter(field_name="created_at", lookup_expr="gte")
    until = filters.IsoDateTimeFilter(field_name="created_at", lookup_expr="lt")

    class Meta:
        model = AuditEntry
        fields = ["action", "object_type", "object_id", "actor_user", "actor_token"]


class AuditEntryViewSet(ReadOnlyTenantViewSet):
    """The tenant's audit log, newest first: every create, update and delete, by whom (user or token),
    from which address, with the changed fields before and after. Owners and admins only; read-only."""

    queryset = AuditEntry.objects.all()
    serializer_class = AuditEntrySerializer
    filterset_class = AuditEntryFilter
    read_action = Action.MANAGE
    ordering_fields = ["created_at"]
