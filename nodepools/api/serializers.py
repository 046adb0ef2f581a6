from json.encoder import encode_basestring as _json_string  # json.dumps' own (ensure_ascii=False)

from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers
from rest_framework.utils import encoders

from catalog.models import DriverRelease, GpuModel, Region, SharingMode
from clusters.models import Cluster
from nodepools import preflight, selectors
from nodepools.capacity import offers
from nodepools.models import AutoscalerDecision, Node, NodePool, ScaleDown
from nvke.api.fields import DATETIME
from nvke.api.rendering import escape_line_separators
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
        """Written out by hand in the fields' order: a read then builds none of the fields (DRF built
        them for every request, most of a cheap read's serializer time). The declared fields stay the
        schema and the input; tests/nvke/api/test_read_documents.py holds the two equal."""
        return {
            "id": pool.pk,
            "cluster": pool.cluster_id,
            "name": pool.name,
            "gpu_model": pool.gpu_model.name,
            "gpus_per_node": pool.gpus_per_node,
            "node_count": pool.node_count,
            "min_nodes": pool.min_nodes,
            "max_nodes": pool.max_nodes,
            "driver_release": pool.driver_release.version,
            "sharing_mode": pool.sharing_mode,
            "mig_layout": _strings(pool.mig_layout),
            "placement_policy": pool.placement_policy,
            "compute_oversubscription_percent": pool.compute_oversubscription_percent,
            "default_guaranteed_percent": pool.default_guaranteed_percent,
            "node_selector": {str(key): _string(value) for key, value in pool.node_selector.items()},
            "autoscaling": pool.autoscaling,
            "scale_down_delay_s": pool.scale_down_delay_s,
            "upgrade_max_unavailable": pool.upgrade_max_unavailable,
            "upgrade_max_surge": pool.upgrade_max_surge,
            "status": pool.status,
            "status_reason": pool.status_reason,
            "status_message": pool.status_message,
            "conditions": pool.conditions,
            "nodes_ready": self.get_nodes_ready(pool),
            "created_at": DATETIME.to_representation(pool.created_at),
            "updated_at": DATETIME.to_representation(pool.updated_at),
        }

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


# A GPU and its shares as `selectors.attach_gpu_snapshots` reads them (plain rows). The fields declared
# are the schema; `to_representation` writes them out by hand, because a page of nodes holds thousands
# of shares and DRF's field-by-field walk cost most of the request. tests/nodepools/test_node_snapshot.py
# holds the two equal.
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

    def to_representation(self, share: dict) -> dict:
        return _share_document(share)


def _share_document(share: dict) -> dict:
    return {
        "claim": share["claim"],
        "namespace": share["namespace"],
        "name": share["name"],
        "memory_mib": share["memory_mib"],
        "compute_percent": share["compute_milli"] / 10,
        "guaranteed_percent": share["guaranteed_milli"] / 10,
        "exclusive": share["exclusive"],
        "mig_profile": share["mig_profile"],
        "mig_start": share["mig_start"],
        "mig_size": share["mig_size"],
    }


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

    def to_representation(self, gpu: dict) -> dict:
        shares = gpu["shares"]
        return {
            "index": gpu["index"],
            "uuid": str(gpu["uuid"]),
            "memory_mib": gpu["memory_mib"],
            "nvlink_domain": gpu["nvlink_domain"],
            "healthy": gpu["healthy"],
            "memory_allocated_mib": sum(s["memory_mib"] for s in shares),
            "compute_allocated_percent": sum(s["guaranteed_milli"] for s in shares) / 10,
            "compute_ceilings_percent": sum(s["compute_milli"] for s in shares) / 10,
            "shares": [_share_document(s) for s in shares],
        }


class NodeSerializer(serializers.ModelSerializer):
    gpus = GpuSerializer(source="gpu_list", many=True, read_only=True)  # selectors.attach_gpu_snapshots
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


GPU = GpuSerializer()


# The nodes' documents, written as JSON text by hand in the declared fields' order: a page of 20 nodes is
# 160 GPUs and ~900 shares, and building them as dicts, then DRF's `json.dumps` of them, was most of the
# request. The text is what DRF's JSONRenderer gives for NodeSerializer's walk (over the GPUs of
# `selectors.attach_gpu_snapshots`) byte for byte: tests/nvke/api/test_read_documents.py.
_LITERAL = {True: "true", False: "false", None: "null"}


# json.dumps(value, cls=..., **settings) builds its encoder on every call (three a node).
_JSON_ENCODER = encoders.JSONEncoder(ensure_ascii=False, allow_nan=False, separators=(",", ":"))


