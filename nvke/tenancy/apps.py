from django.apps import AppConfig
from django.db.models.signals import post_migrate

from nvke import caches


def _clear_caches(**kwargs) -> None:
    """A migration (or a flush, which sends the same signal) changes the columns and rows the per-process
    caches were filled from."""
    caches.clear_all()


class TenancyConfig(AppConfig):
    name = "nvke.tenancy"
    label = "tenancy"
    verbose_name = "Tenancy"

    def ready(self) -> None:
        from nvke import encryption  # noqa: F401  (registers its `check --deploy` check)
        from nvke.api.fields import strict_json_types

        post_migrate.connect(_clear_caches, sender=self, dispatch_uid="nvke.caches.clear_all")
        strict_json_types()  # the API's string and boolean fields take only those, as the schema says

        from . import (
            login_throttle,  # noqa: F401  (counts failed sign-ins)
            schema,  # noqa: F401  (registers the token scheme with drf-spectacular)
            signals,  # noqa: F401  (a token that stops working closes its websockets)
        )
