"""Upgrades API: runs of a pool to a driver release or a Kubernetes version with their controls, a
pool's driver options, a cluster's Kubernetes versions and control plane upgrades, and fleet rollouts
(operators only)."""

from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import mixins, viewsets
from rest_framework.decorators import action
from rest_framework.generics import get_object_or_404
from rest_framework.response import Response
from rest_framework.views import APIView

from catalog.compatibility import CUDA_PARAMETER
from catalog.models import DriverRelease, GpuModel
from clusters.models import Cluster
from nodepools.models import NodePool
from nvke.api.permissions import IsOperator
from nvke.api.viewsets import TenantScopedViewSet
from nvke.errors import DomainError
from nvke.tenancy.context import resolve_tenant
from nvke.tenancy.roles import Action

from .. import control_plane, maintenance, rollouts, services
from ..compatibility import driver_options
from ..controller import kick_if_stale
from ..models import FleetRollout, UpgradeDeferral, UpgradeRun
from .serializers import (
    STRATEGY,
    ClusterVersionsSerializer,
    DriverCompatibilitySerializer,
    FleetRolloutSerializer,
    MaintenanceSerializer,
    UpgradeConditionSerializer,
    UpgradeDeferralSerializer,
    UpgradeRunSerializer,
    VersionSettingsSerializer,
)


def release_named(version: str) -> DriverRelease:
    release = DriverRelease.objects.prefetch_related("architectures").filter(version=version).first()
    if release is None:
        raise DomainError(
            f"Driver release {version!r} is not in the catalog.",
            field="target_release",
            code="unknown_release",
        )
    return release


class UpgradeRunViewSet(
    mixins.CreateModelMixin, mixins.ListModelMixin, mixins.RetrieveModelMixin, TenantScopedViewSet
):
    """Rolling upgrade runs of a pool: to a driver release (`target_release`) or to a Kubernetes minor
    (`kubernetes_version`: each node's machine replaced, drained first). POST creates and starts one;
    each control is a POST to `/upgrades/{id}/<control>/`; an impossible control is 409 with code
    `cannot_<control>`."""

    queryset = UpgradeRun.objects.select_related(
        "pool", "target_release", "previous_release"
    ).prefetch_related("nodes")
    serializer_class = UpgradeRunSerializer
    filterset_fields = ["pool", "status"]
    ordering_fields = ["created_at"]

    def perform_create(self, serializer):
        data = dict(serializer.validated_data)
        pool = NodePool.objects.select_related("gpu_model", "driver_release").get(pk=data.pop("pool").pk)
        release, kubernetes = data.pop("target_release", None), data.pop("kubernetes_version")
        image = data.pop("node_image")
        named = [
            name
            for name, given in (
                ("target_release", release),
                ("kubernetes_version", kubernetes),
                ("node_image", image),
            )
            if given
        ]
        if len(named) != 1:
            raise DomainError(
                "Name one of target_release (a driver upgrade), kubernetes_version or node_image.",
                field=named[-1] if named else "target_release",
                code="one_target" if named else "required",
            )
        serializer.instance = services.create_run(
            context=self.tenant_context,
            pool=pool,
            target_release=release_named(release["version"]) if release else None,
            kubernetes_version=kubernetes,
            node_image=image,
            user=self.request.user,
            start=data.pop("start"),
            cuda=data.pop("cuda"),
            override_window=data.pop("override_window"),
            **{name: data[name] for name in STRATEGY if name in data},
        )

    def retrieve(self, request, *args, **kwargs):
        kick_if_stale(self.get_object())
        return super().retrieve(request, *args, **kwargs)

    def _control(self, name: str):
        run = services.control(self.get_object(), name, context=self.tenant_context, user=self.request.user)
        return Response(self.get_serializer(self.get_queryset().get(pk=run.pk)).data)

    @extend_schema(request=None, responses=UpgradeRunSerializer)
    @action(detail=True, methods=["post"])
    def start(self, request, pk=None):
        return self._control("start")

    @extend_schema(request=None, responses=UpgradeRunSerializer)
    @action(detail=True, methods=["post"])
    def pause(self, request, pk=None):
        return self._control("pause")

    @extend_schema(request=None, responses=UpgradeRunSerializer)
    @action(detail=True, methods=["post"])
    def resume(self, request, pk=None):
        return self._control("resume")

    @extend_schema(request=None, responses=UpgradeRunSerializer)
    @action(detail=True, methods=["post"])
    def abort(self, request, pk=None):
        return self._control("abort")

    @extend_schema(request=None, responses=UpgradeRunSerializer)
    @action(detail=True, methods=["post"])
    def retry(self, request, pk=None):
        return self._control("retry")

    @extend_schema(request=None, responses=UpgradeRunSerializer)
    @action(detail=True, methods=["post"])
    def approve(self, request, pk=None):
        return self._control("approve")

    @extend_schema(request=None, responses={201: UpgradeRunSerializer})
    @action(detail=True, methods=["post"])
    def rollback(self, request, pk=None):
        """Start a new run back to the release the pool ran before this one (the run must be finished)."""
        run = services.control(self.get_object(), "rollback", context=self.tenant_context, user=request.user)
        return Response(self.get_serializer(self.get_queryset().get(pk=run.pk)).data, status=201)

    @extend_schema(
        request=None,
        responses=UpgradeRunSerializer,
        parameters=[OpenApiParameter("node", str, OpenApiParameter.PATH, description="The node's name")],
    )
    @action(detail=True, methods=["post"], url_path=r"nodes/(?P<node>[^/]+)/uncordon")
    def uncordon(self, request, pk=None, node=None):
        """Return one node the run keeps cordoned to service, its driver as it is (not validated): 404
        `unknown_node` for a name not in the run; 409 `node_in_flight`, `not_kept_cordoned`,
        `cordoned_before_run`, `node_gone` or `taken_over` (`details.node`, `details.state`)."""
        run = services.return_to_service(self.get_object(), node, user=request.user)
        return Response(self.get_serializer(self.get_queryset().get(pk=run.pk)).data)

    @extend_schema(responses=UpgradeConditionSerializer(many=True))
    @action(detail=True)
    def history(self, request, pk=None):
        """The run's conditions, oldest first: run transitions and every node's state changes."""
        return Response(UpgradeConditionSerializer(self.get_object().history.all(), many=True).data)


