import django_filters

from clusters.models import Cluster
from nvke.api.filters import StrictFilterSet


class ClusterFilter(StrictFilterSet):
    """Shared by the API list and the UI list."""

    name = django_filters.CharFilter(lookup_expr="icontains")
    region = django_filters.CharFilter(field_name="region__name")
    kubernetes_version = django_filters.CharFilter(field_name="kubernetes_version__version")

    class Meta:
        model = Cluster
        fields = ["name", "status", "region", "kubernetes_version"]
