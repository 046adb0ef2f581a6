from django.db.models import Count, OuterRef, Subquery
from django.db.models.functions import Coalesce
from drf_spectacular.utils import extend_schema
from rest_framework import mixins, status
from rest_framework.decorators import action
from rest_framework.renderers import BrowsableAPIRenderer
from rest_framework.response import Response

from catalog.api.views import CatalogViewSet
from catalog.models import Region
from nodepools import selectors, services
from nodepools.api.documents import node_documents
from nodepools.api.serializers import (
    NodePoolSerializer,
    NodeSerializer,
    PoolAutoscalingSerializer,
    RegionSerializer,
)
from nodepools.filtersets import NodeFilter, NodePoolFilter
from nodepools.models import Node, NodePool
from nvke.api.documents import encode
from nvke.api.pagination import NodePagination
from nvke.api.rendering import JSONRenderer, WrittenJSON
from nvke.api.viewsets import ReadOnlyTenantViewSet, TenantScopedViewSet


class NodePoolViewSet(
    mixins.CreateModelMixin,
    mixins.ListModelMixin,
    mixins.RetrieveModelMixin,
    mixins.UpdateModelMixin,
    mixins.DestroyModelMixin,
    TenantScopedViewSet,
):
    """GPU node pools. Create, scale (PATCH node_count) and delete are asynchronous: watch `status`."""

    # Counted by the database: a pool of 1,000 nodes is not read whole to say how many are ready.
    queryset = NodePool.objects.select_related("cluster", "gpu_model", "driver_release").annotate(
        ready_node_count=Coalesce(
            Subquery(
                Node.objects.filter(pool=OuterRef("pk"), status=Node.Status.READY)
                .values("pool")
                .annotate(n=Count("pk"))
                .values("n")
            ),
            0,
        )
    )
    serializer_class = NodePoolSerializer
    filterset_class = NodePoolFilter
    ordering_fields = ["name", "created_at", "status", "node_count"]

    def perform_create(self, serializer):
        serializer.instance = services.create_pool(context=self.tenant_context, **serializer.validated_data)

    def perform_update(self, serializer):
        serializer.instance = services.update_pool(serializer.instance, **serializer.validated_data)

    @extend_schema(responses={202: NodePoolSerializer})
    def destroy(self, request, *args, **kwargs):
        pool = services.delete_pool(self.get_object())
        return Response(self.get_serializer(pool).data, status=status.HTTP_202_ACCEPTED)

    @extend_schema(responses=PoolAutoscalingSerializer)
    @action(detail=True, filter_backends=[])
    def autoscaling(self, request, pk=None):
        """The pool's autoscaler: bounds, the node it is taking out, its recent decisions and why (set
        `autoscaling` and `scale_down_delay_s` with PATCH on the pool)."""
        return Response(PoolAutoscalingSerializer(selectors.autoscaling(self.get_object())).data)


class NodeViewSet(ReadOnlyTenantViewSet):
    """Nodes of the tenant's pools, with their GPUs as the provider reports them and each GPU's
    allocation snapshot (which claim holds which memory, compute share and MIG slice)."""

    # What the document shows and the preflight checks read (of the pool: its cluster and sharing mode):
    # each node built its pool whole, decoding the pool's JSON again for every node.
    queryset = Node.objects.select_related("pool").only(
        *("name", "status", "cordoned", "driver_version", "cpu_millicores", "memory_mib", "labels"),
        *("preflight", "created_at", "pool__cluster", "pool__sharing_mode"),
    )
    serializer_class = NodeSerializer
    pagination_class = NodePagination
    filterset_class = NodeFilter
    ordering_fields = ["name", "created_at"]

    # Its documents are encoded by msgspec (nodepools.api.documents), the renderer puts them in the body.
    renderer_classes = [JSONRenderer, BrowsableAPIRenderer]

    def list(self, request, *args, **kwargs):
        page = self.paginate_queryset(self.filter_queryset(self.get_queryset()))
        return self.get_paginated_response(WrittenJSON(encode(node_documents(page))))

    def retrieve(self, request, *args, **kwargs):
        return Response(WrittenJSON(encode(node_documents([self.get_object()])[0])))


class RegionViewSet(CatalogViewSet):
    """Regions and how many GPUs of each model they have free."""

    queryset = Region.objects.filter(enabled=True)
    serializer_class = RegionSerializer
    lookup_field = "name"
