"""Telemetry API: node-token ingestion, node tokens, GPUs with their latest values and history,
claim usage profiles, pools' rescaling policies and the log of rescaling and health decisions."""

import yaml
from django.http import HttpResponse
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, extend_schema
from rest_framework import mixins, status
from rest_framework.decorators import action
from rest_framework.permissions import AllowAny
from rest_framework.renderers import BrowsableAPIRenderer
from rest_framework.response import Response
from rest_framework.views import APIView

from clusters.models import Cluster
from nodepools.models import Gpu, NodePool
from nvke.api.documents import encode
from nvke.api.rendering import JSONRenderer, WrittenJSON
from nvke.api.viewsets import ReadOnlyTenantViewSet, TenantScopedViewSet
from nvke.errors import DomainError
from nvke.tenancy.roles import Action
from telemetry import ingest, policy, selectors
from telemetry.agent_manifest import agent_manifest
from telemetry.models import ClaimScaling, NodeToken, TelemetryEvent

from .serializers import (
    ClaimScalingSerializer,
    GpuTelemetrySerializer,
    MetricPointSerializer,
    NodeTokenSerializer,
    PoolRescalingSerializer,
    TelemetryEventSerializer,
    gpu_document,
)


def node_token(request) -> str:
    return ingest.node_token(request.headers.get("Authorization", ""))


class IngestView(APIView):
    """POST a batch of samples as a node: `Authorization: Node <node token>`, body
    `{"samples": [{"gpu": "<uuid>", "ts": <unix s>, "metrics": {"DCGM_FI_DEV_GPU_UTIL": 42, ...},
    "claims": {"<claim id>": <usage % of its share>}}]}`. 202 when stored; a bad batch stores nothing. An
    overloaded web process answers 503 `ingest_overloaded` with Retry-After: send the batch again then."""

    authentication_classes: list = []
    permission_classes = [AllowAny]

    @extend_schema(request=None, responses={202: None})
    def post(self, request):
        # Served by telemetry.intake ahead of Django under ASGI; this view answers the same for the
        # Django test client and the OpenAPI schema.
        count = ingest.ingest(request.headers.get("Authorization", ""), request.data)
        return Response({"accepted": count}, status=status.HTTP_202_ACCEPTED)


class InventoryView(APIView):
    """POST the node's GPUs as nvke-agent reads them from NVML, `{"gpus": [{"index": 0, "uuid":
    "GPU-…"}]}`, with `Authorization: Node <node token>`: an attached cluster without NVIDIA's DRA driver
    learns its GPUs' UUIDs this way (409 `provider_names_gpus` where the provider names them)."""

    authentication_classes: list = []
    permission_classes = [AllowAny]

    @extend_schema(request=None, responses={200: None})
    def post(self, request):
        return Response({"updated": ingest.record_inventory(node_token(request), request.data)})


class PreflightView(APIView):
    """POST the node's sharing preflight facts as nvke-agent reads them (`{"facts": {"driver_version":
    "580.105.08", "kernel_version": "6.1.0", "iommu": true, "mps": true, ...}}`, see nvke.agent.preflight)
    with `Authorization: Node <node token>`; answers what fails for its pool's sharing mode. A node that
    fails takes no claims until a report says it passes."""

    authentication_classes: list = []
    permission_classes = [AllowAny]

    @extend_schema(request=None, responses={200: None})
    def post(self, request):
        return Response({"failures": ingest.record_preflight(node_token(request), request.data)})


class NodeTokenViewSet(mixins.CreateModelMixin, mixins.ListModelMixin, TenantScopedViewSet):
    """Per-node telemetry tokens for nvke-agent. Creating one for a node replaces its old token."""

    queryset = NodeToken.objects.select_related("node")
    serializer_class = NodeTokenSerializer
    write_action = Action.MANAGE

    def perform_create(self, serializer):
        token, raw = NodeToken.issue(serializer.validated_data["node"])
        serializer.instance = token
        token.token = raw