def _json(value) -> str:
    """JSON from the database (labels, preflight facts) as DRF's JSONRenderer writes it."""
    return _JSON_ENCODER.encode(value)


def write_nodes(nodes: list[Node]) -> list[str]:
    """Each node's document as JSON text (its pool's cluster and sharing mode read with it: the
    viewset's queryset); the GPUs of all of them in one query, their shares in another, and the claims
    of the shares this process has not seen yet in a third (`_claims_of`)."""
    gpus = selectors.node_gpus([node.pk for node in nodes])
    shares = selectors.gpu_shares([gpu[1] for gpu in gpus])
    claims = _claims_of({share[-1] for share in shares})
    held: dict[int, list] = {}  # GPU id: [its shares' texts, memory, guaranteed, ceilings]
    for (
        gpu,
        memory_mib,
        compute_milli,
        guaranteed_milli,
        exclusive,
        profile,
        start,
        size,
        allocation,
    ) in shares:
        claim = claims.get(allocation)
        if claim is None:  # released since the shares were read: as if they were read a moment later
            continue
        totals = held.setdefault(gpu, [[], 0, 0, 0])
        totals[0].append(
            f'{{{claim},"memory_mib":{memory_mib},"compute_percent":{compute_milli / 10!r},'
            f'"guaranteed_percent":{guaranteed_milli / 10!r},"exclusive":{_LITERAL[exclusive]},'
            f'"mig_profile":{_json_string(profile)},"mig_start":{"null" if start is None else start},'
            f'"mig_size":{"null" if size is None else size}}}'
        )
        totals[1] += memory_mib
        totals[2] += guaranteed_milli
        totals[3] += compute_milli
    gpus_of: dict[int, list[str]] = {node.pk: [] for node in nodes}
    for node_id, gpu, index, uuid, memory_mib, nvlink_domain, healthy in gpus:
        texts, memory, guaranteed, ceilings = held.get(gpu, _NOTHING_HELD)
        gpus_of[node_id].append(
            f'{{"index":{index},"uuid":"{uuid}","memory_mib":{memory_mib},'
            f'"nvlink_domain":{_json_string(nvlink_domain)},"healthy":{_LITERAL[healthy]},'
            f'"memory_allocated_mib":{memory},"compute_allocated_percent":{guaranteed / 10!r},'
            f'"compute_ceilings_percent":{ceilings / 10!r},"shares":[{",".join(texts)}]}}'
        )
    return [
        escape_line_separators(
            f'{{"id":{node.pk},"name":{_json_string(node.name)},"cluster":{node.pool.cluster_id},'
            f'"pool":{node.pool_id},"status":{_json_string(node.status)},"cordoned":{_LITERAL[node.cordoned]},'
            f'"driver_version":{_json_string(node.driver_version)},"cpu_millicores":{node.cpu_millicores},'
            f'"memory_mib":{node.memory_mib},"labels":{_json(node.labels)},'
            f'"preflight":{_json(node.preflight)},'
            f'"preflight_failures":{_json(preflight.failures(node, node.pool))},'
            f'"gpus":[{",".join(gpus_of[node.pk])}],'
            f'"created_at":{_json_string(DATETIME.to_representation(node.created_at))}}}'
        )
        for node in nodes
    ]


_NOTHING_HELD = ((), 0, 0, 0)

# What a share says of its claim ('"claim":7,"namespace":"ml","name":"train"'), by allocation. An
# allocation's claim never changes, nor does a claim's namespace or name, so each web process keeps
# what it has read and a page looks up only the allocations new to it: looking up every share's claim
# through its allocation was half the page's reading (bench/README.md). Emptied when it outgrows
# CLAIMS_KEPT (~10 MB).
_claims_seen: dict[int, str] = {}
CLAIMS_KEPT = 50_000


def _claims_of(allocations: set[int]) -> dict[int, str]:
    """What the shares of each allocation say of its claim; an allocation released since is left out."""
    found = {a: text for a in allocations if (text := _claims_seen.get(a)) is not None}
    missing = allocations - found.keys()
    if missing:
        if len(_claims_seen) + len(missing) > CLAIMS_KEPT:
            _claims_seen.clear()
        for allocation, claim, namespace, name in selectors.allocation_claims(missing):
            found[allocation] = _claims_seen[allocation] = (
                f'"claim":{claim},"namespace":{_json_string(namespace)},"name":{_json_string(name)}'
            )
    return found
