"""The provider registry: NVKE_PROVIDER names one pair of implementations (infrastructure, cluster
operations); `register` adds another (the Kubernetes and Cluster API providers)."""

from dataclasses import dataclass

from django.conf import settings
from django.utils.module_loading import import_string

from .base import ClusterOperations, ClusterRef, Infrastructure


@dataclass(frozen=True)
class ProviderPaths:
    """Dotted paths of a provider's two halves, imported only when the provider is used."""

    infrastructure: str
    operations: str


PROVIDERS: dict[str, ProviderPaths] = {
    "simulator": ProviderPaths(
        "nvke.providers.simulator.provider.SimulatorInfrastructure",
        "nvke.providers.simulator.provider.SimulatorOperations",
    ),
}


def register(name: str, infrastructure: str, operations: str) -> None:
    PROVIDERS[name] = ProviderPaths(infrastructure, operations)


def _paths() -> ProviderPaths:
    try:
        return PROVIDERS[settings.NVKE_PROVIDER]
    except KeyError:
        raise RuntimeError(
            f"Unknown NVKE_PROVIDER {settings.NVKE_PROVIDER!r}; known: {sorted(PROVIDERS)}"
        ) from None


def get_infrastructure() -> Infrastructure:
    """The infrastructure half of the provider named by settings.NVKE_PROVIDER."""
    return import_string(_paths().infrastructure)()


def operations_for(cluster: ClusterRef) -> ClusterOperations:
    """The provider's operations on one cluster, bound to its endpoint, token and CA."""
    return import_string(_paths().operations)(cluster)