class GpuTelemetryViewSet(ReadOnlyTenantViewSet):
    """The tenant's GPUs with their latest sample (`latest`: ts, util %, mem MiB, temp °C, power W,
    sm MHz, xid), filtered by `?cluster=` or `?pool=`; `history/` gives downsampled points."""

    # The columns a GPU's document shows: a page built every column of its GPUs, their nodes and their
    # pools (decoding the nodes' and pools' JSON), most of the list's time.
    queryset = (
        Gpu.objects.select_related("node__pool")
        .only("uuid", "index", "memory_mib", "healthy", "node__name", "node__pool__cluster")
        .order_by("pk")
    )
    serializer_class = GpuTelemetrySerializer

    def get_queryset(self):
        queryset = super().get_queryset()
        for param, field in (("cluster", "node__pool__cluster_id"), ("pool", "node__pool_id")):
            if value := self.request.query_params.get(param):
                if not value.isdigit():
                    raise DomainError(f"{param}: expected an id.", field=param)
                queryset = queryset.filter(**{field: value})
        return queryset

    # Its documents are encoded by msgspec (serializers.gpu_document), the renderer puts them in the body.
    renderer_classes = [JSONRenderer, BrowsableAPIRenderer]

    def list(self, request, *args, **kwargs):
        page = self.paginate_queryset(self.filter_queryset(self.get_queryset()))
        latest = dict_latest(page)
        return self.get_paginated_response(WrittenJSON(encode([gpu_document(gpu, latest) for gpu in page])))

    def retrieve(self, request, *args, **kwargs):
        gpu = self.get_object()
        return Response(WrittenJSON(encode(gpu_document(gpu, dict_latest([gpu])))))

    @extend_schema(
        parameters=[
            OpenApiParameter("resolution", int, enum=[10, 60], description="10 (last hour) or 60 (a week)"),
            OpenApiParameter(
                "minutes",
                {"type": "integer", "minimum": 1, "maximum": 10080},
                description="How far back (default 60)",
            ),
        ],
        responses=MetricPointSerializer(many=True),
    )
    @action(detail=True, pagination_class=None, filter_backends=[])  # one plain list, as documented
    def history(self, request, pk=None):
        gpu = self.get_object()
        resolution = request.query_params.get("resolution", "10")
        if resolution not in ("10", "60"):
            raise DomainError("resolution: 10 or 60 (seconds).", field="resolution")
        minutes = request.query_params.get("minutes", "60")
        if not minutes.isdigit() or not 1 <= int(minutes) <= 7 * 24 * 60:
            raise DomainError("minutes: 1 to 10080.", field="minutes")
        points = selectors.history(gpu.pk, int(resolution), int(minutes))
        return Response(MetricPointSerializer(points, many=True).data)


def dict_latest(gpus: list[Gpu]) -> dict[int, dict]:
    return {gpu.pk: latest for gpu, latest in selectors.gpus_with_latest(gpus) if latest is not None}


class TelemetryEventViewSet(ReadOnlyTenantViewSet):
    """Decisions taken on telemetry: claims grown, moved, throttled, shrunk; GPUs failed; nodes
    NotReady. Newest first."""

    queryset = TelemetryEvent.objects.all()
    serializer_class = TelemetryEventSerializer
    filterset_fields = ["cluster", "claim", "gpu", "kind"]


class ClaimScalingViewSet(mixins.CreateModelMixin, mixins.UpdateModelMixin, ReadOnlyTenantViewSet):
    """A fractional claim's usage profile (steady, bursty, growing: what the simulator plays) and its
    rescaling state. POST sets the profile of a claim (again: replaces it)."""

    queryset = ClaimScaling.objects.select_related("claim")
    serializer_class = ClaimScalingSerializer
    filterset_fields = ["state", "profile"]

    def perform_create(self, serializer):
        claim = serializer.validated_data["claim"]
        serializer.instance, _ = ClaimScaling.objects.update_or_create(
            claim=claim,
            defaults={
                "tenant_id": claim.tenant_id,
                "profile": serializer.validated_data.get("profile", ClaimScaling.Profile.STEADY),
            },
            create_defaults={
                "tenant_id": claim.tenant_id,
                "profile": serializer.validated_data.get("profile", ClaimScaling.Profile.STEADY),
                "requested_compute_percent": claim.compute_percent,
            },
        )

    def perform_update(self, serializer):
        serializer.validated_data.pop("claim", None)  # a profile stays with its claim
        serializer.save()


class PoolRescalingViewSet(mixins.UpdateModelMixin, ReadOnlyTenantViewSet):
    """Each of the tenant's node pools with its dynamic rescaling policy (pools without one show the
    platform defaults, `custom: false`). PUT sets the whole policy (fields left out take the defaults),
    PATCH the fields given; members and up. The id is the pool's."""

    queryset = NodePool.objects.select_related("rescaling").order_by("pk")
    serializer_class = PoolRescalingSerializer
    filterset_fields = ["cluster"]
    ordering_fields = ["id", "name"]

    def update(self, request, *args, **kwargs):
        partial = kwargs.pop("partial", False)
        pool = self.get_object()
        serializer = self.get_serializer(pool, data=request.data, partial=partial)
        serializer.is_valid(raise_exception=True)
        policy.set_pool_policy(pool, serializer.validated_data, reset=not partial)
        return Response(self.get_serializer(self.get_object()).data)


class ClusterAgentViewSet(TenantScopedViewSet):
    """nvke-agent for an attached cluster's nodes."""

    queryset = Cluster.objects.all()
    write_action = Action.MANAGE  # it issues node tokens, as the node-token API does

    @extend_schema(
        request=None,
        responses={(200, "application/yaml"): OpenApiResponse(OpenApiTypes.OBJECT, description="a v1 List")},
    )
    @action(detail=True, methods=["post"], url_path="agent-manifest")
    def agent_manifest(self, request, pk=None):
        """Issue a fresh node token for every node of the cluster's pools (old tokens stop working) and
        return the manifest that installs nvke-agent as a DaemonSet with them: `kubectl apply -f` it.
        Only for attached clusters (NVKE runs the agents of the ones it provisions); owners and admins."""
        cluster = self.get_object()
        if not cluster.attached:
            raise DomainError(
                "Only an attached cluster installs nvke-agent from a manifest.",
                field="cluster",
                code="not_attached",
            )
        body = agent_manifest(cluster, request.build_absolute_uri("/"))
        response = HttpResponse(
            yaml.safe_dump(body, sort_keys=False), content_type="application/yaml; charset=utf-8"
        )
        response["Cache-Control"] = "no-store"  # it holds the node tokens
        return response
