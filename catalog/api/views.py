"""The catalog, read by every signed-in user: GPU models (and which drivers each runs), driver releases,
node images and Kubernetes versions."""

from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import viewsets
from rest_framework.decorators import action
from rest_framework.response import Response

from catalog.api.serializers import (
    DriverCompatibilitySerializer,
    DriverReleaseSerializer,
    GpuModelSerializer,
    KubernetesVersionSerializer,
    NodeImageSerializer,
)
from catalog.compatibility import CUDA_PARAMETER, driver_compatibility
from catalog.models import DriverRelease, GpuModel, KubernetesVersion, NodeImage, SharingMode
from nvke.api.permissions import AuthenticatedReadOnly
from nvke.errors import DomainError


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
            for driver, refusals in driver_compatibility(self.get_object(), sharing_mode, cuda)
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
