from django.contrib import admin

from .models import AuditEntry


@admin.register(AuditEntry)
class AuditEntryAdmin(admin.ModelAdmin):
    """Operators read every tenant's log here; nobody adds, edits or deletes entries."""

    list_display = ["created_at", "tenant", "actor", "ip", "action", "object_type", "object_repr"]
    list_filter = ["action", "object_type", "tenant"]
    search_fields = ["actor", "object_repr", "object_id"]
    date_hierarchy = "created_at"
    list_select_related = ["tenant"]  # a deleted tenant reads as empty instead of failing
    readonly_fields = [f.name for f in AuditEntry._meta.fields]

    def has_add_permission(self, request) -> bool:
        return False

    def has_change_permission(self, request, obj=None) -> bool:
        return False

    def has_delete_permission(self, request, obj=None) -> bool:
        return False
