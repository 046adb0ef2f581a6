"""`GET fleet/`: the operator's console as data (upgrades/fleet_overview.py), for operators signed in
or holding an operator token. Counts of failing nodes and GPUs, the first FAILING_SHOWN of each named."""

from drf_spectacular.utils import extend_schema
from rest_framework import serializers
from rest_framework.decorators import api_view, permission_classes
from rest_framework.request import Request
from rest_framework.response import Response

from nvke.api.permissions import IsOperator

from .. import fleet_overview


class FleetTenantSerializer(serializers.Serializer):
    id = serializers.IntegerField(source="tenant.pk")
    name = serializers.CharField(source="tenant.name")
    clusters = serializers.IntegerField()
    gpus = serializers.IntegerField()
    compute_held = serializers.SerializerMethodField(
        help_text="GPUs' worth of compute guaranteed to its placed claims"
    )
    pending_claims = serializers.IntegerField()
    quotas = serializers.ListField(child=serializers.CharField(), help_text="Empty: the defaults")

    def get_compute_held(self, row: fleet_overview.TenantRow) -> float:
        return row.compute_held_milli / 1000


class FleetCapacitySerializer(serializers.Serializer):
    region = serializers.CharField(help_text='"attached": attached clusters\' own machines')
    gpu_model = serializers.CharField()
    inventory = serializers.IntegerField(allow_null=True, help_text="null: not counted (attached)")
    in_pools = serializers.IntegerField()
    healthy = serializers.IntegerField()
    compute_held = serializers.SerializerMethodField()

    def get_compute_held(self, row: fleet_overview.RegionModel) -> float:
        return row.compute_held_milli / 1000


class FleetRunSerializer(serializers.Serializer):
    id = serializers.IntegerField(source="pk")
    tenant = serializers.CharField(source="pool.cluster.tenant.name")
    cluster = serializers.CharField(source="pool.cluster.name")
    pool = serializers.CharField(source="pool.name")
    rollout = serializers.IntegerField(source="rollout_id", allow_null=True)
    target_release = serializers.CharField(source="target_release.version", allow_null=True)
    status = serializers.CharField()


class FleetRolloutBriefSerializer(serializers.Serializer):
    id = serializers.IntegerField(source="pk")
    target_release = serializers.CharField(source="target_release.version")
    status = serializers.CharField()


class FleetFailingNodeSerializer(serializers.Serializer):
    id = serializers.IntegerField(source="pk")
    name = serializers.CharField()
    tenant = serializers.CharField(source="pool.cluster.tenant.name")
    cluster = serializers.CharField(source="pool.cluster.name")
    pool = serializers.CharField(source="pool.name")


class FleetFailingGpuSerializer(serializers.Serializer):
    id = serializers.IntegerField(source="pk")
    index = serializers.IntegerField()
    node = serializers.CharField(source="node.name")
    tenant = serializers.CharField(source="node.pool.cluster.tenant.name")


class FleetSerializer(serializers.Serializer):
    tenants = FleetTenantSerializer(many=True)
    capacity = FleetCapacitySerializer(many=True)
    runs_in_flight = FleetRunSerializer(many=True)
    rollouts_in_flight = FleetRolloutBriefSerializer(many=True)
    failing_nodes_count = serializers.IntegerField()
    failing_nodes = FleetFailingNodeSerializer(many=True)
    failing_gpus_count = serializers.IntegerField()
    failing_gpus = FleetFailingGpuSerializer(many=True)


@extend_schema(responses=FleetSerializer)
@api_view(["GET"])
@permission_classes([IsOperator])
def fleet(request: Request) -> Response:
    """The whole fleet across tenants, as the operator's console shows it (operators only)."""
    nodes, gpus = fleet_overview.failing_nodes(), fleet_overview.failing_gpus()
    shown = fleet_overview.FAILING_SHOWN
    overview = {
        "tenants": fleet_overview.tenants(),
        "capacity": fleet_overview.capacity_by_region(),
        "runs_in_flight": fleet_overview.runs_in_flight(),
        "rollouts_in_flight": fleet_overview.rollouts_in_flight(),
        "failing_nodes_count": nodes.count(),
        "failing_nodes": nodes[:shown],
        "failing_gpus_count": gpus.count(),
        "failing_gpus": gpus[:shown],
    }
    return Response(FleetSerializer(overview).data)
