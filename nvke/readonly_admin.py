from django.contrib import admin


class ReadOnlyAdmin(admin.ModelAdmin):
    """Rows only a control loop writes (the allocator, the autoscaler): operators read them here."""

    def has_add_permission(self, request) -> bool:
        return False

    def has_change_permission(self, request, obj=None) -> bool:
        return False
