from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from catalog.models import DriverRelease, GpuModel, Region, SharingMode
from clusters.models import Cluster
from nodepools import preflight
from nodepools.capacity import offers
from nodepools.models import AutoscalerDecision, Node, NodePool, ScaleDown
from nvke.api.documents import document_type, plain
from nvke.tenancy.context import resolve_tenant

IMMUTABLE_POOL_FIELDS = ("cluster", "name", "gpu_model", "gpus_per_node")


class RegionOfferSerializer(serializers.Serializer):
    gpu_model = serializers.CharField()
    available_gpus = serializers.IntegerField(
        help_text="GPUs of this model the tenant may add in the region now: the least of what its quota "
        "leaves, its fair share beyond what its pools ask for already, and what no pool holds"
    )
    limited_by = serializers.ChoiceField(choices=["quota", "fair_share", "capacity"])
    quota_left_gpus = serializers.IntegerField(
        allow_null=True, help_text="What the tenant's GPU quota leaves of this model (null: unlimited)"
    )


class RegionSerializer(serializers.ModelSerializer):
    inventory = serializers.SerializerMethodField()

    class Meta:
        model = Region
        fields = ["name", "display_name", "inventory"]

    @extend_schema_field(RegionOfferSerializer(many=True))
    def get_inventory(self, region: Region) -> list[dict]:
        context = resolve_tenant(self.context["request"])
        return RegionOfferSerializer(offers(region.pk, context and context.tenant.pk), many=True).data


class NodePoolSerializer(serializers.ModelSerializer):
    cluster = serializers.PrimaryKeyRelatedField(queryset=Cluster.objects.none())
    gpu_model = serializers.SlugRelatedField(slug_field="name", queryset=GpuModel.objects.all())
    driver_release = serializers.SlugRelatedField(slug_field="version", queryset=DriverRelease.objects.all())
    sharing_mode = serializers.ChoiceField(choices=SharingMode.choices, default=SharingMode.EXCLUSIVE)
    mig_layout = serializers.ListField(
        child=serializers.CharField(max_length=24), required=False, max_length=7
    )
    node_selector = serializers.DictField(
        child=serializers.CharField(max_length=63, allow_blank=True),
        required=False,
        help_text="Attached clusters only: labels a node must carry to join the pool (besides the GPU "
        "model and count, matched from GPU feature discovery's labels).",
    )
    nodes_ready = serializers.SerializerMethodField()

    class Meta:
        model = NodePool
        fields = [
            "id",
            "cluster",
            "name",
            "gpu_model",
            "gpus_per_node",
            "node_count",
            "min_nodes",
            "max_nodes",
            "driver_release",
            "sharing_mode",
            "mig_layout",
            "placement_policy",
            "compute_oversubscription_percent",
            "default_guaranteed_percent",
            "node_selector",
            "autoscaling",
            "scale_down_delay_s",
            "upgrade_max_unavailable",
            "upgrade_max_surge",
            "status",
            "status_reason",
            "status_message",
            "conditions",
            "nodes_ready",
            "created_at",
            "updated_at",
        ]
        read_only_fields = ["status", "status_reason", "status_message", "conditions"]
        validators = []  # uniqueness and bounds are the service's, answered with the field named

    def get_fields(self) -> dict:
        fields = super().get_fields()
        request = self.context.get("request")
        if request is not None:
            # Another tenant's cluster does not exist, as far as this request can tell.
            fields["cluster"].queryset = Cluster.objects.restrict(resolve_tenant(request))
        return fields

    def to_representation(self, pool: NodePool) -> dict:
        """The declared fields' Struct filled by hand: a read then builds none of the fields (DRF built
        them for every request, most of a cheap read's serializer time). tests/nvke/api/
        test_read_documents.py holds it to DRF's walk."""
        return plain(
            NodePoolDocument(
                id=pool.pk,
                cluster=pool.cluster_id,
                name=pool.name,
                gpu_model=pool.gpu_model.name,
                gpus_per_node=pool.gpus_per_node,
                node_count=pool.node_count,
                min_nodes=pool.min_nodes,
                max_nodes=pool.max_nodes,
                driver_release=pool.driver_release.version,
                sharing_mode=pool.sharing_mode,
                mig_layout=_strings(pool.mig_layout),
                placement_policy=pool.placement_policy,
                compute_oversubscription_percent=pool.compute_oversubscription_percent,
                default_guaranteed_percent=pool.default_guaranteed_percent,
                node_selector={str(key): _string(value) for key, value in pool.node_selector.items()},
                autoscaling=pool.autoscaling,
                scale_down_delay_s=pool.scale_down_delay_s,
                upgrade_max_unavailable=pool.upgrade_max_unavailable,
                upgrade_max_surge=pool.upgrade_max_surge,
                status=pool.status,
                status_reason=pool.status_reason,
                status_message=pool.status_message,
                conditions=pool.conditions,
                nodes_ready=self.get_nodes_ready(pool),
                created_at=pool.created_at,
                updated_at=pool.updated_at,
            )
        )

    def get_nodes_ready(self, pool: NodePool) -> int:
        counted = getattr(pool, "ready_node_count", None)  # annotated on reads, absent after a write
        return pool.nodes.filter(status=Node.Status.READY).count() if counted is None else counted

    def validate(self, attrs):
        if self.instance is not None:
            for field in IMMUTABLE_POOL_FIELDS:
                if field in attrs and attrs[field] != getattr(self.instance, field):
                    raise serializers.ValidationError(
                        {field: "Fixed when the pool is created."}, code="immutable"
                    )
                attrs.pop(field, None)
        return attrs


