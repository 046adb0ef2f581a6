"""Upgrade runs (one pool to one driver release), their per-node state rows and condition history, and
fleet rollouts (one target over many pools in waves)."""

from django.conf import settings
from django.core.validators import MaxValueValidator, MinValueValidator
from django.db import models

from nvke.models import TenantScopedQuerySet
from nvke.node_counts import nodes_of

from .node_machine import State, keeps_cordoned
from .run_lifecycle import FINISHED, LIVE, Phase
from .strategy import STRATEGY, FailedNodes


def strategy_field(name: str) -> models.Field:
    """The run's column of one field of strategy.STRATEGY_FIELDS: its default, bounds, choices and help."""
    spec = STRATEGY[name]
    if spec.kind is bool:
        return models.BooleanField(default=spec.default, help_text=spec.help)
    if spec.kind is int:
        return models.PositiveIntegerField(default=spec.default, help_text=spec.help)
    choices = [(str(value), str(value)) for value, _ in spec.choices] or None
    return models.CharField(
        max_length=spec.max_length, default=spec.default, choices=choices, help_text=spec.help
    )


class FleetRollout(models.Model):
    """An operator's rollout of one release over many pools (of any tenant), a wave of pools at a time."""

    target_release = models.ForeignKey("catalog.DriverRelease", on_delete=models.PROTECT, related_name="+")
    gpu_model = models.ForeignKey(
        "catalog.GpuModel", on_delete=models.PROTECT, null=True, blank=True, related_name="+"
    )
    from_branch = models.PositiveIntegerField(null=True, blank=True, help_text="Only pools on this branch")
    pools_per_wave = models.PositiveSmallIntegerField(default=1)
    strategy = models.JSONField(default=dict, help_text="Each run's strategy fields")
    status = models.CharField(
        max_length=12, choices=[(p.value, p.value) for p in Phase], default=Phase.RUNNING
    )
    wave = models.PositiveSmallIntegerField(default=0, help_text="The wave now running (0-based)")
    skipped = models.JSONField(default=list, blank=True, help_text="[{pool, rule, message}] not upgraded")
    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-created_at"]

    def __str__(self) -> str:
        return f"rollout {self.pk} → {self.target_release}"


class UpgradeRun(models.Model):
    """One pool's rolling upgrade, a node at a time through upgrades.node_machine: of its driver (installed in
    place), of its Kubernetes version or of its node image (each node's machine replaced by one with the
    new kubelet or image)."""

    class Kind(models.TextChoices):
        DRIVER = "driver"
        KUBERNETES = "kubernetes"
        IMAGE = "image"

    tenant = models.ForeignKey("tenancy.Tenant", on_delete=models.CASCADE, related_name="upgrade_runs")
    pool = models.ForeignKey("nodepools.NodePool", on_delete=models.CASCADE, related_name="upgrade_runs")
    target_release = models.ForeignKey("catalog.DriverRelease", on_delete=models.PROTECT, related_name="+")
    previous_release = models.ForeignKey(
        "catalog.DriverRelease", on_delete=models.PROTECT, related_name="+", help_text="Rollback target"
    )
    # A Kubernetes or image run keeps the pool's driver: both releases above are the pool's.
    kind = models.CharField(max_length=12, choices=Kind.choices, default=Kind.DRIVER)
    kubernetes_version = models.CharField(max_length=16, blank=True, help_text="A Kubernetes run's target")
    previous_kubernetes_version = models.CharField(max_length=16, blank=True)
    node_image = models.ForeignKey(
        "catalog.NodeImage",
        on_delete=models.PROTECT,
        null=True,
        blank=True,
        related_name="+",
        help_text="An image run's target",
    )
    previous_node_image = models.ForeignKey(
        "catalog.NodeImage", on_delete=models.PROTECT, null=True, blank=True, related_name="+"
    )
    rollback_of = models.ForeignKey(
        "self", on_delete=models.SET_NULL, null=True, blank=True, related_name="+"
    )
    rollout = models.ForeignKey(
        FleetRollout, on_delete=models.SET_NULL, null=True, blank=True, related_name="runs"
    )
    wave = models.PositiveSmallIntegerField(default=0)
    # strategy: strategy.STRATEGY_FIELDS, stored as given (max_unavailable as written)
    max_unavailable = strategy_field("max_unavailable")
    max_surge = strategy_field("max_surge")
    canary_nodes = strategy_field("canary_nodes")
    canary_bake_s = strategy_field("canary_bake_s")
    canary_approval = strategy_field("canary_approval")
    drain_timeout_s = strategy_field("drain_timeout_s")
    validation_timeout_s = strategy_field("validation_timeout_s")
    failure_budget = strategy_field("failure_budget")
    failed_nodes = strategy_field("failed_nodes")
    # progress
    status = models.CharField(
        max_length=12, choices=[(p.value, p.value) for p in Phase], default=Phase.PENDING
    )
    reason = models.CharField(max_length=64, blank=True)
    message = models.TextField(blank=True)
    canary_done_at = models.DateTimeField(null=True, blank=True)
    approved_at = models.DateTimeField(null=True, blank=True)
    failed_accepted = models.PositiveIntegerField(default=0)
    tick_seq = models.PositiveIntegerField(default=0, help_text="Only the tick carrying this number runs")
    ticked_at = models.DateTimeField(null=True, blank=True)
    max_unavailable_seen = models.PositiveIntegerField(default=0)
    surge_added_at = models.DateTimeField(
        null=True, blank=True, help_text="When the run asked for its surge nodes (max_surge)"
    )
    window_override = models.BooleanField(
        default=False,
        help_text="Started outside the cluster's maintenance windows on purpose: it ignores them",
    )
    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    finished_at = models.DateTimeField(null=True, blank=True)

    objects = TenantScopedQuerySet.as_manager()

    class Meta:
        ordering = ["-created_at"]
        constraints = [
            models.UniqueConstraint(
                fields=["pool"],
                condition=models.Q(status__in=sorted(p.value for p in LIVE)),  # sorted: a stable migration
                name="one_live_upgrade_per_pool",
            )
        ]

    def __str__(self) -> str:
        return f"{self.pool} → {self.target}"

    @property
    def target(self) -> str:
        """What it moves the pool to, in words: "driver 580.105.08" or "Kubernetes 1.35"."""
        if self.kind == self.Kind.KUBERNETES:
            return f"Kubernetes {self.kubernetes_version}"
        if self.kind == self.Kind.IMAGE:
            return f"image {self.node_image}"
        return f"driver {self.target_release.version}"

    @property
    def previous(self) -> str:
        """What the pool ran before, in the same words."""
        if self.kind == self.Kind.KUBERNETES:
            return f"Kubernetes {self.previous_kubernetes_version}"
        if self.kind == self.Kind.IMAGE:
            return f"image {self.previous_node_image or 'the provider default'}"
        return f"driver {self.previous_release.version}"

    @property
    def finished(self) -> bool:
        return self.status in FINISHED

    def max_unavailable_of(self, nodes: int) -> int:
        """The budget in nodes: a count, or a percent of the pool rounded up."""
        return nodes_of(self.max_unavailable, nodes)


