import datetime

from django.utils import timezone
from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from catalog.api.serializers import DriverCompatibilitySerializer
from catalog.compatibility import CUDA_PARAMETER
from catalog.models import NodeImage
from nodepools.models import NodePool
from nvke.tenancy.context import resolve_tenant

from .. import maintenance, windows
from ..models import (
    FleetRollout,
    MaintenanceWindow,
    UpgradeCondition,
    UpgradeDeferral,
    UpgradeNode,
    UpgradeRun,
)
from ..strategy import STRATEGY_FIELDS, StrategyField

__all__ = ["DriverCompatibilitySerializer"]

STRATEGY = [spec.name for spec in STRATEGY_FIELDS]
MINUTE = datetime.timedelta(minutes=1)
MAX_WINDOWS, MAX_EXCLUSIONS = 20, 50
MAX_DEFERRAL_S = 30 * 24 * 3600  # a node waits a month at most for the claims its pool defers for


def strategy_field(spec: StrategyField) -> serializers.Field:
    """The API's field of one strategy field: its type, default and help. The values themselves are
    checked by the service (strategy.strategy_error), as those of a rollout's JSON are."""
    if spec.kind is bool:
        return serializers.BooleanField(default=spec.default, help_text=spec.help)
    if spec.kind is int:
        return serializers.IntegerField(
            default=spec.default, min_value=0, max_value=2**31 - 1, help_text=spec.help
        )
    return serializers.CharField(
        default=str(spec.default), max_length=spec.max_length, allow_blank=True, help_text=spec.help
    )


class UpgradeNodeSerializer(serializers.ModelSerializer):
    kept_cordoned = serializers.BooleanField(
        read_only=True, help_text="Failed after its driver install: the run keeps it out of service"
    )

    class Meta:
        model = UpgradeNode
        fields = [
            "name",
            "state",
            "canary",
            "retire",
            "pre_cordoned",
            "driver_touched",
            "kept_cordoned",
            "returned_at",
            "from_version",
            "reason",
            "message",
            "entered_at",
        ]


class UpgradeConditionSerializer(serializers.ModelSerializer):
    class Meta:
        model = UpgradeCondition
        fields = ["id", "node", "type", "reason", "message", "time"]


@extend_schema_field(CUDA_PARAMETER)
class CudaField(serializers.CharField):
    """A CUDA version; the service refuses one that is no version with 400 invalid_version."""


class UpgradeRunSerializer(serializers.ModelSerializer):
    pool = serializers.PrimaryKeyRelatedField(queryset=NodePool.objects.none())
    target_release = serializers.CharField(
        source="target_release.version",
        max_length=24,
        required=False,
        help_text="The driver release to move to; a Kubernetes run keeps (and shows) the pool's",
    )
    previous_release = serializers.CharField(source="previous_release.version", read_only=True)
    kind = serializers.CharField(read_only=True, help_text="driver, kubernetes or image")
    kubernetes_version = serializers.CharField(
        max_length=16,
        required=False,
        default="",
        help_text="Instead of target_release: the Kubernetes minor (1.36) for the pool's new machines",
    )
    node_image = serializers.SlugRelatedField(
        slug_field="name",
        queryset=NodeImage.objects.all(),
        required=False,
        allow_null=True,
        default=None,
        help_text="Instead of target_release: the catalog image for the pool's new machines",
    )
    previous_node_image = serializers.SlugRelatedField(slug_field="name", read_only=True, allow_null=True)
    cuda = CudaField(
        write_only=True,
        required=False,
        default="",
        help_text="A CUDA version the pool's workloads need, e.g. 12.8",
    )
    start = serializers.BooleanField(write_only=True, default=True, help_text="false: create it pending")
    override_window = serializers.BooleanField(
        write_only=True,
        default=False,
        help_text="true: start now even outside the cluster's maintenance windows (in the audit log)",
    )
    # Plain strings in the schema: an enum here collides with the other resources' `status` enums.
    status = serializers.CharField(
        read_only=True, help_text="pending, running, paused, aborting, completed, failed, aborted"
    )
    nodes = UpgradeNodeSerializer(many=True, read_only=True)

    class Meta:
        model = UpgradeRun
        fields = [
            "id",
            "pool",
            "kind",
            "target_release",
            "previous_release",
            "kubernetes_version",
            "previous_kubernetes_version",
            "node_image",
            "previous_node_image",
            "rollback_of",
            "rollout",
            *STRATEGY,
            "cuda",
            "start",
            "override_window",
            "window_override",
            "status",
            "reason",
            "message",
            "max_unavailable_seen",
            "surge_added_at",
            "canary_done_at",
            "approved_at",
            "created_at",
            "finished_at",
            "nodes",
        ]
        read_only_fields = [
            "previous_kubernetes_version",
            "rollback_of",
            "rollout",
            "canary_done_at",
            "approved_at",
            "max_unavailable_seen",
            "surge_added_at",
            "window_override",
        ]
        extra_kwargs = {
            "status": {"read_only": True},
            "reason": {"read_only": True},
            "message": {"read_only": True},
        }

    def get_fields(self):
        return {**super().get_fields(), **{spec.name: strategy_field(spec) for spec in STRATEGY_FIELDS}}

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        request = self.context.get("request")
        if request is not None:
            self.fields["pool"].queryset = NodePool.objects.restrict(resolve_tenant(request))


