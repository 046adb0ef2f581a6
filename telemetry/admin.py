"""Operators read telemetry's rows here; the agents, the rescaler and tenants (API, pool page) write
them. A node's ingest token may be deleted: its agent can no longer send until the node is re-registered."""

from django.contrib import admin

from nodepools.admin import ReadOnlyAdmin

from .models import ClaimScaling, MetricPoint, NodeToken, PoolRescaling, TelemetryEvent


@admin.register(NodeToken)
class NodeTokenAdmin(ReadOnlyAdmin):
    list_display = ["node", "tenant", "key_prefix", "created_at"]
    list_filter = ["tenant"]
    search_fields = ["node__name", "key_prefix"]
    list_select_related = ["node", "tenant"]


@admin.register(MetricPoint)
class MetricPointAdmin(ReadOnlyAdmin):
    list_display = ["gpu", "resolution_s", "bucket", "samples", "utilization", "memory_used_mib"]
    list_filter = ["resolution_s"]
    search_fields = ["gpu__uuid"]
    list_select_related = ["gpu"]

    def has_delete_permission(self, request, obj=None) -> bool:
        return False


@admin.register(ClaimScaling)
class ClaimScalingAdmin(ReadOnlyAdmin):
    list_display = ["claim", "tenant", "profile", "requested_compute_percent", "state", "updated_at"]
    list_filter = ["state", "profile", "tenant"]
    search_fields = ["claim__name", "reason"]
    list_select_related = ["claim", "tenant"]


@admin.register(PoolRescaling)
class PoolRescalingAdmin(ReadOnlyAdmin):
    """Tenants set these through the API or the pool page, where they are validated."""

    list_display = [
        "pool",
        "tenant",
        "enabled",
        "pressure_percent",
        "pressure_s",
        "idle_s",
        "max_growth_percent",
    ]
    list_filter = ["enabled", "tenant"]
    search_fields = ["pool__name"]
    list_select_related = ["pool", "tenant"]


@admin.register(TelemetryEvent)
class TelemetryEventAdmin(ReadOnlyAdmin):
    list_display = ["created_at", "tenant", "cluster", "kind", "message"]
    list_filter = ["kind", "tenant"]
    search_fields = ["message"]
    date_hierarchy = "created_at"
    list_select_related = ["tenant", "cluster"]

    def has_delete_permission(self, request, obj=None) -> bool:
        return False
