"""Claims API: create (placed at once or pending with a reason; queued for `Prefer: respond-async`), list
with GPU-MEMORY and GPU-UTIL columns, read, release (DELETE). The defragmentation serializers serve the
clusters' routes."""

from drf_spectacular.utils import OpenApiParameter, extend_schema, extend_schema_field
from rest_framework import mixins, serializers, status
from rest_framework.renderers import BrowsableAPIRenderer
from rest_framework.response import Response

from claims import allocator, selectors
from claims.filtersets import ClaimFilter
from claims.models import Claim, Queue
from claims.sizing import fraction_hints
from clusters.models import Cluster
from nodepools.models import NodePool
from nodepools.sharing import held_isolation
from nvke.api.documents import document_type, encode
from nvke.api.rendering import JSONRenderer, WrittenJSON
from nvke.api.viewsets import TenantScopedViewSet
from nvke.errors import Conflict
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


def gpu_util_display(shares: list[dict]) -> str:
    """The GPU-UTIL column: the compute ceiling held, and the guaranteed part when it is less."""
    ceiling = sum(s["compute_milli"] for s in shares) // 10
    guaranteed = sum(s["guaranteed_milli"] for s in shares) // 10
    return f"{ceiling}%" if guaranteed == ceiling else f"{guaranteed}%/{ceiling}%"


class WorkloadSerializer(serializers.Serializer):
    state = serializers.ChoiceField(
        choices=["allocated", "waiting", "conflict", "gone"],
        help_text="allocated: the cluster's ResourceClaim carries NVKE's allocation; waiting: not yet "
        "(message says why); conflict: the cluster holds an allocation NVKE did not write",
    )
    message = serializers.CharField(allow_blank=True)


# What a claim asks for: also what each member of a claim group asks for (claims/api/groups.py).
ASK_FIELDS = [
    "pool",
    "queue",
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
    "min_isolation",
    "training",
    "preemptible",
]