# The document (nvke.api.documents): the declared fields as a Struct, answered through serializer.data.
NodePoolDocument = document_type(NodePoolSerializer)


def _string(value) -> str | None:
    """A value as a CharField writes it."""
    return None if value is None else str(value)


def _strings(values: list) -> list[str | None]:
    """A list as a ListField of CharFields writes it."""
    return [_string(value) for value in values]


class AutoscalerDecisionSerializer(serializers.ModelSerializer):
    class Meta:
        model = AutoscalerDecision
        fields = ["created_at", "action", "reason", "message", "from_nodes", "to_nodes", "node"]


class ScaleDownSerializer(serializers.Serializer):
    node = serializers.CharField()
    phase = serializers.ChoiceField(choices=ScaleDown.choices)
    since = serializers.DateTimeField()


class PoolAutoscalingSerializer(serializers.Serializer):
    """A pool's autoscaler: its bounds, the node it is taking out, and its newest decisions first."""

    autoscaling = serializers.BooleanField()
    node_count = serializers.IntegerField()
    min_nodes = serializers.IntegerField()
    max_nodes = serializers.IntegerField()
    scale_down_delay_s = serializers.IntegerField()
    removing = ScaleDownSerializer(allow_null=True, help_text="The node being taken out, if any")
    decisions = AutoscalerDecisionSerializer(many=True)


# The nodes' documents, declared: the schema, and the Structs `nodepools.api.documents` fills and msgspec
# encodes (a page of 20 nodes is 160 GPUs and ~900 shares: DRF's walk cost most of the request).
class GpuSnapshotShareSerializer(serializers.Serializer):
    """Who holds what on a GPU."""

    claim = serializers.IntegerField()
    namespace = serializers.CharField()
    name = serializers.CharField()
    memory_mib = serializers.IntegerField()
    compute_percent = serializers.FloatField(read_only=True, help_text="Its compute ceiling")
    guaranteed_percent = serializers.FloatField(read_only=True, help_text="Its guaranteed compute")
    exclusive = serializers.BooleanField()
    mig_profile = serializers.CharField(allow_blank=True)
    mig_start = serializers.IntegerField(allow_null=True)
    mig_size = serializers.IntegerField(allow_null=True)


class GpuSerializer(serializers.Serializer):
    """A GPU of a node and who holds what on it."""

    index = serializers.IntegerField()
    uuid = serializers.UUIDField()
    memory_mib = serializers.IntegerField()
    nvlink_domain = serializers.CharField(
        allow_blank=True, help_text="GPUs sharing a value are NVLink-connected; blank = PCIe only"
    )
    healthy = serializers.BooleanField()
    memory_allocated_mib = serializers.IntegerField(read_only=True)
    compute_allocated_percent = serializers.FloatField(
        read_only=True, help_text="Guaranteed compute held (at most 100)"
    )
    compute_ceilings_percent = serializers.FloatField(
        read_only=True,
        help_text="The claims' compute ceilings added up (at most compute_oversubscription_percent)",
    )
    shares = GpuSnapshotShareSerializer(many=True, read_only=True)


class NodeSerializer(serializers.ModelSerializer):
    gpus = GpuSerializer(many=True, read_only=True)
    cluster = serializers.IntegerField(source="pool.cluster_id", read_only=True)
    preflight_failures = serializers.SerializerMethodField(
        help_text="Preflight checks failed for its pool's sharing mode; it takes no claims while any fail"
    )

    def get_preflight_failures(self, node: Node) -> list[str]:
        return preflight.failures(node, node.pool)

    class Meta:
        model = Node
        fields = [
            "id",
            "name",
            "cluster",
            "pool",
            "status",
            "cordoned",
            "driver_version",
            "cpu_millicores",
            "memory_mib",
            "labels",
            "preflight",
            "preflight_failures",
            "gpus",
            "created_at",
        ]
