from django.contrib import admin

from .models import ManagementCluster


@admin.register(ManagementCluster)
class ManagementClusterAdmin(admin.ModelAdmin):
    list_display = ("__str__", "infrastructure_api_version", "cluster_template", "updated_at")

    def has_add_permission(self, request) -> bool:
        return not ManagementCluster.objects.exists()  # one management cluster
