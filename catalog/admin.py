from django.contrib import admin

from catalog.models import (
    Architecture,
    DriverRelease,
    GpuModel,
    KubernetesVersion,
    MigProfile,
    NodeImage,
    Region,
    RegionInventory,
)


@admin.register(KubernetesVersion)
class KubernetesVersionAdmin(admin.ModelAdmin):
    list_display = ["version", "enabled", "is_default", "end_of_support"]
    list_filter = ["enabled"]
    list_editable = ["enabled", "is_default"]


class RegionInventoryInline(admin.TabularInline):
    model = RegionInventory
    extra = 0


@admin.register(Region)
class RegionAdmin(admin.ModelAdmin):
    list_display = ["name", "display_name", "enabled"]
    list_filter = ["enabled"]
    search_fields = ["name", "display_name"]
    inlines = [RegionInventoryInline]


class MigProfileInline(admin.TabularInline):
    model = MigProfile
    extra = 0


@admin.register(Architecture)
class ArchitectureAdmin(admin.ModelAdmin):
    list_display = ["name", "compute_capabilities"]
    search_fields = ["name"]


@admin.register(GpuModel)
class GpuModelAdmin(admin.ModelAdmin):
    list_display = [
        "name",
        "display_name",
        "architecture",
        "memory_mib",
        "form_factor",
        "nvlink",
        "mig_max_instances",
        "min_driver_version",
        "price_per_gpu_hour",
    ]
    list_filter = ["architecture", "form_factor", "nvlink"]
    search_fields = ["name", "display_name", "product_name"]
    inlines = [MigProfileInline]


@admin.register(MigProfile)
class MigProfileAdmin(admin.ModelAdmin):
    list_display = [
        "name",
        "gpu_model",
        "profile_id",
        "compute_slices",
        "memory_slices",
        "memory_mib",
        "max_instances",
        "placements",
    ]
    list_filter = ["gpu_model", "compute_slices"]
    search_fields = ["name", "gpu_model__name"]


@admin.register(DriverRelease)
class DriverReleaseAdmin(admin.ModelAdmin):
    list_display = [
        "version",
        "branch",
        "branch_type",
        "branch_end_of_life",
        "release_date",
        "cuda_version",
        "enabled",
    ]
    list_filter = ["branch", "branch_type", "enabled", "architectures"]
    search_fields = ["version"]
    filter_horizontal = ["architectures"]


@admin.register(NodeImage)
class NodeImageAdmin(admin.ModelAdmin):
    list_display = ["name", "os", "kernel_version", "container_toolkit_version", "driver_release", "enabled"]
    list_filter = ["enabled", "os"]
    search_fields = ["name"]


@admin.register(RegionInventory)
class RegionInventoryAdmin(admin.ModelAdmin):
    list_display = ["region", "gpu_model", "total_gpus"]
    list_filter = ["region", "gpu_model"]
