from django.apps import AppConfig


class TenancyConfig(AppConfig):
    name = "nvke.tenancy"
    label = "tenancy"
    verbose_name = "Tenancy"

    def ready(self) -> None:
        from . import schema  # noqa: F401  (registers the token scheme with drf-spectacular)