class DriverOptionsView(APIView):
    """GET /node-pools/{id}/driver-options/: every release with whether the pool may move to it and,
    when not, every rule it breaks. `?cuda=12.8` adds the CUDA minimum rule."""

    @extend_schema(
        parameters=[
            OpenApiParameter("cuda", CUDA_PARAMETER, description="A CUDA version the workloads need")
        ],
        responses=DriverCompatibilitySerializer(many=True),
    )
    def get(self, request, pk: int):
        pools = NodePool.objects.restrict(resolve_tenant(request)).select_related(
            "gpu_model", "driver_release"
        )
        pool = get_object_or_404(pools, pk=pk)
        rows = [
            {"driver": driver, "compatible": not refusals, "refusals": refusals}
            for driver, refusals in driver_options(pool, request.query_params.get("cuda", ""))
        ]
        return Response(DriverCompatibilitySerializer(rows, many=True).data)


class IsStaff(IsOperator):
    message = "Fleet rollouts are for platform operators."


class FleetRolloutViewSet(
    mixins.CreateModelMixin, mixins.ListModelMixin, mixins.RetrieveModelMixin, viewsets.GenericViewSet
):
    """Operators: one driver release over every matching pool of every tenant, a wave at a time."""

    queryset = FleetRollout.objects.select_related("target_release", "gpu_model")
    serializer_class = FleetRolloutSerializer
    permission_classes = [IsStaff]

    def perform_create(self, serializer):
        data = dict(serializer.validated_data)
        target = release_named(data.pop("target_release")["version"])
        model_name = (data.pop("gpu_model", None) or {}).get("name")
        gpu_model = GpuModel.objects.filter(name=model_name).first() if model_name else None
        if model_name and gpu_model is None:
            raise DomainError(f"No GPU model {model_name!r}.", field="gpu_model", code="unknown_gpu_model")
        strategy = data.pop("strategy", {})
        unknown = set(strategy) - set(STRATEGY) - {"canary_nodes"}
        if unknown:
            raise DomainError(f"Unknown strategy field {sorted(unknown)[0]}.", field="strategy")
        serializer.instance = rollouts.create_rollout(
            target_release=target, gpu_model=gpu_model, user=self.request.user, **data, **strategy
        )

    def _control(self, name: str):
        rollout = rollouts.control_rollout(self.get_object(), name)
        return Response(self.get_serializer(rollout).data)

    @extend_schema(request=None)
    @action(detail=True, methods=["post"])
    def pause(self, request, pk=None):
        return self._control("pause")

    @extend_schema(request=None)
    @action(detail=True, methods=["post"])
    def resume(self, request, pk=None):
        return self._control("resume")

    @extend_schema(request=None)
    @action(detail=True, methods=["post"])
    def abort(self, request, pk=None):
        return self._control("abort")

    @extend_schema(
        request=None,
        responses=UpgradeRunSerializer,
        parameters=[
            OpenApiParameter("run_pk", int, OpenApiParameter.PATH, description="A run of this rollout"),
            OpenApiParameter("control", str, OpenApiParameter.PATH, enum=list(rollouts.RUN_CONTROLS)),
        ],
    )
    @action(
        detail=True,
        methods=["post"],
        url_path=r"runs/(?P<run_pk>[^/.]+)/(?P<control>" + "|".join(rollouts.RUN_CONTROLS) + ")",
    )
    def run_control(self, request, pk=None, run_pk=None, control=None):
        """One run of the rollout, whichever tenant's: `retry` (its failed nodes) or `approve` (its
        canary), as the tenant's own controls do; 409 `cannot_<control>` when its state does not allow it."""
        run = get_object_or_404(UpgradeRun.objects.all(), pk=run_pk, rollout=self.get_object())
        run = services.control(run, control, user=request.user)
        return Response(UpgradeRunSerializer(run, context=self.get_serializer_context()).data)


