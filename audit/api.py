import datetime

from django import forms
from django_filters import rest_framework as filters
from django_filters.fields import IsoDateTimeField
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


class UtcDateTimeField(IsoDateTimeField):
    """An ISO 8601 time, turned into UTC here: PostgreSQL refuses offsets beyond ±15:59, which are
    valid ISO 8601 (a query with one was a server error)."""

    def clean(self, value):
        value = super().clean(value)
        try:
            return value.astimezone(datetime.UTC) if value else value
        except OverflowError:
            raise forms.ValidationError("The time is out of range.", code="invalid") from None


class UtcDateTimeFilter(filters.IsoDateTimeFilter):
    field_class = UtcDateTimeField


class AuditEntryFilter(filters.FilterSet):
    since = UtcDateTimeFilter(field_name="created_at", lookup_expr="gte")
    until = UtcDateTimeFilter(field_name="created_at", lookup_expr="lt")

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