class UpgradeNode(models.Model):
    """One node's place in a run. The node's name is kept: the row outlives a node scaled away."""

    run = models.ForeignKey(UpgradeRun, on_delete=models.CASCADE, related_name="nodes")
    node = models.ForeignKey("nodepools.Node", on_delete=models.SET_NULL, null=True, related_name="+")
    name = models.CharField(max_length=253)
    state = models.CharField(
        max_length=24, choices=[(s.value, s.value) for s in State], default=State.UPGRADE_REQUIRED
    )
    entered_at = models.DateTimeField()
    canary = models.BooleanField(default=False)
    pre_cordoned = models.BooleanField(default=False, help_text="Cordoned before the run: stays cordoned")
    from_version = models.CharField(max_length=24)
    driver_touched = models.BooleanField(
        default=False, help_text="A driver install was started on it and has not validated since"
    )
    returned_at = models.DateTimeField(
        null=True,
        blank=True,
        help_text="A person returned this failed node to service as it was, its driver not validated",
    )
    retire = models.BooleanField(
        default=False, help_text="A surge node the run drains and has removed at its end (max_surge)"
    )
    # What a tick asked the provider for: written in its transaction, carried out after it commits
    # (controller.call_provider), cleared once the provider accepted it (a drain: once it is seen finished).
    # Until then every tick calls again, so a call lost between commit and call is only late.
    cordon_wanted = models.BooleanField(
        null=True, blank=True, help_text="A cordon (true) or uncordon (false) the provider has yet to accept"
    )
    drain_wanted = models.BooleanField(default=False, help_text="A drain asked for and not seen finished")
    driver_wanted = models.CharField(
        max_length=24, blank=True, help_text="A driver install the provider has yet to accept"
    )
    call_error = models.JSONField(
        default=dict, blank=True, help_text="The last refused call {call, reason, message}, until a tick acts"
    )
    reason = models.CharField(max_length=64, blank=True)
    message = models.TextField(blank=True)

    class Meta:
        ordering = ["run", "name"]
        constraints = [models.UniqueConstraint(fields=["run", "name"], name="uniq_upgrade_node")]

    def __str__(self) -> str:
        return f"{self.name} in run #{self.run_id}: {self.state}"

    @property
    def kept_cordoned(self) -> bool:
        """Failed with its driver touched, so the run keeps it out of service (run.failed_nodes), until
        someone returns it to service."""
        return (
            self.state == State.FAILED
            and self.returned_at is None
            and keeps_cordoned(FailedNodes(self.run.failed_nodes), self.driver_touched)
        )


