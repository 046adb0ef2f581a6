from django.db.models import Count, OuterRef, Subquery
from django.db.models.functions import Coalesce
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import mixins, status, viewsets
from rest_framework.decorators import action
from rest_framework.renderers import BrowsableAPIRenderer
from rest_framework.response import Response

from clusters.api.serializers import KubernetesVersionSerializer
from clusters.models import KubernetesVersion, Region
from nodepools import selectors, services
from nodepools.compatibility import CUDA_PARAMETER
from nodepools.filtersets import NodeFilter, NodePoolFilter
from nodepools.models import DriverRelease, GpuModel, Node, NodeImage, NodePool, SharingMode
from nvke.api.pagination import NodePagination
from nvke.api.permissions import AuthenticatedReadOnly
from nvke.api.rendering import JSONRenderer, WrittenJSON
from nvke.api.viewsets import ReadOnlyTenantViewSet, TenantScopedViewSet
from nvke.errors import DomainError

from .serializers import (
    DriverCompatibilitySerializer,
    DriverReleaseSerializer,
    GpuModelSerializer,
    NodeImageSerializer,
    NodePoolSerializer,
    NodeSerializer,
    PoolAutoscalingSerializer,
    RegionSerializer,
    write_nodes,
)


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

    # Its documents are written as JSON text (serializers.write_nodes), the renderer puts them in the body.
    renderer_classes = [JSONRenderer, BrowsableAPIRenderer]

    def list(self, request, *args, **kwargs):
        page = self.paginate_queryset(self.filter_queryset(self.get_queryset()))
        return self.get_paginated_response(WrittenJSON(f"[{','.join(write_nodes(page))}]"))

    def retrieve(self, request, *args, **kwargs):
        return Response(WrittenJSON(write_nodes([self.get_object()])[0]))


class CatalogViewSet(viewsets.ReadOnlyModelViewSet):
    permission_classes = [AuthenticatedReadOnly]
    pagination_class = None


class GpuModelViewSet(CatalogViewSet):
    """GPU models of the catalog with their MIG profiles."""

    queryset = GpuModel.objects.select_related("architecture").prefetch_related("mig_profiles")
    serializer_class = GpuModelSerializer
    lookup_field = "name"
    filterset_fields = ["form_factor", "nvlink"]

    @extend_schema(
        parameters=[
            OpenApiParameter("sharing_mode", enum=SharingMode.values, default=SharingMode.EXCLUSIVE),
            OpenApiParameter("cuda", CUDA_PARAMETER, description="A CUDA version the workloads need"),
        ],
        responses=DriverCompatibilitySerializer(many=True),
    )
    @action(detail=True, url_path="drivers", filter_backends=[])  # the models' filters are not its
    def drivers(self, request, name=None):
        """Each driver release and, when it cannot run this GPU, every rule it breaks. `?cuda=12.8` adds
        the CUDA minimum rule, as a pool's driver-options do."""
        sharing_mode = request.query_params.get("sharing_mode", SharingMode.EXCLUSIVE)
        if sharing_mode not in SharingMode.values:
            raise DomainError(
                f"sharing_mode: {sharing_mode!r} is not one of {', '.join(SharingMode.values)}.",
                field="sharing_mode",
                code="invalid_choice",
            )
        cuda = request.query_params.get("cuda", "")
        rows = [
            {"driver": driver, "compatible": not refusals, "refusals": refusals}
            for driver, refusals in selectors.driver_compatibility(self.get_object(), sharing_mode, cuda)
        ]
        return Response(DriverCompatibilitySerializer(rows, many=True).data)


class DriverReleaseViewSet(CatalogViewSet):
    queryset = DriverRelease.objects.prefetch_related("architectures")
    serializer_class = DriverReleaseSerializer
    lookup_field = "version"
    lookup_value_regex = r"[0-9.]+"
    filterset_fields = ["branch", "branch_type", "enabled"]


class NodeImageViewSet(CatalogViewSet):
    """GPU node images: OS, kernel, container toolkit and any preinstalled driver (pools change image with
    an upgrade run of `node_image`)."""

    queryset = NodeImage.objects.select_related("driver_release")
    serializer_class = NodeImageSerializer
    lookup_field = "name"
    filterset_fields = ["enabled"]


class KubernetesVersionViewSet(CatalogViewSet):
    queryset = KubernetesVersion.objects.all()
    serializer_class = KubernetesVersionSerializer
    lookup_field = "version"
    lookup_value_regex = r"[0-9.]+"


class RegionViewSet(CatalogViewSet):
    """Regions and how many GPUs of each model they have free."""

    queryset = Region.objects.filter(enabled=True)
    serializer_class = RegionSerializer
    lookup_field = "name"
