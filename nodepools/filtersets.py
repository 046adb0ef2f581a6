import django_filters

from nodepools.models import Node, NodePool
from nvke.api.filters import IntegerFilter, StrictFilterSet


class NodePoolFilter(StrictFilterSet):
    """Shared by the API list and the UI list."""

    # Plain numbers, not model choices: an id of another tenant must filter to nothing, not 400.
    cluster = IntegerFilter()
    name = django_filters.CharFilter(lookup_expr="icontains")
    gpu_model = django_filters.CharFilter(field_name="gpu_model__name")
    driver_version = django_filters.CharFilter(field_name="driver_release__version")

    class Meta:
        model = NodePool
        fields = ["cluster", "name", "status", "gpu_model", "sharing_mode", "driver_version"]


class NodeFilter(StrictFilterSet):
    pool = IntegerFilter()
    cluster = IntegerFilter(field_name="pool__cluster")

    class Meta:
        model = Node
        fields = ["pool", "cluster", "status", "cordoned", "driver_version"]
