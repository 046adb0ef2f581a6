from django.apps import AppConfig


class AuditConfig(AppConfig):
    name = "audit"
    verbose_name = "Audit log"

    def ready(self) -> None:
        from . import registrations  # noqa: F401  (connects the models whose changes are recorded)
