from django.apps import AppConfig


class TelemetryConfig(AppConfig):
    name = "telemetry"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from audit.recorder import register

        from .models import ClaimScaling, NodeToken, PoolRescaling

        register(NodeToken, secret=("key_hash",))
        register(ClaimScaling, ignore=("state", "reason"))  # the rescaler's state
        register(PoolRescaling)
