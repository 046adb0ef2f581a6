"""The audit log's filters, shared by the API list and the UI's audit page."""

import datetime

from django import forms
from django_filters import rest_framework as filters
from django_filters.fields import IsoDateTimeField

from nvke.api.filters import StrictFilterSet

from .models import AuditEntry


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


class AuditEntryFilter(StrictFilterSet):
    since = UtcDateTimeFilter(field_name="created_at", lookup_expr="gte")
    until = UtcDateTimeFilter(field_name="created_at", lookup_expr="lt")

    class Meta:
        model = AuditEntry
        fields = ["action", "object_type", "object_id", "actor", "actor_user", "actor_token"]
