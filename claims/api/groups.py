"""Claim groups API (gangs): create a group of identical member claims placed all or nothing (201, the
group placed or pending with the reason), list, read with its members' states and placement, delete
(releases every member). Another tenant's groups are a 404."""

from django.db.models import Prefetch
from drf_spectacular.utils import extend_schema_field
from rest_framework import mixins, serializers, status
from rest_framework.response import Response

from claims import allocator
from claims.api.claims import ASK_FIELDS, ClaimSerializer
from claims.models import Claim, ClaimGroup, Queue
from clusters.models import Cluster
from nodepools.models import NodePool
from nvke.api.filters import IntegerFilter, StrictFilterSet
from nvke.api.viewsets import TenantScopedViewSet
from nvke.tenancy.context import resolve_tenant


class MemberTemplateSerializer(ClaimSerializer):
    """What each member claim asks for (the claim's fields; name, namespace and priority are the group's)."""

    class Meta(ClaimSerializer.Meta):
        fields = ASK_FIELDS
        read_only_fields: list[str] = []

    def get_fields(self) -> dict:
        fields = serializers.ModelSerializer.get_fields(self)
        request = self.context.get("request")
        if request is not None:
            fields["pool"].queryset = NodePool.objects.restrict(resolve_tenant(request))
            fields["queue"].queryset = Queue.objects.restrict(resolve_tenant(request))
        return fields


class MemberSerializer(serializers.Serializer):
    id = serializers.IntegerField()
    name = serializers.CharField()
    status = serializers.CharField()
    pending_reason = serializers.CharField()
    node = serializers.CharField(allow_null=True, help_text="The node it is placed on")
    gpus = serializers.ListField(child=serializers.IntegerField(), help_text="GPU indexes on that node")
    topology = serializers.DictField(
        child=serializers.CharField(), help_text="The node's NVLink domain (nvlink), rack and zone"
    )


class ClaimGroupSerializer(serializers.ModelSerializer):
    cluster = serializers.PrimaryKeyRelatedField(queryset=Cluster.objects.none())
    min_members = serializers.IntegerField(
        min_value=1, max_value=256, required=False, help_text="Members that must fit at once; default all"
    )
    template = MemberTemplateSerializer(write_only=True)
    status = serializers.SerializerMethodField(help_text="placed: at least min_members are allocated")
    placed = serializers.SerializerMethodField(help_text="How many members are allocated")
    pending_reason = serializers.SerializerMethodField()
    claims = serializers.SerializerMethodField(help_text="Its member claims: state and placement")

    class Meta:
        model = ClaimGroup
        fields = [
            "id",
            "cluster",
            "namespace",
            "name",
            "members",
            "min_members",
            "priority",
            "template",
            "status",
            "placed",
            "pending_reason",
            "claims",
            "created_at",
        ]
        validators = []  # uniqueness is the service's, answered with 409 naming the field

    def get_fields(self) -> dict:
        fields = super().get_fields()
        request = self.context.get("request")
        if request is not None:
            fields["cluster"].queryset = Cluster.objects.restrict(resolve_tenant(request))
        return fields

    def validate(self, data: dict) -> dict:
        data.setdefault("min_members", data["members"])
        if data["min_members"] > data["members"]:
            raise serializers.ValidationError({"min_members": f"At most members ({data['members']})."})
        return data

    def get_status(self, group: ClaimGroup) -> str:
        return "placed" if self.get_placed(group) >= group.min_members else "pending"

    def get_placed(self, group: ClaimGroup) -> int:
        return sum(1 for c in group.claims.all() if c.status == Claim.Status.ALLOCATED)

    def get_pending_reason(self, group: ClaimGroup) -> str:
        return next((c.pending_reason for c in group.claims.all() if c.status == Claim.Status.PENDING), "")

    @extend_schema_field(MemberSerializer(many=True))
    def get_claims(self, group: ClaimGroup) -> list[dict]:
        members = []
        for claim in group.claims.all():
            allocation = (
                getattr(claim, "allocation", None) if claim.status == Claim.Status.ALLOCATED else None
            )
            node = allocation.node if allocation else None
            members.append(
                {
                    "id": claim.pk,
                    "name": claim.name,
                    "status": claim.status,
                    "pending_reason": claim.pending_reason,
                    "node": node.name if node else None,
                    "gpus": sorted(s.gpu.index for s in allocation.shares.all()) if allocation else [],
                    "topology": allocator.topology_of(node.labels) if node else {},
                }
            )
        return members


class ClaimGroupFilter(StrictFilterSet):
    cluster = IntegerFilter()

    class Meta:
        model = ClaimGroup
        fields = ["cluster", "namespace"]


class ClaimGroupViewSet(
    mixins.CreateModelMixin,
    mixins.ListModelMixin,
    mixins.RetrieveModelMixin,
    mixins.DestroyModelMixin,
    TenantScopedViewSet,
):
    """Claim groups (gangs): `members` identical claims (`template`), named <name>-0.., placed all or
    nothing, at least `min_members` at once, packed onto as few nodes / NVLink domains / racks / zones
    as they fit. A group that cannot fit holds nothing and its members wait with a reason naming the
    group and what it lacks. DELETE releases every member."""

    queryset = ClaimGroup.objects.order_by("cluster_id", "namespace", "name")
    serializer_class = ClaimGroupSerializer
    filterset_class = ClaimGroupFilter

    def get_queryset(self):
        members = Claim.objects.order_by("name").select_related("allocation__node")
        return (
            super()
            .get_queryset()
            .prefetch_related(Prefetch("claims", queryset=members), "claims__allocation__shares__gpu")
        )

    def create(self, request, *args, **kwargs):
        serializer = self.get_serializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        data = dict(serializer.validated_data)
        template = data.pop("template")
        group = allocator.create_group(context=self.tenant_context, **data, **template)
        return Response(
            self.get_serializer(self.get_queryset().get(pk=group.pk)).data, status=status.HTTP_201_CREATED
        )

    def perform_destroy(self, instance):
        allocator.release_group(instance)
