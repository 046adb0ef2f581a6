from dataclasses import asdict

from rest_framework import serializers

from claims.models import Claim
from nodepools.models import Gpu, Node, NodePool
from nvke.api.documents import document_type, json_field, plain
from telemetry import policy
from telemetry.models import RESCALING_BOUNDS, ClaimScaling, MetricPoint, NodeToken, TelemetryEvent


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


# A GPU's document: the fields GpuTelemetrySerializer declares, filled from the GPU (its node and pool
# read with it) and encoded by msgspec. DRF built the fields and walked them for every request.
GpuTelemetryDocument = document_type(GpuTelemetrySerializer)


def gpu_document(gpu: Gpu, latest: dict[int, dict]) -> GpuTelemetryDocument:
    """The GPU with its latest sample (`latest`: GPU id: sample, as views.dict_latest reads them)."""
    return GpuTelemetryDocument(
        id=gpu.pk,
        uuid=gpu.uuid,  # msgspec writes a UUID hyphenated, as UUIDField does
        node=gpu.node.name,
        pool=gpu.node.pool_id,
        cluster=gpu.node.pool.cluster_id,
        index=gpu.index,
        memory_mib=gpu.memory_mib,
        healthy=gpu.healthy,
        latest=json_field(latest.get(gpu.pk)),  # a sample's floats as DRF writes them
    )


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


class TelemetryEventSerializer(serializers.ModelSerializer):
    class Meta:
        model = TelemetryEvent
        fields = ["id", "kind", "cluster", "claim", "gpu", "node", "message", "created_at"]


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
        """The declared fields' Struct (the policy's fields among them: a field the policy has and the
        serializer does not declare is refused), handed to DRF as plain values: it answers writes too."""
        row = policy.row_of(pool)
        return plain(
            PoolRescalingDocument(
                pool=pool.pk,
                cluster=pool.cluster_id,
                pool_name=pool.name,
                custom=row is not None,
                **asdict(policy.of_row(row)),
                updated_at=row and row.updated_at,
            )
        )

    def validate(self, attrs: dict) -> dict:
        unknown = (
            sorted(set(self.initial_data) - set(self.fields)) if isinstance(self.initial_data, dict) else []
        )
        if unknown:
            raise serializers.ValidationError({unknown[0]: "No such field of a rescaling policy."})
        return attrs


PoolRescalingDocument = document_type(PoolRescalingSerializer)
