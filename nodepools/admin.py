from django import forms
from django.contrib import admin

from clusters.models import Region
from nvke.errors import DomainError

from . import sharing
from .models import (
    Allocation,
    AllocationEvent,
    Architecture,
    AutoscalerDecision,
    Claim,
    DriverRelease,
    Gpu,
    GpuModel,
    GpuShare,
    MigProfile,
    Node,
    NodeImage,
    NodePool,
    RegionInventory,
    UsageInterval,
)


class ReadOnlyAdmin(admin.ModelAdmin):
    """Rows only the allocator writes: operators read them here."""

    def has_add_permission(self, request) -> bool:
        return False

    def has_change_permission(self, request, obj=None) -> bool:
        return False


class RegionInventoryInline(admin.TabularInline):
    model = RegionInventory
    extra = 0


# Regions are edited with their GPU inventory, a nodepools model, so their admin is registered here.
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


class NodeInline(admin.TabularInline):
    model = Node
    extra = 0
    fields = ["name", "status", "cordoned", "driver_version"]
    readonly_fields = fields
    show_change_link = True


class NodePoolAdminForm(forms.ModelForm):
    """Operators change a pool's compute-sharing policy here too; it must suit the pool's mode (the
    admin supplies the model and fields)."""

    def clean(self) -> dict:
        cleaned = super().clean()
        pool = NodePool(
            sharing_mode=cleaned.get("sharing_mode"),
            compute_oversubscription_percent=cleaned.get("compute_oversubscription_percent") or 100,
            default_guaranteed_percent=cleaned.get("default_guaranteed_percent"),
        )
        try:
            sharing.validate_policy(pool)
        except DomainError as error:
            raise forms.ValidationError({error.field: error.message}) from None
        return cleaned


@admin.register(NodePool)
class NodePoolAdmin(admin.ModelAdmin):
    form = NodePoolAdminForm
    list_display = [
        "name",
        "cluster",
        "tenant",
        "gpu_model",
        "gpus_per_node",
        "node_count",
        "driver_release",
        "sharing_mode",
        "compute_oversubscription_percent",
        "status",
    ]
    list_filter = ["status", "sharing_mode", "gpu_model", "driver_release", "tenant"]
    search_fields = ["name", "cluster__name", "tenant__name"]
    readonly_fields = [
        "status",
        "status_reason",
        "status_message",
        "conditions",
        "scale_down_node",
        "scale_down_phase",
        "scale_down_started_at",
        "created_at",
        "updated_at",
    ]
    list_select_related = ["cluster", "tenant", "gpu_model", "driver_release"]
    inlines = [NodeInline]


@admin.register(AutoscalerDecision)
class AutoscalerDecisionAdmin(ReadOnlyAdmin):
    """What the pool autoscaler decided and why; only it writes them."""

    list_display = ["created_at", "pool", "action", "reason", "from_nodes", "to_nodes", "node"]
    list_filter = ["action", "reason"]
    search_fields = ["pool__name", "pool__cluster__name", "node", "message"]
    list_select_related = ["pool"]


class GpuInline(admin.TabularInline):
    model = Gpu
    extra = 0
    fields = ["index", "uuid", "memory_mib", "nvlink_domain", "healthy"]
    readonly_fields = ["index", "uuid", "memory_mib", "nvlink_domain"]


@admin.register(Node)
class NodeAdmin(admin.ModelAdmin):
    list_display = ["name", "pool", "tenant", "status", "cordoned", "driver_version"]
    list_filter = ["status", "cordoned", "driver_version", "tenant"]
    search_fields = ["name", "pool__name"]
    readonly_fields = ["labels", "created_at"]
    list_select_related = ["pool__cluster", "tenant"]
    inlines = [GpuInline]


@admin.register(Gpu)
class GpuAdmin(admin.ModelAdmin):
    list_display = ["__str__", "uuid", "memory_mib", "nvlink_domain", "healthy", "tenant"]
    list_filter = ["healthy", "tenant"]
    search_fields = ["uuid", "node__name"]
    list_select_related = ["node", "tenant"]


class GpuShareInline(admin.TabularInline):
    model = GpuShare
    extra = 0
    readonly_fields = [
        "gpu",
        "memory_mib",
        "compute_milli",
        "exclusive",
        "mig_profile",
        "mig_start",
        "mig_size",
    ]
    can_delete = False


@admin.register(Claim)
class ClaimAdmin(admin.ModelAdmin):
    list_display = [
        "__str__",
        "cluster",
        "tenant",
        "kind",
        "gpus",
        "mig_profile",
        "gpu_memory_mib",
        "compute_percent",
        "priority",
        "status",
        "created_at",
    ]
    list_filter = ["status", "kind", "tenant"]
    search_fields = ["name", "namespace", "cluster__name", "tenant__name"]
    readonly_fields = ["status", "pending_reason", "created_at", "allocated_at"]
    list_select_related = ["cluster", "tenant"]


@admin.register(Allocation)
class AllocationAdmin(ReadOnlyAdmin):
    """Allocations are written by the allocator only; here they are read."""

    list_display = ["claim", "node", "isolation", "cpu_milli", "host_memory_mib", "created_at"]
    list_filter = ["isolation"]
    search_fields = ["claim__name", "node__name"]
    list_select_related = ["claim", "node"]
    inlines = [GpuShareInline]


@admin.register(GpuShare)
class GpuShareAdmin(ReadOnlyAdmin):
    list_display = [
        "allocation",
        "gpu",
        "memory_mib",
        "compute_milli",
        "guaranteed_milli",
        "exclusive",
        "mig_profile",
        "mig_start",
    ]
    list_filter = ["exclusive", "mig_profile"]
    search_fields = ["allocation__claim__name", "gpu__node__name"]


@admin.register(AllocationEvent)
class AllocationEventAdmin(ReadOnlyAdmin):
    """The allocator's log, for reading: placements added and removed, and inventory resets."""

    list_display = ["id", "cluster", "kind", "claim_id", "created_at"]
    list_filter = ["kind"]
    search_fields = ["claim_id"]


@admin.register(UsageInterval)
class UsageIntervalAdmin(ReadOnlyAdmin):
    """Metering, every tenant's (the API and usage page show a tenant only its own)."""

    list_display = [
        "tenant",
        "cluster_name",
        "namespace",
        "claim_name",
        "pool_name",
        "gpu_model",
        "memory_mib",
        "guaranteed_milli",
        "ceiling_milli",
        "gpu_equivalent_milli",
        "started_at",
        "ended_at",
    ]
    list_filter = ["tenant", "gpu_model", "kind"]
    search_fields = ["claim_name", "namespace", "pool_name", "cluster_name"]
    list_select_related = ["tenant"]
    date_hierarchy = "started_at"
