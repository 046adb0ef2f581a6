"""Telemetry API: node-token ingestion, node tokens, GPUs with their latest values and history,
claim usage profiles and the log of rescaling and health decisions."""

from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import mixins, serializers, status
from rest_framework.decorators import action
from rest_framework.permissions import AllowAny
from rest_framework.response import Response
from rest_framework.views import APIView

from nodepools.models import Claim, Gpu, Node
from nvke.api.viewsets import ReadOnlyTenantViewSet, TenantScopedViewSet
from nvke.errors import DomainError
from nvke.tenancy.roles import Action

from . import ingest, selectors
from .models import ClaimScaling, MetricPoint, NodeToken, TelemetryEvent


class IngestView(APIView):
    """POST a batch of samples as a node: `Authorization: Node <node token>`, body
    `{"samples": [{"gpu": "<uuid>", "ts": <unix s>, "metrics": {"DCGM_FI_DEV_GPU_UTIL": 42, ...},
    "claims": {"<claim id>": <usage % of its share>}}]}`. 202 when stored; a bad batch stores nothing."""

    authentication_classes: list = []
    permission_classes = [AllowAny]

    @extend_schema(request=None, responses={202: None})
    def post(self, request):
        scheme, _, raw = request.headers.get("Authorization", "").partition(" ")
        if scheme != "Node":
            raise ingest.InvalidNodeToken("Send `Authorization: Node <node token>`.")
        identity = ingest.authenticate(raw.strip())
        count = ingest.ingest(identity, request.data)
        return Response({"accepted": count}, status=status.HTTP_202_ACCEPTED)


class NodeTokenSerializer(serializers.ModelSerializer):
    node = serializers.PrimaryKeyRelatedField(queryset=Node.objects.none())
    token = serializers.CharField(read_only=True, help_text="Shown once, at creation.")

    class Meta:
        model = NodeToken
        fields = ["id", "node", "key_prefix", "created_at", "token"]
        read_only_fields = ["key_prefix", "created_at"]

    def get_fields(self):
        fields = super().get_fields()
        view = self.context.get("view")  # absent when DRF's ordering filter lists the fields
        if view is not None:
            fields["node"].queryset = Node.objects.restrict(view.tenant_context)
        return fields


class NodeTokenViewSet(mixins.CreateModelMixin, mixins.ListModelMixin, TenantScopedViewSet):
    """Per-node telemetry tokens for nvke-agent. Creating one for a node replaces its old token."""

    queryset = NodeToken.objects.select_related("node")
    serializer_class = NodeTokenSerializer
    write_action = Action.MANAGE

    def perform_create(self, serializer):
        token, raw = NodeToken.issue(serializer.validated_data["node"])
        serializer.instance = token
        token.token = raw


class GpuTelemetrySerializer(serializers.ModelSerializer):
    node = serializers.CharField(source="node.name")
    pool = serializers.IntegerField(source="node.pool_id")
    cluster = serializers.IntegerField(source="node.pool.cluster_id")
    latest = serializers.SerializerMethodField()

    class Meta:
        model = Gpu
        fields = ["id", "uuid", "node", "pool", "cluster", "index", "memory_mib", "healthy", "latest"]

    def get_latest(self, gpu) -> dict | None:
        return self.context["latest"].get(gpu.pk)


class MetricPointSerializer(serializers.ModelSerializer):
    class Meta:
        model = MetricPoint
        fields = [
            "bucket",
            "samples",
            "utilization",
            "memory_used_mib",
            "temperature_c",
            "power_w",
            "sm_clock_mhz",
        ]


class GpuTelemetryViewSet(ReadOnlyTenantViewSet):
    """The tenant's GPUs with their latest sample (`latest`: ts, util %, mem MiB, temp °C, power W,
    sm MHz, xid), filtered by `?cluster=` or `?pool=`; `history/` gives downsampled points."""

    queryset = Gpu.objects.select_related("node__pool").order_by("pk")
    serializer_class = GpuTelemetrySerializer

    def get_queryset(self):
        queryset = super().get_queryset()
        for param, field in (("cluster", "node__pool__cluster_id"), ("pool", "node__pool_id")):
            if value := self.request.query_params.get(param):
                if not value.isdigit():
                    raise DomainError(f"{param}: expected an id.", field=param)
                queryset = queryset.filter(**{field: value})
        return queryset

    def get_serializer(self, *args, **kwargs):
        instances = args[0] if args else []
        gpus = [instances] if isinstance(instances, Gpu) else list(instances)
        kwargs["context"] = {**self.get_serializer_context(), "latest": dict_latest(gpus)}
        return super().get_serializer(*args, **kwargs)

    @extend_schema(
        parameters=[
            OpenApiParameter("resolution", int, description="10 (last hour) or 60 (last week)"),
            OpenApiParameter("minutes", int, description="How far back (default 60)"),
        ],
        responses=MetricPointSerializer(many=True),
    )
    @action(detail=True)
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


class TelemetryEventSerializer(serializers.ModelSerializer):
    class Meta:
        model = TelemetryEvent
        fields = ["id", "kind", "cluster", "claim", "gpu", "node", "message", "created_at"]


class TelemetryEventViewSet(ReadOnlyTenantViewSet):
    """Decisions taken on telemetry: claims grown, moved, throttled, shrunk; GPUs failed; nodes
    NotReady. Newest first."""

    queryset = TelemetryEvent.objects.all()
    serializer_class = TelemetryEventSerializer
    filterset_fields = ["cluster", "claim", "gpu", "kind"]


class ClaimScalingSerializer(serializers.ModelSerializer):
    claim = serializers.PrimaryKeyRelatedField(queryset=Claim.objects.none())

    class Meta:
        model = ClaimScaling
        fields = ["id", "claim", "profile", "requested_compute_percent", "state", "reason", "updated_at"]
        read_only_fields = ["requested_compute_percent", "state", "reason", "updated_at"]

    def get_fields(self):
        fields = super().get_fields()
        view = self.context.get("view")  # absent when DRF's ordering filter lists the fields
        if view is not None:
            fields["claim"].queryset = Claim.objects.restrict(view.tenant_context)
        return fields

    def validate_claim(self, claim: Claim) -> Claim:
        if claim.kind != Claim.Kind.FRACTION or not claim.compute_percent:
            raise serializers.ValidationError("Only fractional claims with a compute share are rescaled.")
        return claim


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
