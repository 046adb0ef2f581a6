from django.apps import AppConfig


class ClaimsConfig(AppConfig):
    name = "claims"
    verbose_name = "GPU claims"

    def ready(self) -> None:
        from audit.recorder import register
        from claims.models import Claim, ClaimGroup

        register(Claim, ignore=("status", "pending_reason", "allocated_at"))
        register(ClaimGroup)