class ClusterMaintenanceViewSet(TenantScopedViewSet):
    """A cluster's maintenance windows and exclusions."""

    queryset = Cluster.objects.all()
    write_action = Action.CHANGE

    @extend_schema(request=MaintenanceSerializer, responses=MaintenanceSerializer)
    @action(detail=True, methods=["get", "put"], url_path="maintenance")
    def maintenance(self, request, pk=None):
        """When driver upgrades of this cluster may run: windows (an RFC 5545 recurrence rule, a start on
        the cluster's wall clock and a duration) and exclusions (days when a scope of upgrades does not
        run), with the next windows and whether one may run now. No window set: any time the exclusions
        allow. PUT sets them whole; a run started by hand outside them needs `override_window`; a running
        one pauses at the window's end once its nodes in flight are done, and goes on in the next."""
        cluster = self.get_object()
        if request.method == "PUT":
            serializer = MaintenanceSerializer(data=request.data)
            serializer.is_valid(raise_exception=True)
            data = serializer.validated_data
            maintenance.replace(cluster, data["time_zone"], data["windows"], data["exclusions"])
        return Response(MaintenanceSerializer(maintenance.document(cluster)).data)


class ClusterVersionsViewSet(TenantScopedViewSet):
    """A cluster's Kubernetes versions and node images, and its control plane's upgrades."""

    queryset = Cluster.objects.select_related("kubernetes_version", "kubernetes_target")
    write_action = Action.CHANGE

    @extend_schema(
        methods=["GET", "POST"], request=ClusterVersionsSerializer, responses=ClusterVersionsSerializer
    )
    @extend_schema(methods=["PUT"], request=VersionSettingsSerializer, responses=ClusterVersionsSerializer)
    @action(detail=True, methods=["get", "post", "put"], url_path="versions")
    def versions(self, request, pk=None):
        """The control plane's version (its end of support, a notice near it, an upgrade in flight) and
        each pool's, with every catalog version and the skew rule that refuses it; each pool's node
        image with every catalog image and the rules that refuse it. POST
        `{kubernetes_version}` starts the control plane's upgrade, one minor at a time: 400 with the
        rule's code (`skips_minor`, `downgrade`, `same_version`, `pool_too_far_behind`, `not_managed`,
        `unknown_version`), 409 `upgrade_in_progress`, `pool_upgrade_in_progress`, `not_running` or
        `outside_maintenance_window` (ask again with `override_window: true`). Pools follow with a run
        of `kubernetes_version`, and change images with a run of `node_image` (POST /upgrades/). PUT
        `{auto_upgrade}` lets NVKE upgrade the control plane, then the pools, by themselves once their
        version nears its end of support, inside the maintenance windows."""
        cluster = self.get_object()
        if request.method == "PUT":
            settings = VersionSettingsSerializer(data=request.data)
            settings.is_valid(raise_exception=True)
            cluster.auto_upgrade = settings.validated_data["auto_upgrade"]
            cluster.save(update_fields=["auto_upgrade", "updated_at"])
        if request.method == "POST":
            serializer = ClusterVersionsSerializer(data=request.data)
            serializer.is_valid(raise_exception=True)
            data = serializer.validated_data
            control_plane.start(cluster, data["kubernetes_version"], override_window=data["override_window"])
            cluster = self.get_queryset().get(pk=cluster.pk)
        return Response(ClusterVersionsSerializer(control_plane.document(cluster)).data)


class PoolUpgradeDeferralViewSet(TenantScopedViewSet):
    """A pool's training-aware deferral of driver upgrades."""

    queryset = NodePool.objects.all()
    write_action = Action.CHANGE

    @extend_schema(
        methods=["GET", "PUT"], request=UpgradeDeferralSerializer, responses=UpgradeDeferralSerializer
    )
    @extend_schema(methods=["DELETE"], request=None, responses={204: None})
    @action(detail=True, methods=["get", "put", "delete"], url_path="upgrade-deferral")
    def upgrade_deferral(self, request, pk=None):
        """While a driver upgrade waits to drain a node of this pool (wait-for-jobs), it waits for the
        claims on it marked `training` (and, with `claims_older_than_s`, those running longer), at most
        `deadline_s`; then it drains the node anyway (`after_deadline: proceed`) or fails it, its
        driver untouched (`stop`). The run's node says what it waits for. PUT sets it, DELETE removes it
        (204); GET says `enabled: false` with the defaults when none is set."""
        pool = self.get_object()
        policy = UpgradeDeferral.objects.filter(pool=pool).first() or UpgradeDeferral(pool=pool)
        if request.method == "DELETE":
            if policy.pk is not None:
                policy.delete()
            return Response(status=204)
        if request.method == "PUT":
            serializer = UpgradeDeferralSerializer(policy, data=request.data)
            serializer.is_valid(raise_exception=True)
            policy = serializer.save(tenant_id=pool.tenant_id, pool=pool)
        return Response(UpgradeDeferralSerializer(policy).data)
