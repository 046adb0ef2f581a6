"""Claims API: create (placed at once or pending with a reason), list with GPU-MEMORY and GPU-UTIL
columns, read, release (DELETE). The defragmentation serializers serve the clusters' routes."""

from django.db.models import Prefetch
from drf_spectacular.utils import extend_schema, extend_schema_field
from rest_framework import mixins, serializers

from clusters.models import Cluster
from nodepools import allocator
from nodepools.filtersets import ClaimFilter
from nodepools.models import Claim, GpuShare, NodePool
from nodepools.sharing import isolation_detail
from nodepools.sizing import sizing_hints
from nvke.api.viewsets import TenantScopedViewSet
from nvke.quantity import format_mib, human_mib, parse_mib
from nvke.tenancy.context import resolve_tenant


@extend_schema_field({"type": "string", "example": "4Gi", "nullable": True})
class MemoryQuantityField(serializers.Field):
    """GPU memory as a Kubernetes quantity ("4Gi", "512Mi"), stored in MiB."""

    def to_internal_value(self, data) -> int:
        try:
            mib = parse_mib(str(data))
        except ValueError as error:
            raise serializers.ValidationError(str(error)) from None
        if mib < 1:
            raise serializers.ValidationError("Ask for at least 1Mi.")
        return mib

    def to_representation(self, value: int) -> str:
        return format_mib(value)


class GpuShareSerializer(serializers.Serializer):
    gpu_index = serializers.IntegerField(source="gpu.index")
    gpu_uuid = serializers.UUIDField(source="gpu.uuid")
    memory_mib = serializers.IntegerField()
    compute_percent = serializers.SerializerMethodField(help_text="The compute ceiling on this GPU")
    guaranteed_percent = serializers.SerializerMethodField(help_text="The guaranteed compute on this GPU")
    exclusive = serializers.BooleanField()
    mig_profile = serializers.CharField()
    mig_start = serializers.IntegerField(allow_null=True)

    def get_compute_percent(self, share) -> float:
        return share.compute_milli / 10

    def get_guaranteed_percent(self, share) -> float:
        return share.guaranteed_milli / 10


class AllocationSerializer(serializers.Serializer):
    node = serializers.IntegerField(source="node_id")
    node_name = serializers.CharField(source="node.name")
    pool = serializers.CharField(source="node.pool.name")
    isolation = serializers.CharField()
    isolation_detail = serializers.SerializerMethodField(help_text="What holds its memory and compute")
    gpus = GpuShareSerializer(source="shares", many=True)

    def get_isolation_detail(self, allocation) -> str:
        return isolation_detail(allocation.isolation, allocation.node.pool.sharing_mode)


def gpu_util_display(allocation) -> str:
    """The GPU-UTIL column: the compute ceiling held, and the guaranteed part when it is less."""
    ceiling, guaranteed = allocation.compute_milli // 10, allocation.guaranteed_milli // 10
    return f"{ceiling}%" if guaranteed == ceiling else f"{guaranteed}%/{ceiling}%"


class WorkloadSerializer(serializers.Serializer):
    state = serializers.ChoiceField(
        choices=["allocated", "waiting", "conflict", "gone"],
        help_text="allocated: the cluster's ResourceClaim carries NVKE's allocation; waiting: not yet "
        "(message says why); conflict: the cluster holds an allocation NVKE did not write",
    )
    message = serializers.CharField(allow_blank=True)


