from django.apps import AppConfig


class NodepoolsConfig(AppConfig):
    name = "nodepools"
    verbose_name = "GPU node pools"

    def ready(self) -> None:
        from audit.recorder import CONTROL_LOOP_FIELDS, register

        from .models import Claim, NodePool

        register(NodePool, ignore=CONTROL_LOOP_FIELDS)
        register(Claim, ignore=("status", "pending_reason", "allocated_at"))
