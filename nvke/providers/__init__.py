from django.conf import settings
from django.utils.module_loading import import_string

from .base import Provider

PROVIDERS = {"simulator": "nvke.providers.simulator.provider.SimulatorProvider"}


def get_provider() -> Provider:
    """The provider named by settings.NVKE_PROVIDER."""
    try:
        path = PROVIDERS[settings.NVKE_PROVIDER]
    except KeyError:
        raise RuntimeError(
            f"Unknown NVKE_PROVIDER {settings.NVKE_PROVIDER!r}; known: {sorted(PROVIDERS)}"
        ) from None
    return import_string(path)()
