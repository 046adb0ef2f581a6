"""Defragmentation of a cluster's claims: `clusters/{id}/defrag-plan/` proposes moves, `clusters/{id}/defrag/`
carries out a fresh plan. Routed beside the cluster's own viewset; the allocator lives a layer above
clusters, so its actions are declared here."""

from drf_spectacular.utils import extend_schema
from rest_framework import serializers
from rest_framework.decorators import action
from rest_framework.response import Response

from claims import allocator
from clusters.models import Cluster
from nvke.api.viewsets import TenantScopedViewSet
from nvke.tenancy.roles import Action


class DefragRequestSerializer(serializers.Serializer):
    max_moves = serializers.IntegerField(min_value=1, max_value=100, default=10)


class MoveSerializer(serializers.Serializer):
    claim = serializers.IntegerField()
    from_node = serializers.IntegerField()
    from_gpus = serializers.ListField(child=serializers.IntegerField())
    to_node = serializers.IntegerField()
    to_gpus = serializers.ListField(child=serializers.IntegerField())
    mig_start = serializers.IntegerField(allow_null=True)


class DefragPlanSerializer(serializers.Serializer):
    moves = MoveSerializer(many=True)
    gpus_freed = serializers.IntegerField()


class ClusterDefragViewSet(TenantScopedViewSet):
    """Moving other people's claims is for tenant admins; a plan, which changes nothing, for viewers."""

    queryset = Cluster.objects.all()
    write_action = Action.MANAGE

    @extend_schema(parameters=[DefragRequestSerializer], responses=DefragPlanSerializer)
    @action(detail=True, methods=["get"], url_path="defrag-plan")
    def defrag_plan(self, request, pk=None):
        """Claim moves that would free the most whole GPUs (bounded by max_moves); nothing changes."""
        return self._defrag(allocator.plan_defrag, request.query_params)

    @extend_schema(request=DefragRequestSerializer, responses=DefragPlanSerializer)
    @action(detail=True, methods=["post"])
    def defrag(self, request, pk=None):
        """Carry out a fresh plan; each move is a re-allocation of the claim."""
        return self._defrag(allocator.apply_defrag, request.data)

    def _defrag(self, operation, data) -> Response:
        params = DefragRequestSerializer(data=data)
        params.is_valid(raise_exception=True)
        moves, freed = operation(self.get_object().pk, params.validated_data["max_moves"])
        return Response(DefragPlanSerializer({"moves": moves, "gpus_freed": freed}).data)