class FleetRolloutSerializer(serializers.ModelSerializer):
    target_release = serializers.CharField(source="target_release.version", max_length=24)
    gpu_model = serializers.CharField(source="gpu_model.name", required=False, allow_null=True, default=None)
    strategy = serializers.DictField(required=False, default=dict)
    status = serializers.CharField(read_only=True)
    runs = serializers.SerializerMethodField()

    class Meta:
        model = FleetRollout
        fields = [
            "id",
            "target_release",
            "gpu_model",
            "from_branch",
            "pools_per_wave",
            "strategy",
            "status",
            "wave",
            "skipped",
            "runs",
            "created_at",
        ]
        read_only_fields = ["status", "wave", "skipped"]

    def get_runs(self, rollout) -> list[dict]:
        return [
            {"id": r.pk, "pool": r.pool_id, "tenant": r.tenant_id, "wave": r.wave, "status": r.status}
            for r in rollout.runs.order_by("wave", "pk")
        ]


class MaintenanceWindowSerializer(serializers.Serializer):
    recurrence = serializers.CharField(
        max_length=500, help_text="RFC 5545 recurrence rule, such as FREQ=WEEKLY;BYDAY=SA"
    )
    start_time = serializers.TimeField(help_text="Wall-clock start in the cluster's time zone, e.g. 02:00")
    duration_minutes = serializers.IntegerField(min_value=1, max_value=windows.MAX_DURATION // MINUTE)
    first_day = serializers.DateField(required=False, help_text="The rule counts from this day (today)")


class MaintenanceExclusionSerializer(serializers.Serializer):
    first_day = serializers.DateField()
    last_day = serializers.DateField(help_text="Included")
    scope = serializers.ChoiceField(choices=windows.SCOPES, default="all", help_text="all, minor or node")
    reason = serializers.CharField(max_length=200, allow_blank=True, default="")


class WindowSerializer(serializers.Serializer):
    start = serializers.DateTimeField()
    end = serializers.DateTimeField()


class WindowDecisionSerializer(serializers.Serializer):
    allowed = serializers.BooleanField(help_text="A driver upgrade may start or go on now")
    reason = serializers.CharField(help_text="InWindow, NoWindows, OutsideWindow or Excluded")
    message = serializers.CharField()
    until = serializers.DateTimeField(allow_null=True, help_text="Allowed: when it must pause")
    next_start = serializers.DateTimeField(allow_null=True, help_text="Not allowed: when it may start")


class MaintenanceSerializer(serializers.Serializer):
    """A cluster's maintenance windows and exclusions, set whole with PUT."""

    time_zone = serializers.CharField(max_length=64, help_text="IANA time zone, such as Europe/Berlin")
    windows = MaintenanceWindowSerializer(many=True, max_length=MAX_WINDOWS)
    exclusions = MaintenanceExclusionSerializer(many=True, max_length=MAX_EXCLUSIONS)
    next_windows = WindowSerializer(many=True, read_only=True, help_text="The next windows, merged")
    now = WindowDecisionSerializer(read_only=True)

    def validate_time_zone(self, value: str) -> str:
        try:
            windows.zone(value)
        except ValueError as error:
            raise serializers.ValidationError(str(error)) from None
        return value

    def validate(self, data: dict) -> dict:
        today = timezone.localdate()
        for i, window in enumerate(data["windows"]):
            window.setdefault("first_day", today)
            try:
                maintenance.window_of(MaintenanceWindow(**window), data["time_zone"])
            except ValueError as error:
                raise serializers.ValidationError({f"windows[{i}].recurrence": [str(error)]}) from None
        for i, exclusion in enumerate(data["exclusions"]):
            if exclusion["last_day"] < exclusion["first_day"]:
                raise serializers.ValidationError(
                    {f"exclusions[{i}].last_day": ["The last day comes on or after the first day."]}
                )
        return data


class UpgradeDeferralSerializer(serializers.ModelSerializer):
    """A pool's training-aware deferral of upgrades; `enabled` false: none is set."""

    enabled = serializers.SerializerMethodField()
    claims_older_than_s = serializers.IntegerField(
        required=False, allow_null=True, min_value=60, max_value=MAX_DEFERRAL_S, default=None
    )
    utilization_above_percent = serializers.IntegerField(
        required=False, allow_null=True, min_value=1, max_value=100, default=None
    )
    deadline_s = serializers.IntegerField(min_value=60, max_value=MAX_DEFERRAL_S, default=24 * 3600)

    class Meta:
        model = UpgradeDeferral
        fields = [
            "enabled",
            "training_claims",
            "claims_older_than_s",
            "utilization_above_percent",
            "deadline_s",
            "after_deadline",
        ]

    def get_enabled(self, policy: UpgradeDeferral) -> bool:
        return policy.pk is not None


class KubernetesOptionSerializer(serializers.Serializer):
    version = serializers.CharField()
    allowed = serializers.BooleanField()
    rule = serializers.CharField(help_text="The skew rule it breaks, when not allowed")
    message = serializers.CharField()


class ImageOptionSerializer(serializers.Serializer):
    image = serializers.CharField()
    os = serializers.CharField()
    kernel_version = serializers.CharField()
    driver = serializers.CharField(help_text="The driver it preinstalls; empty: the GPU Operator installs it")
    allowed = serializers.BooleanField()
    rule = serializers.CharField(help_text="The first rule it breaks, when not allowed")
    message = serializers.CharField()


class PoolVersionsSerializer(serializers.Serializer):
    id = serializers.IntegerField()
    name = serializers.CharField()
    version = serializers.CharField(help_text="The minor its kubelets run")
    options = KubernetesOptionSerializer(many=True)
    image = serializers.CharField(help_text="Its machines' image; empty: the provider's own")
    image_options = ImageOptionSerializer(many=True)


class ClusterVersionsSerializer(serializers.Serializer):
    version = serializers.CharField(read_only=True, help_text="The control plane's minor")
    target = serializers.CharField(read_only=True, help_text="The minor it is being upgraded to, if any")
    end_of_support = serializers.DateField(read_only=True, allow_null=True)
    notice = serializers.CharField(read_only=True, help_text="Near or past its end of support: what to do")
    reason = serializers.CharField(read_only=True, help_text="The last control plane upgrade's")
    message = serializers.CharField(read_only=True)
    options = KubernetesOptionSerializer(many=True, read_only=True)
    pools = PoolVersionsSerializer(many=True, read_only=True)
    auto_upgrade = serializers.BooleanField(
        read_only=True, help_text="Upgrades near end of support start by themselves, in the windows (PUT)"
    )
    kubernetes_version = serializers.CharField(
        write_only=True, max_length=16, help_text="POST: the minor to upgrade the control plane to"
    )
    override_window = serializers.BooleanField(
        write_only=True,
        default=False,
        help_text="true: start now even outside the cluster's maintenance windows",
    )


class VersionSettingsSerializer(serializers.Serializer):
    auto_upgrade = serializers.BooleanField(
        help_text="Near its version's end of support, upgrade the control plane, then the pools, by "
        "themselves inside the maintenance windows"
    )
