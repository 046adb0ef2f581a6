"""Telemetry state kept in PostgreSQL: node tokens, downsampled history, per-claim scaling state and
the log of scaling and health decisions. Latest values live in Redis (telemetry.store)."""

import hashlib
import secrets

from django.db import models

from nvke.models import TenantScopedQuerySet


def hash_token(raw: str) -> str:
    return hashlib.sha256(raw.encode()).hexdigest()


class NodeToken(models.Model):
    """The secret a node agent posts telemetry with. One per node; only its hash is stored."""

    PREFIX = "nvkenode_"

    tenant = models.ForeignKey("tenancy.Tenant", on_delete=models.CASCADE, related_name="+")
    node = models.OneToOneField("nodepools.Node", on_delete=models.CASCADE, related_name="telemetry_token")
    key_prefix = models.CharField(max_length=20)
    key_hash = models.CharField(max_length=64, unique=True)
    created_at = models.DateTimeField(auto_now_add=True)

    objects = TenantScopedQuerySet.as_manager()

    class Meta:
        ordering = ["node__name"]

    def __str__(self) -> str:
        return f"{self.node} ({self.key_prefix}…)"

    @classmethod
    def issue(cls, node) -> tuple["NodeToken", str]:
        """A new token for the node (replacing any old one); the raw value is returned once."""
        raw = cls.PREFIX + secrets.token_urlsafe(32)
        token, _ = cls.objects.update_or_create(
            node=node,
            defaults={"tenant_id": node.tenant_id, "key_prefix": raw[:14], "key_hash": hash_token(raw)},
        )
        return token, raw


class MetricPoint(models.Model):
    """One GPU's averages over a bucket: 10 s buckets for the last hour, 1 min buckets for a week."""

    gpu = models.ForeignKey("nodepools.Gpu", on_delete=models.CASCADE, related_name="+")
    resolution_s = models.PositiveSmallIntegerField()
    bucket = models.DateTimeField()
    samples = models.PositiveIntegerField()
    utilization = models.FloatField()
    memory_used_mib = models.FloatField()
    temperature_c = models.FloatField()
    power_w = models.FloatField()
    sm_clock_mhz = models.FloatField()

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["gpu", "resolution_s", "bucket"], name="uniq_metric_point")
        ]
        indexes = [models.Index(fields=["resolution_s", "bucket"])]

    def __str__(self) -> str:
        return f"gpu {self.gpu_id} @ {self.bucket:%H:%M:%S} ({self.resolution_s} s)"


class ClaimScaling(models.Model):
    """How a fractional claim is expected to use its GPU (the simulator's usage profile) and what dynamic
    rescaling has done to it. `requested_compute_percent` is what the user asked for; the claim's own
    compute_percent is what it holds now (grown or not)."""

    class Profile(models.TextChoices):
        STEADY = "steady"
        BURSTY = "bursty"
        GROWING = "growing"

    class State(models.TextChoices):
        NORMAL = "normal"
        GROWN = "grown"
        THROTTLED = "throttled"

    tenant = models.ForeignKey("tenancy.Tenant", on_delete=models.CASCADE, related_name="+")
    claim = models.OneToOneField("claims.Claim", on_delete=models.CASCADE, related_name="scaling")
    profile = models.CharField(max_length=8, choices=Profile.choices, default=Profile.STEADY)
    requested_compute_percent = models.PositiveSmallIntegerField()
    state = models.CharField(max_length=10, choices=State.choices, default=State.NORMAL)
    reason = models.TextField(blank=True)
    updated_at = models.DateTimeField(auto_now=True)

    objects = TenantScopedQuerySet.as_manager()

    class Meta:
        ordering = ["claim_id"]

    def __str__(self) -> str:
        return f"{self.claim} {self.profile} {self.state}"


# Inclusive bounds of each value of a pool's rescaling policy; besides, idle_percent < pressure_percent.
RESCALING_BOUNDS = {
    "pressure_percent": (1, 100),
    "pressure_s": (1, 3600),
    "idle_percent": (1, 100),
    "idle_s": (1, 24 * 3600),
    "max_growth_percent": (100, 400),
}


class PoolRescaling(models.Model):
    """A node pool's dynamic rescaling policy (telemetry.policy). A pool without a row follows the
    platform defaults (the NVKE_TELEMETRY_* settings); a row holds every value, so a later change of the
    defaults leaves it as it is. The bounds are checked by telemetry.policy.check and again here."""

    tenant = models.ForeignKey("tenancy.Tenant", on_delete=models.CASCADE, related_name="+")
    pool = models.OneToOneField("nodepools.NodePool", on_delete=models.CASCADE, related_name="rescaling")
    enabled = models.BooleanField(default=True)
    pressure_percent = models.PositiveSmallIntegerField()
    pressure_s = models.PositiveIntegerField()
    idle_percent = models.PositiveSmallIntegerField()
    idle_s = models.PositiveIntegerField()
    max_growth_percent = models.PositiveSmallIntegerField()
    updated_at = models.DateTimeField(auto_now=True)

    objects = TenantScopedQuerySet.as_manager()

    class Meta:
        ordering = ["pool_id"]
        constraints = [
            models.CheckConstraint(
                condition=models.Q(
                    *(models.Q(**{f"{name}__range": bounds}) for name, bounds in RESCALING_BOUNDS.items()),
                    idle_percent__lt=models.F("pressure_percent"),
                ),
                name="pool_rescaling_bounds",
            )
        ]

    def __str__(self) -> str:
        return f"rescaling of pool {self.pool}"


class TelemetryEvent(models.Model):
    """A decision taken on telemetry: a claim grown, moved, throttled or shrunk; a GPU marked unhealthy;
    a node NotReady. Shown in the API and the UI."""

    class Kind(models.TextChoices):
        GROWN = "claim.grown"
        MOVED = "claim.moved"
        THROTTLED = "claim.throttled"
        SHRUNK = "claim.shrunk"
        GPU_UNHEALTHY = "gpu.unhealthy"
        NODE_NOT_READY = "node.not-ready"
        NODE_READY = "node.ready"
        NODE_REPLACED = "node.replaced"

    tenant = models.ForeignKey("tenancy.Tenant", on_delete=models.CASCADE, related_name="+")
    cluster = models.ForeignKey("clusters.Cluster", on_delete=models.CASCADE, related_name="+")
    kind = models.CharField(max_length=16, choices=Kind.choices)
    claim = models.ForeignKey("claims.Claim", on_delete=models.SET_NULL, null=True, related_name="+")
    gpu = models.ForeignKey("nodepools.Gpu", on_delete=models.SET_NULL, null=True, related_name="+")
    node = models.ForeignKey("nodepools.Node", on_delete=models.SET_NULL, null=True, related_name="+")
    message = models.TextField()
    created_at = models.DateTimeField(auto_now_add=True)

    objects = TenantScopedQuerySet.as_manager()

    class Meta:
        ordering = ["-created_at", "-id"]
        indexes = [models.Index(fields=["tenant", "-created_at"])]

    def __str__(self) -> str:
        return f"{self.kind}: {self.message}"
