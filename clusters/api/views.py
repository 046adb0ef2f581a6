from drf_spectacular.utils import extend_schema
from rest_framework import mixins, status
from rest_framework.response import Response

from clusters import services
from clusters.filters import ClusterFilter
from clusters.models import Cluster
from nvke.api.viewsets import TenantScopedViewSet

from .serializers import ClusterSerializer


class ClusterViewSet(
    mixins.CreateModelMixin,
    mixins.ListModelMixin,
    mixins.RetrieveModelMixin,
    mixins.DestroyModelMixin,
    TenantScopedViewSet,
):
    """Kubernetes clusters of the tenant. Create and delete are asynchronous: watch `status`."""

    queryset = Cluster.objects.select_related("kubernetes_version", "region")
    serializer_class = ClusterSerializer
    filterset_class = ClusterFilter
    ordering_fields = ["name", "created_at", "status"]

    def perform_create(self, serializer):
        serializer.instance = services.create_cluster(
            context=self.tenant_context, **serializer.validated_data
        )

    @extend_schema(responses={202: ClusterSerializer})
    def destroy(self, request, *args, **kwargs):
        cluster = services.delete_cluster(self.get_object())
        return Response(self.get_serializer(cluster).data, status=status.HTTP_202_ACCEPTED)
