from django.db.models import Count
from django.http import HttpResponse
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiResponse, extend_schema
from rest_framework import mixins, status
from rest_framework.decorators import action
from rest_framework.exceptions import NotFound, PermissionDenied
from rest_framework.response import Response

from clusters import services
from clusters.api.serializers import AttachClusterSerializer, ClusterSerializer
from clusters.filtersets import ClusterFilter
from clusters.kubeconfig import kubeconfig_filename, kubeconfig_yaml, parse_kubeconfig
from clusters.models import Cluster
from nvke.api.permissions import READ_ONLY_TOKEN, read_only_token
from nvke.api.viewsets import TenantScopedViewSet
from nvke.providers.kubernetes import rbac
from nvke.tenancy.roles import Action

# What kubeconfig_yaml writes (a YAML document, which clients read as the object it is).
_NAMED = {"type": "object", "required": ["name"], "properties": {"name": {"type": "string"}}}
KUBECONFIG_SCHEMA = {
    "type": "object",
    "required": ["apiVersion", "kind", "clusters", "users", "contexts", "current-context"],
    "properties": {
        "apiVersion": {"type": "string", "enum": ["v1"]},
        "kind": {"type": "string", "enum": ["Config"]},
        "clusters": {"type": "array", "items": _NAMED},
        "users": {"type": "array", "items": _NAMED},
        "contexts": {"type": "array", "items": _NAMED},
        "current-context": {"type": "string"},
        "preferences": {"type": "object"},
    },
}


class ClusterViewSet(
    mixins.CreateModelMixin,
    mixins.ListModelMixin,
    mixins.RetrieveModelMixin,
    mixins.DestroyModelMixin,
    TenantScopedViewSet,
):
    """Kubernetes clusters of the tenant. Create and delete are asynchronous: watch `status`."""

    # Meta.ordering does not apply to an aggregating query: order explicitly.
    queryset = (
        Cluster.objects.select_related("tenant", "kubernetes_version", "region")
        .annotate(node_pool_count=Count("node_pools"))
        .prefetch_related("addons")
        .order_by("name")
    )
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

    def get_serializer_class(self):
        return AttachClusterSerializer if self.action == "attach" else ClusterSerializer

    @extend_schema(request=AttachClusterSerializer, responses={201: ClusterSerializer})
    @action(detail=False, methods=["post"])
    def attach(self, request):
        """Attach a running cluster (kubeconfig, or endpoint + token + CA bundle). NVKE checks it first —
        reachable with that CA, token accepted, Kubernetes 1.30+, every permission of its RBAC manifest,
        GPU Operator and GPU feature discovery present — and saves nothing unless every check passes:
        a refusal is a 400 whose code names the first failed check and whose details list them all."""
        serializer = AttachClusterSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        data = serializer.validated_data
        if data.get("kubeconfig"):
            endpoint, token, ca_bundle = parse_kubeconfig(data["kubeconfig"])
        else:
            endpoint, token, ca_bundle = data["endpoint"], data["token"], data.get("ca_bundle", "")
        cluster = services.attach_cluster(
            context=self.tenant_context,
            name=data["name"],
            endpoint=endpoint,
            token=token,
            ca_bundle=ca_bundle,
        )
        return Response(ClusterSerializer(cluster, context=self.get_serializer_context()).data, status=201)

    @extend_schema(
        responses={
            (200, "application/yaml"): OpenApiResponse(
                OpenApiTypes.OBJECT, description="a v1 List of objects"
            )
        }
    )
    @action(detail=False, methods=["get"], url_path="rbac-manifest")
    def rbac_manifest(self, request):
        """The manifest a cluster admin applies before attaching: NVKE's service account, a least-privilege
        ClusterRole and a token Secret."""
        return HttpResponse(rbac.manifest(), content_type="application/yaml; charset=utf-8")

    @property
    def read_action(self) -> Action:
        """The kubeconfig holds the cluster-admin token: members and up, like a write."""
        return Action.CHANGE if self.action == "kubeconfig" else Action.VIEW

    @extend_schema(
        responses={
            (200, "application/yaml"): OpenApiResponse(
                KUBECONFIG_SCHEMA, description="kubeconfig with the cluster-admin bearer token"
            )
        }
    )
    @action(detail=True, methods=["get"])
    def kubeconfig(self, request, pk=None):
        """The cluster's kubeconfig (YAML) with its admin token; 404 until the cluster is running. Members
        and up; a viewer or a read-only token gets 403 (the token can change the cluster)."""
        if read_only_token(request):
            raise PermissionDenied(READ_ONLY_TOKEN)
        cluster = self.get_object()
        if cluster.attached:
            raise NotFound("An attached cluster's kubeconfig is the one it was attached with: NVKE has none.")
        if cluster.status != Cluster.Status.RUNNING or not cluster.endpoint:
            raise NotFound("The cluster is not running yet: it has no kubeconfig.")
        response = HttpResponse(
            kubeconfig_yaml(cluster, request.user.get_username()),
            content_type="application/yaml; charset=utf-8",
        )
        response["Content-Disposition"] = f'attachment; filename="{kubeconfig_filename(cluster)}"'
        response["Cache-Control"] = "no-store"
        return response
