"""The fleet: node pools, their nodes and GPUs (written by nodepools.nodes alone), and the autoscaler's
decisions."""

import uuid

from django.core.validators import MaxValueValidator, MinValueValidator
from django.db import models

from catalog.models import DriverRelease, GpuModel, NodeImage, SharingMode
from nvke.models import Conditions, TenantScopedQuerySet, dns_label


class PlacementPolicy(models.TextChoices):
    FGD = "fgd", "Fragmentation-aware (default)"
    BINPACK = "binpack", "Bin-pack"
    SPREAD = "spread", "Spread"


class ScaleDown(models.TextChoices):
    DRAINING = "draining"
    REMOVING = "removing"
    UNCORDONING = "uncordoning"


class NodePool(Conditions):
    class Status(models.TextChoices):
        PROVISIONING = "provisioning"
        SCALING = "scaling"
        READY = "ready"
        PENDING = "pending"  # waiting for capacity
        FAILED = "failed"
        DELETING = "deleting"

    tenant = models.ForeignKey("tenancy.Tenant", on_delete=models.CASCADE, related_name="node_pools")
    cluster = models.ForeignKey("clusters.Cluster", on_delete=models.CASCADE, related_name="node_pools")
    name = models.CharField(max_length=63, validators=[dns_label])
    gpu_model = models.ForeignKey(GpuModel, on_delete=models.PROTECT, related_name="node_pools")
    gpus_per_node = models.PositiveSmallIntegerField(validators=[MinValueValidator(1), MaxValueValidator(8)])
    node_count = models.PositiveIntegerField(help_text="Desired number of nodes")
    min_nodes = models.PositiveIntegerField(default=0)
    max_nodes = models.PositiveIntegerField()
    driver_release = models.ForeignKey(DriverRelease, on_delete=models.PROTECT, related_name="node_pools")
    kubernetes_version = models.CharField(
        max_length=16,
        blank=True,
        help_text="Minor version its kubelets run, e.g. 1.34 (clusters.skew keeps it within the control "
        "plane's skew); empty on an attached cluster, whose machines NVKE does not make",
    )
    node_image = models.ForeignKey(
        NodeImage,
        on_delete=models.PROTECT,
        null=True,
        blank=True,
        related_name="node_pools",
        help_text="Its machines' image; empty: the provider's own (and on an attached cluster)",
    )
    sharing_mode = models.CharField(max_length=16, choices=SharingMode.choices, default=SharingMode.EXCLUSIVE)
    mig_layout = models.JSONField(
        default=list, blank=True, help_text="MIG profiles created on every GPU (mig mode); empty = on demand"
    )
    placement_policy = models.CharField(max_length=8, choices=PlacementPolicy.choices, default="fgd")
    # Compute sharing (nodepools.sharing): how far the fractions' compute ceilings on one GPU may add up,
    # and the guaranteed share of a fraction that names none (null: its ceiling).
    compute_oversubscription_percent = models.PositiveSmallIntegerField(
        default=100,
        validators=[MinValueValidator(100), MaxValueValidator(400)],
        help_text="Ceilings of the claims on one GPU may add up to this % (100 = no oversubscription)",
    )
    default_guaranteed_percent = models.PositiveSmallIntegerField(
        null=True,
        blank=True,
        validators=[MaxValueValidator(100)],
        help_text="Guaranteed compute % of a fraction naming none (at most its ceiling); empty = the ceiling",
    )
    node_selector = models.JSONField(
        default=dict,
        blank=True,
        help_text="Attached clusters: labels a node must carry to join the pool, besides its GPU model.",
    )
    # The autoscaler (nodepools.autoscaler) moves node_count within min_nodes..max_nodes: up for pending
    # claims a new node would fit, down by a node idle for scale_down_delay_s.
    autoscaling = models.BooleanField(
        default=False, help_text="Grow for pending claims and remove idle nodes, within min and max nodes"
    )
    scale_down_delay_s = models.PositiveIntegerField(
        default=600,
        validators=[MinValueValidator(1), MaxValueValidator(86400)],
        help_text="Seconds a node holds no claim before the autoscaler removes it",
    )
    # The node the autoscaler is taking out: drained (the upgrades' path), then removed by the next
    # reconcile (the provider removes it first), or put back in service (uncordoning).
    scale_down_node = models.CharField(max_length=253, blank=True)
    scale_down_phase = models.CharField(max_length=12, choices=ScaleDown.choices, blank=True)
    scale_down_started_at = models.DateTimeField(null=True, blank=True)
    # Its upgrades' defaults (a run's own strategy may say otherwise): nvke.node_counts' "N" or "N%".
    upgrade_max_unavailable = models.CharField(
        max_length=8,
        default="1",
        help_text="Its upgrades' default max_unavailable: nodes (or N%) out at a time",
    )
    upgrade_max_surge = models.CharField(
        max_length=8,
        default="0",
        help_text="Its Kubernetes and image upgrades' default max_surge: extra nodes (or N%) meanwhile",
    )
    # While an upgrade run replaces the pool's machines (upgrades.controller): what new machines get, and
    # its surge (maxSurge): extra nodes kept beyond the node count, and those it drained to be removed.
    new_machines = models.JSONField(
        default=dict,
        blank=True,
        help_text="The kubernetes_version or node_image new machines get while an upgrade replaces them",
    )
    surge_nodes = models.PositiveIntegerField(
        default=0, help_text="Extra nodes an upgrade keeps beyond the node count (its maxSurge)"
    )
    surge_remove = models.JSONField(
        default=list, blank=True, help_text="Surge nodes an upgrade drained: the provider removes them first"
    )
    # Telemetry's summary (telemetry.history): the mean utilization of its GPUs over the last minute, for
    # the layers that may not read telemetry (an upgrade's deferral policy).
    gpu_utilization = models.FloatField(
        null=True, blank=True, help_text="Mean GPU utilization %, last minute"
    )
    gpu_utilization_at = models.DateTimeField(null=True, blank=True)
    status = models.CharField(max_length=16, choices=Status.choices, default=Status.PROVISIONING)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    objects = TenantScopedQuerySet.as_manager()

    class Meta:
        ordering = ["cluster__name", "name"]
        constraints = [
            models.UniqueConstraint(fields=["cluster", "name"], name="uniq_pool_name_per_cluster"),
            models.CheckConstraint(
                condition=models.Q(min_nodes__lte=models.F("node_count"))
                & models.Q(node_count__lte=models.F("max_nodes")),
                name="pool_node_count_within_bounds",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.cluster.name}/{self.name}"


class Node(models.Model):
    """A node of a pool as the provider reports it (synced from `ClusterOperations.list_nodes`)."""

    class Status(models.TextChoices):
        READY = "ready"
        NOT_READY = "not-ready"

    tenant = models.ForeignKey("tenancy.Tenant", on_delete=models.CASCADE, related_name="nodes")
    pool = models.ForeignKey(NodePool, on_delete=models.CASCADE, related_name="nodes")
    name = models.CharField(max_length=253, unique=True)
    status = models.CharField(max_length=16, choices=Status.choices, default=Status.READY)
    cordoned = models.BooleanField(default=False)
    driver_version = models.CharField(max_length=24)
    kubelet_version = models.CharField(max_length=32, blank=True, help_text="As the node reports it: v1.34.2")
    node_image = models.CharField(max_length=63, blank=True, help_text="Its machine's image, as reported")
    cpu_millicores = models.PositiveIntegerField()
    memory_mib = models.PositiveBigIntegerField()
    labels = models.JSONField(default=dict, blank=True)
    preflight = models.JSONField(
        default=dict, blank=True, help_text="Sharing preflight facts (nvke.agent.preflight), as last reported"
    )
    idle_since = models.DateTimeField(
        null=True, blank=True, help_text="Since when it holds no claim, as the autoscaler last saw"
    )
    created_at = models.DateTimeField(auto_now_add=True)

    objects = TenantScopedQuerySet.as_manager()

    class Meta:
        ordering = ["pool", "name"]

    def __str__(self) -> str:
        return self.name


class Gpu(models.Model):
    tenant = models.ForeignKey("tenancy.Tenant", on_delete=models.CASCADE, related_name="gpus")
    node = models.ForeignKey(Node, on_delete=models.CASCADE, related_name="gpus")
    index = models.PositiveSmallIntegerField()
    # Unique within the tenant, not across tenants: a node agent reports its GPUs' UUIDs (attached
    # clusters), and a global constraint let one tenant's agent learn whether a UUID existed elsewhere
    # and take another tenant's first, blocking that tenant's inventory with a 409.
    uuid = models.UUIDField(default=uuid.uuid4)
    memory_mib = models.PositiveIntegerField()
    nvlink_domain = models.CharField(
        max_length=64, blank=True, help_text="GPUs sharing a value are NVLink-connected; blank = PCIe only"
    )
    healthy = models.BooleanField(default=True)

    objects = TenantScopedQuerySet.as_manager()

    class Meta:
        ordering = ["node", "index"]
        constraints = [
            models.UniqueConstraint(fields=["node", "index"], name="uniq_gpu_index_per_node"),
            models.UniqueConstraint(fields=["tenant", "uuid"], name="uniq_gpu_uuid_per_tenant"),
        ]

    def __str__(self) -> str:
        return f"{self.node.name}/gpu{self.index}"


class AutoscalerDecision(models.Model):
    """What the autoscaler decided for a pool, and why (nodepools.autoscaler). A decision is written when
    it differs from the pool's last one; the newest are kept."""

    tenant = models.ForeignKey("tenancy.Tenant", on_delete=models.CASCADE, related_name="+")
    pool = models.ForeignKey(NodePool, on_delete=models.CASCADE, related_name="autoscaler_decisions")
    action = models.CharField(max_length=20)
    reason = models.CharField(max_length=40)
    message = models.TextField()
    from_nodes = models.PositiveIntegerField()
    to_nodes = models.PositiveIntegerField()
    node = models.CharField(max_length=253, blank=True, help_text="The node it removes or keeps")
    created_at = models.DateTimeField(auto_now_add=True)

    objects = TenantScopedQuerySet.as_manager()

    class Meta:
        ordering = ["-created_at", "-id"]
        indexes = [models.Index(fields=["pool", "-created_at"])]

    def __str__(self) -> str:
        return f"{self.pool.name}: {self.action} {self.from_nodes} → {self.to_nodes} ({self.reason})"
