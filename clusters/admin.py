from django.contrib import admin

from clusters.models import Cluster, ClusterAddon


class ClusterAddonInline(admin.TabularInline):
    """Provisioning writes them; operators read them here."""

    model = ClusterAddon
    fields = readonly_fields = ["name", "version", "status", "message", "updated_at"]
    extra = 0
    can_delete = False

    def has_add_permission(self, request, obj=None) -> bool:
        return False


@admin.register(ClusterAddon)
class ClusterAddonAdmin(admin.ModelAdmin):
    list_display = ["name", "version", "status", "cluster", "updated_at"]
    list_filter = ["status", "name", "version"]
    search_fields = ["name", "cluster__name", "cluster__tenant__name"]
    readonly_fields = ["cluster", "name", "version", "status", "message", "updated_at"]
    list_select_related = ["cluster"]

    def has_add_permission(self, request) -> bool:
        return False


@admin.register(Cluster)
class ClusterAdmin(admin.ModelAdmin):
    inlines = [ClusterAddonInline]
    list_display = [
        "name",
        "tenant",
        "region",
        "kubernetes_version",
        "control_plane_nodes",
        "provider",
        "status",
        "status_reason",
        "created_at",
    ]
    list_filter = ["status", "provider", "region", "kubernetes_version", "tenant"]
    search_fields = ["name", "tenant__name", "endpoint"]
    readonly_fields = [
        "provider",
        "status",
        "status_reason",
        "status_message",
        "conditions",
        "endpoint",
        "created_at",
        "updated_at",
    ]
    list_select_related = ["tenant", "region", "kubernetes_version"]
