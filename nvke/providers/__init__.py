"""The provider registry: each cluster is driven by one pair of implementations (infrastructure, cluster
operations). A cluster NVKE provisioned uses the pair of the provider that made it (Cluster.provider,
NVKE_PROVIDER's when it was created); a cluster a tenant attached uses "kubernetes". `register` adds
another pair."""

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
    "kubernetes": ProviderPaths(
        "nvke.providers.kubernetes.infrastructure.KubernetesInfrastructure",
        "nvke.providers.kubernetes.operations.KubernetesOperations",
    ),
    # Clusters Cluster API provisions are Kubernetes clusters to operate on, whose machines it replaces.
    "clusterapi": ProviderPaths(
        "nvke.providers.clusterapi.infrastructure.ClusterAPIInfrastructure",
        "nvke.providers.clusterapi.operations.ClusterAPIOperations",
    ),
}


def register(name: str, infrastructure: str, operations: str) -> None:
    PROVIDERS[name] = ProviderPaths(infrastructure, operations)


def _paths(cluster: ClusterRef) -> ProviderPaths:
    name = cluster.provider or settings.NVKE_PROVIDER
    try:
        return PROVIDERS[name]
    except KeyError:
        raise RuntimeError(f"Unknown provider {name!r}; known: {sorted(PROVIDERS)}") from None


def get_infrastructure(cluster: ClusterRef) -> Infrastructure:
    """The infrastructure half of the cluster's provider."""
    return import_string(_paths(cluster).infrastructure)(cluster)


def operations_type(cluster: ClusterRef) -> type[ClusterOperations]:
    """The class of the cluster's provider's operations: what it can do, without connecting."""
    return import_string(_paths(cluster).operations)


def operations_for(cluster: ClusterRef) -> ClusterOperations:
    """The provider's operations on one cluster, bound to its endpoint, token and CA."""
    return operations_type(cluster)(cluster)