class UpgradeCondition(models.Model):
    """The run's history: each transition of the run or a node, Kubernetes-condition style."""

    run = models.ForeignKey(UpgradeRun, on_delete=models.CASCADE, related_name="history")
    node = models.CharField(max_length=253, blank=True, help_text="Empty: the run itself")
    type = models.CharField(max_length=32)
    reason = models.CharField(max_length=64)
    message = models.TextField(blank=True)
    time = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["run", "id"]
        indexes = [models.Index(fields=["run", "id"])]

    def __str__(self) -> str:
        return f"{self.type} {self.reason}"


class MaintenanceWindow(models.Model):
    """When automatic and scheduled upgrades of a cluster may run: an RFC 5545 recurrence rule whose
    occurrences start at `start_time` on the cluster's wall clock (upgrades.windows), for a duration."""

    tenant = models.ForeignKey("tenancy.Tenant", on_delete=models.CASCADE, related_name="+")
    cluster = models.ForeignKey(
        "clusters.Cluster", on_delete=models.CASCADE, related_name="maintenance_windows"
    )
    recurrence = models.CharField(max_length=500, help_text="RFC 5545 rule, such as FREQ=WEEKLY;BYDAY=SA")
    start_time = models.TimeField(help_text="Wall-clock start in the cluster's time zone")
    duration_minutes = models.PositiveIntegerField()
    first_day = models.DateField(help_text="The rule counts from this day")
    created_at = models.DateTimeField(auto_now_add=True)

    objects = TenantScopedQuerySet.as_manager()

    class Meta:
        ordering = ["cluster", "pk"]

    def __str__(self) -> str:
        return f"{self.cluster}: {self.recurrence} at {self.start_time:%H:%M} for {self.duration_minutes} min"


class MaintenanceExclusion(models.Model):
    """Days of a cluster (its time zone, ends included) when upgrades of a scope do not run."""

    class Scope(models.TextChoices):
        ALL = "all", "no upgrades at all"
        MINOR = "minor", "no minor Kubernetes upgrades"
        NODE = "node", "no node upgrades (drivers, node images, pools' Kubernetes)"

    tenant = models.ForeignKey("tenancy.Tenant", on_delete=models.CASCADE, related_name="+")
    cluster = models.ForeignKey(
        "clusters.Cluster", on_delete=models.CASCADE, related_name="maintenance_exclusions"
    )
    first_day = models.DateField()
    last_day = models.DateField()
    scope = models.CharField(max_length=8, choices=Scope.choices, default=Scope.ALL)
    reason = models.CharField(max_length=200, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    objects = TenantScopedQuerySet.as_manager()

    class Meta:
        ordering = ["cluster", "first_day", "pk"]

    def __str__(self) -> str:
        return f"{self.cluster}: {self.scope} from {self.first_day} to {self.last_day}"


class UpgradeDeferral(models.Model):
    """A pool's training-aware deferral: an upgrade does not drain a node while it runs a claim marked
    training (or one running longer than `claims_older_than_s`), nor any node while the pool's GPUs are
    busier than `utilization_above_percent` (telemetry's last minute), up to `deadline_s` in that wait;
    then the upgrade proceeds, or stops there (the node fails, before its driver was touched)."""

    class AfterDeadline(models.TextChoices):
        PROCEED = "proceed", "drain it anyway"
        STOP = "stop", "fail the node and leave the claim running"

    tenant = models.ForeignKey("tenancy.Tenant", on_delete=models.CASCADE, related_name="+")
    pool = models.OneToOneField(
        "nodepools.NodePool", on_delete=models.CASCADE, related_name="upgrade_deferral"
    )
    training_claims = models.BooleanField(default=True, help_text="Wait for claims marked training")
    claims_older_than_s = models.PositiveIntegerField(
        null=True, blank=True, help_text="Also wait for claims running longer than this (empty: no)"
    )
    utilization_above_percent = models.PositiveSmallIntegerField(
        null=True,
        blank=True,
        validators=[MinValueValidator(1), MaxValueValidator(100)],
        help_text="Also wait while the pool's mean GPU utilization is above this % (empty: no)",
    )
    deadline_s = models.PositiveIntegerField(default=24 * 3600, help_text="The longest a node waits")
    after_deadline = models.CharField(
        max_length=8, choices=AfterDeadline.choices, default=AfterDeadline.PROCEED
    )

    objects = TenantScopedQuerySet.as_manager()

    def __str__(self) -> str:
        return f"{self.pool}: upgrade deferral"
