from django import forms
from django.contrib import admin

from nodepools import sharing
from nodepools.models import AutoscalerDecision, Gpu, Node, NodePool
from nvke.errors import DomainError
from nvke.readonly_admin import ReadOnlyAdmin


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
