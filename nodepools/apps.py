from django.apps import AppConfig


class NodepoolsConfig(AppConfig):
    name = "nodepools"
    verbose_name = "GPU node pools"

    def ready(self) -> None:
        from audit.recorder import CONTROL_LOOP_FIELDS, register
        from nodepools.models import AutoscalerDecision, NodePool

        # The autoscaler's progress through a scale-down is control-loop state; its decisions say it.
        # Telemetry's utilization summary is a reading, not a change anyone made.
        scale_down = ("scale_down_node", "scale_down_phase", "scale_down_started_at")
        readings = ("gpu_utilization", "gpu_utilization_at")
        register(NodePool, ignore=(*CONTROL_LOOP_FIELDS, *scale_down, *readings))
        register(AutoscalerDecision, deletes=False)