class ClaimSerializer(serializers.ModelSerializer):
    cluster = serializers.PrimaryKeyRelatedField(queryset=Cluster.objects.none())
    pool = serializers.PrimaryKeyRelatedField(
        queryset=NodePool.objects.none(), required=False, allow_null=True
    )
    queue = serializers.PrimaryKeyRelatedField(
        queryset=Queue.objects.none(),
        required=False,
        allow_null=True,
        help_text="The queue whose quota admits it (queues/); empty: its namespace's queue, if any",
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
    preempted_by = serializers.SerializerMethodField(
        help_text="namespace/name of the claim of higher priority that last took its GPUs (it went back "
        "to pending); null if none (or that claim is gone: the audit log keeps it)"
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
            "namespace",
            "name",
            *ASK_FIELDS,
            "priority",
            "status",
            "pending_reason",
            "allocation",
            "gpu_memory_display",
            "gpu_util_display",
            "sizing",
            "source",
            "workload",
            "preempted_by",
            "preempted_at",
            "created_at",
            "allocated_at",
        ]
        read_only_fields = ["status", "pending_reason", "allocated_at", "source", "preempted_at"]
        validators = []  # uniqueness is the service's, answered with 409 naming the field

    def get_fields(self) -> dict:
        fields = super().get_fields()  # input, the schema and the document's fields (ClaimDocument)
        request = self.context.get("request")
        if request is not None:
            context = resolve_tenant(request)
            fields["cluster"].queryset = Cluster.objects.restrict(context)
            fields["pool"].queryset = NodePool.objects.restrict(context)
            fields["queue"].queryset = Queue.objects.restrict(context)
        return fields

    def get_allocation(self, claim: dict) -> dict | None:
        shares = _placed_shares(claim)
        if shares is None:
            return None
        isolation, detail = held_isolation(
            claim["isolation"],
            kind=claim["kind"],
            source=claim["source"],
            sharing_mode=claim["sharing_mode"],
            facts=claim["node_preflight"] or {},
        )
        return {
            "node": claim["node_id"],
            "node_name": claim["node_name"],
            "pool": claim["pool_name"],
            "isolation": isolation,  # as the node enforces it, not only as allocated
            "isolation_detail": detail,
            "gpus": [
                {
                    "gpu_index": share["gpu_index"],
                    "gpu_uuid": str(share["gpu_uuid"]),
                    "memory_mib": share["memory_mib"],
                    "compute_percent": share["compute_milli"] / 10,
                    "guaranteed_percent": share["guaranteed_milli"] / 10,
                    "exclusive": share["exclusive"],
                    "mig_profile": share["mig_profile"],
                    "mig_start": share["mig_start"],
                }
                for share in shares
            ],
        }

    @extend_schema_field({"type": "string", "nullable": True, "example": "default/infer"})
    def get_preempted_by(self, claim: dict) -> str | None:
        name = claim["preempted_by_name"]
        return None if name is None else f"{claim['preempted_by_namespace']}/{name}"

    @extend_schema_field(WorkloadSerializer(allow_null=True))
    def get_workload(self, claim: dict) -> dict | None:
        return claim["workload"] or None

    @extend_schema_field({"type": "object", "nullable": True})
    def get_sizing(self, claim: dict) -> dict | None:
        shares = _placed_shares(claim)
        if claim["kind"] != Claim.Kind.FRACTION or shares is None:
            return None
        return fraction_hints(
            sum(s["memory_mib"] for s in shares),
            sum(s["compute_milli"] for s in shares),
            claim["card_mib"],
            claim["sharing_mode"],
        )

    def get_gpu_memory_display(self, claim: dict) -> str:
        shares = _placed_shares(claim)
        return "-" if shares is None else human_mib(sum(s["memory_mib"] for s in shares))

    def get_gpu_util_display(self, claim: dict) -> str:
        shares = _placed_shares(claim)
        if shares is None:
            return "-"
        return gpu_util_display(shares)


# A read's document: the fields ClaimSerializer declares, filled from a `selectors.claim_rows` row with
# its shares attached (`attach_claim_shares`) and encoded by msgspec. DRF's field-by-field walk over a
# page of claims, their allocations and shares cost most of the request.
ClaimDocument = document_type(ClaimSerializer)
_METHOD_FIELDS = ClaimSerializer()  # the values of the declared method fields


def claim_document(claim: dict) -> ClaimDocument:
    return ClaimDocument(
        id=claim["id"],
        cluster=claim["cluster_id"],
        pool=claim["pool_id"],
        queue=claim["queue_id"],
        namespace=claim["namespace"],
        name=claim["name"],
        kind=claim["kind"],
        gpus=claim["gpus"],
        nvlink_required=claim["nvlink_required"],
        mig_profile=claim["mig_profile"],
        gpu_memory=None if claim["gpu_memory_mib"] is None else format_mib(claim["gpu_memory_mib"]),
        compute_percent=claim["compute_percent"],
        guaranteed_percent=claim["guaranteed_percent"],
        cpu_milli=claim["cpu_milli"],
        host_memory_mib=claim["host_memory_mib"],
        allowed_models=[str(model) for model in claim["allowed_models"]],
        min_isolation=claim["min_isolation"],
        priority=claim["priority"],
        training=claim["training"],
        preemptible=claim["preemptible"],
        status=claim["status"],
        pending_reason=claim["pending_reason"],
        allocation=_METHOD_FIELDS.get_allocation(claim),
        gpu_memory_display=_METHOD_FIELDS.get_gpu_memory_display(claim),
        gpu_util_display=_METHOD_FIELDS.get_gpu_util_display(claim),
        sizing=_METHOD_FIELDS.get_sizing(claim),
        source=claim["source"],
        workload=_METHOD_FIELDS.get_workload(claim),
        preempted_by=_METHOD_FIELDS.get_preempted_by(claim),
        preempted_at=claim["preempted_at"],
        created_at=claim["created_at"],  # UTC from the database: msgspec writes it as DateTimeField does
        allocated_at=claim["allocated_at"],
    )


def encode_claims(rows: list[dict]) -> WrittenJSON:
    """The claims' documents, their shares read in one query."""
    selectors.attach_claim_shares(rows)
    return WrittenJSON(encode([claim_document(row) for row in rows]))


def encode_claim(row: dict) -> WrittenJSON:
    selectors.attach_claim_shares([row])
    return WrittenJSON(encode(claim_document(row)))


def _placed_shares(claim: dict) -> list[dict] | None:
    """An allocated claim's GPU shares (None while it is not placed)."""
    placed = claim["status"] == Claim.Status.ALLOCATED and claim["allocation_id"] is not None
    return claim["shares"] if placed else None


RESPOND_ASYNC = "respond-async"


class ClaimViewSet(
    mixins.CreateModelMixin,
    mixins.ListModelMixin,
    mixins.RetrieveModelMixin,
    mixins.DestroyModelMixin,
    TenantScopedViewSet,
):
    """GPU claims. Create places the claim at once when it fits (201 with `allocation`), else leaves it
    `pending` with a reason and places it when capacity frees; with `Prefer: respond-async` it queues
    the claim instead (202). DELETE releases it."""

    # In the unique index's order (cluster id, not name): a page of 10,000 claims walks the index to
    # its 50 rows instead of joining and sorting them all.
    queryset = Claim.objects.order_by("cluster_id", "namespace", "name")
    serializer_class = ClaimSerializer
    filterset_class = ClaimFilter
    ordering_fields = ["name", "created_at", "priority"]

    # Its documents are encoded by msgspec (ClaimDocument), the renderer puts them in the body.
    renderer_classes = [JSONRenderer, BrowsableAPIRenderer]

    def get_queryset(self):
        claims = super().get_queryset()
        # Reads are plain rows (claim_document); a release acts on the claim itself.
        return claims if self.action == "destroy" else selectors.claim_rows(claims)

    def list(self, request, *args, **kwargs):
        page = self.paginate_queryset(self.filter_queryset(self.get_queryset()))
        return self.get_paginated_response(encode_claims(page))

    def retrieve(self, request, *args, **kwargs):
        return Response(encode_claim(self.get_object()))

    @extend_schema(
        parameters=[
            OpenApiParameter(
                "Prefer",
                str,
                OpenApiParameter.HEADER,
                description="`respond-async`: do not wait for the placement. The claim is queued and the "
                "allocator queue places it with the others in one pass (202, the claim as it stands); "
                "watch its `status`. For clients that submit many claims at once.",
            )
        ],
        responses={201: ClaimSerializer, 202: ClaimSerializer},
    )
    def create(self, request, *args, **kwargs):
        serializer = self.get_serializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        claim = allocator.create_claim(
            context=self.tenant_context, place=not self._respond_async(), **serializer.validated_data
        )
        response = Response(
            encode_claim(selectors.claim_rows(Claim.objects.filter(pk=claim.pk)).get()),
            status=status.HTTP_201_CREATED,
        )
        if self._respond_async():
            response.status_code = status.HTTP_202_ACCEPTED
            response["Preference-Applied"] = RESPOND_ASYNC
        return response

    def _respond_async(self) -> bool:
        """The client's `Prefer` header (RFC 7240) asks not to wait: placed in the allocator queue's
        batches, claims from many clients go ~2x as fast as answered one by one (bench/README.md)."""
        preferences = self.request.headers.get("Prefer", "").split(",")
        return any(p.split(";")[0].split("=")[0].strip().lower() == RESPOND_ASYNC for p in preferences)

    def perform_destroy(self, instance):
        if instance.group_id is not None:  # a gang is released as a unit
            group = instance.group
            raise Conflict(
                f"Claim {instance} is a member of group {group}; delete the group (claim-groups/{group.pk}/)",
                field="group",
            )
        allocator.release_claim(instance)
