from django.contrib import admin

from .models import SimCluster, SimFault, SimNode


@admin.register(SimCluster)
class SimClusterAdmin(admin.ModelAdmin):
    list_display = ["key", "region", "control_plane_nodes", "endpoint"]
    search_fields = ["key"]


@admin.register(SimNode)
class SimNodeAdmin(admin.ModelAdmin):
    list_display = [
        "name",
        "cluster",
        "pool",
        "region",
        "gpu_model",
        "ready",
        "unschedulable",
        "drain_state",
        "driver_version",
    ]
    list_filter = ["region", "gpu_model", "ready", "unschedulable", "drain_state"]
    search_fields = ["name", "pool"]


@admin.register(SimFault)
class SimFaultAdmin(admin.ModelAdmin):
    """Inject failures into the simulated fleet."""

    list_display = ["operation", "target", "reason", "message", "remaining"]
    list_filter = ["operation"]
