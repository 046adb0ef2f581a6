from django.apps import AppConfig

# A run's status is what its controls change (start, pause, abort…), so it is recorded, the ticks'
# transitions too (actor system); their bookkeeping is not.
RUN_TICK_FIELDS = ("reason", "message", "tick_seq", "ticked_at", "max_unavailable_seen", "canary_done_at")


class UpgradesConfig(AppConfig):
    name = "upgrades"
    verbose_name = "Driver upgrades"

    def ready(self) -> None:
        from audit.recorder import register
        from nodepools.autoscaler import hold_scale_down

        from .models import FleetRollout, MaintenanceExclusion, MaintenanceWindow, UpgradeDeferral, UpgradeRun
        from .services import runs_holding

        hold_scale_down(runs_holding)  # a node leaving a run would fail it (NodeGone)

        register(UpgradeRun, ignore=(*RUN_TICK_FIELDS, "failed_accepted", "finished_at"))
        register(MaintenanceWindow)
        register(MaintenanceExclusion)
        register(UpgradeDeferral)
        # Fleet rollouts span tenants: operators read these entries in the admin; each run is in its
        # tenant's log.
        register(FleetRollout, tenant_of=lambda rollout: None, ignore=("wave",))
