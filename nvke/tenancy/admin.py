from django.contrib import admin

from .models import ApiToken, GpuQuota, Invitation, Membership, Quota, Tenant


class QuotaInline(admin.StackedInline):
    model = Quota
    extra = 0
    max_num = 1


class GpuQuotaInline(admin.TabularInline):
    model = GpuQuota
    extra = 0


class MembershipInline(admin.TabularInline):
    model = Membership
    extra = 0
    autocomplete_fields = ["user"]


@admin.register(Tenant)
class TenantAdmin(admin.ModelAdmin):
    list_display = ["name", "slug", "member_count", "cluster_count", "created_at"]
    search_fields = ["name", "slug"]
    prepopulated_fields = {"slug": ["name"]}
    inlines = [MembershipInline, QuotaInline, GpuQuotaInline]

    @admin.display(description="members")
    def member_count(self, tenant: Tenant) -> int:
        return tenant.memberships.count()

    @admin.display(description="clusters")
    def cluster_count(self, tenant: Tenant) -> int:
        return tenant.clusters.count()


@admin.register(Membership)
class MembershipAdmin(admin.ModelAdmin):
    list_display = ["user", "tenant", "role", "created_at"]
    list_filter = ["role", "tenant"]
    search_fields = ["user__username", "user__email", "tenant__name"]
    autocomplete_fields = ["user", "tenant"]


@admin.register(Invitation)
class InvitationAdmin(admin.ModelAdmin):
    """Tenants' owners and admins send invitations and their invitees answer them in the app; operators
    see and revoke (delete) them here. Changing one would grant a role nobody in the tenant offered."""

    list_display = ["username", "tenant", "role", "invited_by", "created_at", "expires_at"]
    list_filter = ["role", "tenant"]
    search_fields = ["username", "tenant__name"]
    readonly_fields = ["tenant", "username", "role", "invited_by", "created_at", "expires_at"]

    def has_add_permission(self, request) -> bool:
        return False

    def has_change_permission(self, request, obj=None) -> bool:
        return False


@admin.register(ApiToken)
class ApiTokenAdmin(admin.ModelAdmin):
    """Tokens are issued through the API or UI (the secret is shown once); here they can be revoked.
    Their user and tenant are fixed: moving a token would hand its secret another account's access."""

    list_display = [
        "name",
        "key_prefix",
        "scope",
        "user",
        "tenant",
        "created_at",
        "expires_at",
        "last_used_at",
        "revoked_at",
    ]
    list_filter = ["tenant", ("revoked_at", admin.EmptyFieldListFilter)]
    search_fields = ["name", "key_prefix", "user__username", "tenant__name"]
    readonly_fields = ["user", "tenant", "key_prefix", "key_hash", "created_at", "last_used_at"]
    fields = [
        "name",
        "user",
        "tenant",
        "key_prefix",
        "key_hash",
        "scope",
        "created_at",
        "expires_at",
        "last_used_at",
        "revoked_at",
    ]

    def has_add_permission(self, request) -> bool:
        return False


@admin.register(Quota)
class QuotaAdmin(admin.ModelAdmin):
    """A tenant's limits; empty = unlimited. Also editable on the tenant's page."""

    list_display = ["tenant", "max_clusters", "max_claim_gpu_memory_mib", "max_claim_compute_percent"]
    autocomplete_fields = ["tenant"]


@admin.register(GpuQuota)
class GpuQuotaAdmin(admin.ModelAdmin):
    """GPUs of a model a tenant's pools may reach. A row without a tenant is the platform default for
    the model (NVKE_DEFAULT_GPU_QUOTA covers models with none)."""

    list_display = ["owner", "gpu_model", "max_gpus"]
    list_filter = ["gpu_model"]
    autocomplete_fields = ["tenant"]

    @admin.display(description="tenant", ordering="tenant")
    def owner(self, quota: GpuQuota) -> str:
        return str(quota.tenant or "platform default")
