"""Telemetry API: node-token ingestion, node tokens, GPUs with their latest values and history,
claim usage profiles, pools' rescaling policies and the log of rescaling and health decisions."""

from dataclasses import asdict

from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import mixins, serializers, status
from rest_framework.decorators import action
from rest_framework.permissions import AllowAny
from rest_framework.response import Response
from rest_framework.views import APIView

from nodepools.models import Claim, Gpu, Node, NodePool
from nvke.api.viewsets import ReadOnlyTenantViewSet, TenantScopedViewSet
from nvke.errors import DomainError
from nvke.tenancy.roles import Action

from . import ingest, policy, selectors
from .models import RESCALING_BOUNDS, ClaimScaling, MetricPoint, NodeToken, TelemetryEvent


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


def _bounded(name: str, help_text: str) -> serializers.IntegerField:
    # The service checks the bounds (400 out_of_bounds naming the field); the schema states them.
    low, high = RESCALING_BOUNDS[name]
    return serializers.IntegerField(required=False, help_text=f"{help_text} ({low}–{high}).")


class PoolRescalingSerializer(serializers.Serializer):
    """A pool's rescaling policy. Read from the pool: its own row, or the platform defaults."""

    pool = serializers.IntegerField(source="pk", read_only=True)
    cluster = serializers.IntegerField(source="cluster_id", read_only=True)
    pool_name = serializers.CharField(source="name", read_only=True)
    custom = serializers.BooleanField(
        read_only=True,
        help_text="false: the pool follows the platform defaults (it has no policy of its own)",
    )
    enabled = serializers.BooleanField(
        required=False,
        help_text="false: the pool's claims never grow (grown ones still shrink back when idle)",
    )
    pressure_percent = _bounded("pressure_percent", "Usage, in % of a claim's share, that counts as pressure")
    pressure_s = _bounded("pressure_s", "Seconds of unbroken pressure before a claim grows")
    idle_percent = _bounded("idle_percent", "Usage at or below which a claim is idle; below pressure_percent")
    idle_s = _bounded("idle_s", "Seconds of unbroken idleness before a grown claim shrinks back")
    max_growth_percent = _bounded("max_growth_percent", "The most a claim grows to, in % of its request")
    updated_at = serializers.DateTimeField(read_only=True, allow_null=True)

    def to_representation(self, pool: NodePool) -> dict:
        row = policy.row_of(pool)
        return {
            "pool": pool.pk,
            "cluster": pool.cluster_id,
            "pool_name": pool.name,
            "custom": row is not None,
            **asdict(policy.of_row(row)),
            "updated_at": serializers.DateTimeField().to_representation(row.updated_at) if row else None,
        }

    def validate(self, attrs: dict) -> dict:
        unknown = (
            sorted(set(self.initial_data) - set(self.fields)) if isinstance(self.initial_data, dict) else []
        )
        if unknown:
            raise serializers.ValidationError({unknown[0]: "No such field of a rescaling policy."})
        return attrs


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
