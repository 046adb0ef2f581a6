"""Operators see every tenant's upgrade runs, their nodes and history, and fleet rollouts. Read-only:
runs move only through their controls (API and UI), which keep the state machine's invariants."""

from django.contrib import admin

from nodepools.admin import ReadOnlyAdmin

from .models import (
    FleetRollout,
    MaintenanceExclusion,
    MaintenanceWindow,
    UpgradeCondition,
    UpgradeDeferral,
    UpgradeNode,
    UpgradeRun,
)


class UpgradeNodeInline(admin.TabularInline):
    model = UpgradeNode
    fields = [
        "name",
        "state",
        "canary",
        "pre_cordoned",
        "driver_touched",
        "returned_at",
        "from_version",
        "cordon_wanted",  # calls the provider still owes (controller.call_provider)
        "drain_wanted",
        "driver_wanted",
        "call_error",
        "reason",
        "message",
        "entered_at",
    ]
    readonly_fields = fields
    extra = 0
    can_delete = False


@admin.register(UpgradeRun)
class UpgradeRunAdmin(ReadOnlyAdmin):
    list_display = ["pk", "tenant", "pool", "target_release", "status", "reason", "created_at", "finished_at"]
    list_filter = ["status", "target_release"]
    search_fields = ["pool__name", "pool__cluster__name", "tenant__name"]
    inlines = [UpgradeNodeInline]


@admin.register(UpgradeNode)
class UpgradeNodeAdmin(ReadOnlyAdmin):
    list_display = ["name", "run", "state", "reason"]
    list_filter = ["state"]
    search_fields = ["name"]


@admin.register(UpgradeCondition)
class UpgradeConditionAdmin(ReadOnlyAdmin):
    list_display = ["time", "run", "node", "type", "reason", "message"]
    list_filter = ["type"]
    search_fields = ["node", "reason"]


@admin.register(FleetRollout)
class FleetRolloutAdmin(ReadOnlyAdmin):
    list_display = ["pk", "target_release", "gpu_model", "from_branch", "status", "wave", "created_at"]
    list_filter = ["status"]


@admin.register(MaintenanceWindow)
class MaintenanceWindowAdmin(ReadOnlyAdmin):
    """Tenants set them whole through the API (checked as a set); operators read them here."""

    list_display = ["cluster", "tenant", "recurrence", "start_time", "duration_minutes", "first_day"]
    search_fields = ["cluster__name", "tenant__name"]


@admin.register(UpgradeDeferral)
class UpgradeDeferralAdmin(ReadOnlyAdmin):
    list_display = [
        "pool",
        "tenant",
        "training_claims",
        "claims_older_than_s",
        "deadline_s",
        "after_deadline",
    ]
    search_fields = ["pool__name", "tenant__name"]


@admin.register(MaintenanceExclusion)
class MaintenanceExclusionAdmin(ReadOnlyAdmin):
    list_display = ["cluster", "tenant", "first_day", "last_day", "scope", "reason"]
    list_filter = ["scope"]
    search_fields = ["cluster__name", "tenant__name"]