class ClaimSerializer(serializers.ModelSerializer):
    cluster = serializers.PrimaryKeyRelatedField(queryset=Cluster.objects.none())
    pool = serializers.PrimaryKeyRelatedField(
        queryset=NodePool.objects.none(), required=False, allow_null=True
    )
    gpu_memory = MemoryQuantityField(source="gpu_memory_mib", required=False, allow_null=True)
    allowed_models = serializers.ListField(
        child=serializers.CharField(max_length=48),
        required=False,
        max_length=20,
        help_text="GPU model names (see gpu-models/); empty = any",
    )
    allocation = serializers.SerializerMethodField()
    sizing = serializers.SerializerMethodField(
        help_text="A placed fraction's start-up hints: vllm_gpu_memory_utilization and vllm_explained, "
        "mps_environment (MPS pools), pod_resources (YAML to copy); null otherwise"
    )
    workload = serializers.SerializerMethodField(
        help_text="On a real cluster: where the claim's workload stands there; null on a simulated one"
    )
    gpu_memory_display = serializers.SerializerMethodField(help_text="GPU-MEMORY column: total held")
    gpu_util_display = serializers.SerializerMethodField(
        help_text="GPU-UTIL column: compute ceiling held, as guaranteed/ceiling when they differ"
    )

    class Meta:
        model = Claim
        fields = [
            "id",
            "cluster",
            "pool",
            "namespace",
            "name",
            "kind",
            "gpus",
            "nvlink_required",
            "mig_profile",
            "gpu_memory",
            "compute_percent",
            "guaranteed_percent",
            "cpu_milli",
            "host_memory_mib",
            "allowed_models",
            "priority",
            "training",
            "status",
            "pending_reason",
            "allocation",
            "gpu_memory_display",
            "gpu_util_display",
            "sizing",
            "source",
            "workload",
            "created_at",
            "allocated_at",
        ]
        read_only_fields = ["status", "pending_reason", "allocated_at", "source"]
        validators = []  # uniqueness is the service's, answered with 409 naming the field

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        request = self.context.get("request")
        if request is not None:
            context = resolve_tenant(request)
            self.fields["cluster"].queryset = Cluster.objects.restrict(context)
            self.fields["pool"].queryset = NodePool.objects.restrict(context)

    def _allocation(self, claim: Claim):
        return getattr(claim, "allocation", None) if claim.status == Claim.Status.ALLOCATED else None

    @extend_schema(responses=AllocationSerializer(allow_null=True))
    def get_allocation(self, claim: Claim) -> dict | None:
        allocation = self._allocation(claim)
        if allocation is None:
            return None
        if not hasattr(self, "_allocation_serializer"):  # built once per list, not per claim
            self._allocation_serializer = AllocationSerializer()
        return self._allocation_serializer.to_representation(allocation)

    @extend_schema_field(WorkloadSerializer(allow_null=True))
    def get_workload(self, claim: Claim) -> dict | None:
        return claim.workload or None

    @extend_schema_field({"type": "object", "nullable": True})
    def get_sizing(self, claim: Claim) -> dict | None:
        return sizing_hints(claim, self._allocation(claim))

    def get_gpu_memory_display(self, claim: Claim) -> str:
        allocation = self._allocation(claim)
        return human_mib(allocation.memory_mib) if allocation else "-"

    def get_gpu_util_display(self, claim: Claim) -> str:
        allocation = self._allocation(claim)
        return gpu_util_display(allocation) if allocation else "-"


class ClaimViewSet(
    mixins.CreateModelMixin,
    mixins.ListModelMixin,
    mixins.RetrieveModelMixin,
    mixins.DestroyModelMixin,
    TenantScopedViewSet,
):
    """GPU claims. Create places the claim at once when it fits (201 with `allocation`), else leaves it
    `pending` with a reason and places it when capacity frees. DELETE releases it."""

    # In the unique index's order (cluster id, not name): a page of 10,000 claims walks the index to
    # its 50 rows instead of joining and sorting them all. The shares come with their GPUs in one
    # query, ordered within the allocation (one node) by GPU index: GpuShare's own ordering sorts
    # through node, pool and cluster names.
    queryset = (
        Claim.objects.select_related("allocation__node__pool__gpu_model")
        .prefetch_related(
            Prefetch(
                "allocation__shares",
                queryset=GpuShare.objects.select_related("gpu").order_by("gpu__index", "mig_start"),
            )
        )
        .order_by("cluster_id", "namespace", "name")
    )
    serializer_class = ClaimSerializer
    filterset_class = ClaimFilter
    ordering_fields = ["name", "created_at", "priority"]

    def perform_create(self, serializer):
        serializer.instance = allocator.create_claim(context=self.tenant_context, **serializer.validated_data)

    def perform_destroy(self, instance):
        allocator.release_claim(instance)
