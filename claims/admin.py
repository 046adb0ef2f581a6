from django.contrib import admin

from claims.models import Allocation, AllocationEvent, Claim, ClaimGroup, GpuShare, Queue, UsageInterval
from nvke.readonly_admin import ReadOnlyAdmin


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
        "queue",
        "status",
        "created_at",
    ]
    list_filter = ["status", "kind", "preemptible", "tenant"]
    search_fields = ["name", "namespace", "cluster__name", "tenant__name"]
    # Who took its GPUs is the allocator's to write, as its status is.
    readonly_fields = [
        "status",
        "pending_reason",
        "created_at",
        "allocated_at",
        "preempted_by",
        "preempted_at",
    ]
    list_select_related = ["cluster", "tenant"]


class MemberInline(admin.TabularInline):
    model = Claim
    fields = ["name", "kind", "gpus", "status", "pending_reason", "allocated_at"]
    readonly_fields = fields
    extra = 0
    can_delete = False
    show_change_link = True


@admin.register(ClaimGroup)
class ClaimGroupAdmin(ReadOnlyAdmin):
    """Claim groups (gangs), with their members' states; created and released through the API, which
    places and frees them as a unit."""

    list_display = ["__str__", "cluster", "tenant", "members", "min_members", "priority", "created_at"]
    list_filter = ["tenant"]
    search_fields = ["name", "namespace", "cluster__name", "tenant__name"]
    list_select_related = ["cluster", "tenant"]
    inlines = [MemberInline]


@admin.register(Queue)
class QueueAdmin(admin.ModelAdmin):
    """A cluster's queues: quotas, cohort, limits. Changed here, the next placement pass admits by them
    (the API asks for that pass at once)."""

    list_display = ["__str__", "cluster", "tenant", "cohort", "created_at"]
    list_filter = ["tenant", "cohort"]
    search_fields = ["name", "cohort", "cluster__name", "tenant__name"]
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
