import uuid

from django.core.exceptions import ValidationError
from django.core.validators import MaxValueValidator, MinValueValidator
from django.db import models
from packaging.version import Version

from nvke.models import Conditions, TenantScopedQuerySet, dns_label

from .versions import is_valid_version, version_key


def validate_version(value: str) -> None:
    if not is_valid_version(value):
        raise ValidationError(f"{value!r} is not a dotted numeric version like 570.133.20.")


# --- Catalog (operators) ---------------------------------------------------------------------------


class Architecture(models.Model):
    """A GPU architecture (Turing, Ampere, Hopper, ...), the unit drivers declare support for."""

    name = models.CharField(max_length=32, unique=True)
    compute_capabilities = models.CharField(max_length=32, help_text="e.g. 8.0, 8.6")

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name


class GpuModel(models.Model):
    class FormFactor(models.TextChoices):
        SXM = "sxm", "SXM (NVLink board)"
        PCIE = "pcie", "PCIe"

    name = models.CharField(
        max_length=48, unique=True, validators=[dns_label], help_text="e.g. h100-sxm5-80gb"
    )
    display_name = models.CharField(max_length=64)
    product_name = models.CharField(max_length=64, help_text="As NVML reports it, e.g. NVIDIA H100 80GB HBM3")
    architecture = models.ForeignKey(Architecture, on_delete=models.PROTECT, related_name="gpu_models")
    compute_capability = models.CharField(max_length=8)
    memory_mib = models.PositiveIntegerField()
    memory_bandwidth_gbps = models.PositiveIntegerField(help_text="GB/s")
    max_power_w = models.PositiveIntegerField()
    form_factor = models.CharField(max_length=8, choices=FormFactor.choices)
    nvlink = models.BooleanField(default=False, help_text="GPUs on one node are NVLink-connected.")
    nvlink_bandwidth_gbps = models.PositiveIntegerField(default=0, help_text="Per GPU, GB/s")
    max_gpus_per_node = models.PositiveSmallIntegerField(default=8)
    mig_max_instances = models.PositiveSmallIntegerField(default=0, help_text="0 = no MIG")
    min_driver_version = models.CharField(
        max_length=24, validators=[validate_version], help_text="Oldest driver that runs this GPU."
    )
    mig_min_driver_version = models.CharField(max_length=24, blank=True, help_text="Oldest driver for MIG.")
    host_cpus_per_gpu = models.PositiveSmallIntegerField(default=16, help_text="vCPUs a node has per GPU")
    host_memory_gib_per_gpu = models.PositiveSmallIntegerField(default=128)
    price_per_gpu_hour = models.DecimalField(
        max_digits=8,
        decimal_places=4,
        null=True,
        blank=True,
        help_text="Optional: what one GPU-hour costs; usage reports then carry a cost column",
    )

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.display_name

    @property
    def supports_mig(self) -> bool:
        return self.mig_max_instances > 0


class MigProfile(models.Model):
    """A MIG GPU-instance profile and where it may be placed, on the memory-slice axis."""

    gpu_model = models.ForeignKey(GpuModel, on_delete=models.CASCADE, related_name="mig_profiles")
    name = models.CharField(max_length=24, help_text="e.g. 3g.40gb")
    profile_id = models.PositiveSmallIntegerField(help_text="As nvidia-smi prints it")
    compute_slices = models.PositiveSmallIntegerField()
    memory_slices = models.PositiveSmallIntegerField(help_text="Size on the memory-slice axis")
    memory_mib = models.PositiveIntegerField()
    max_instances = models.PositiveSmallIntegerField()
    placements = models.JSONField(help_text="Valid start indexes, e.g. [0, 4]")

    class Meta:
        ordering = ["gpu_model", "-memory_slices", "name"]
        constraints = [models.UniqueConstraint(fields=["gpu_model", "name"], name="uniq_mig_profile")]

    def __str__(self) -> str:
        return f"{self.gpu_model.name} {self.name}"


class DriverRelease(models.Model):
    class BranchType(models.TextChoices):
        LTSB = "ltsb", "Long Term Support"
        PB = "pb", "Production"
        NFB = "nfb", "New Feature"

    version = models.CharField(max_length=24, unique=True, validators=[validate_version])
    branch = models.PositiveIntegerField(help_text="e.g. 570")
    branch_type = models.CharField(max_length=4, choices=BranchType.choices)
    branch_end_of_life = models.DateField(null=True, blank=True)
    release_date = models.DateField(null=True, blank=True)
    cuda_version = models.CharField(max_length=8, help_text="Highest CUDA version it supports, e.g. 12.8")
    architectures = models.ManyToManyField(Architecture, related_name="driver_releases")
    enabled = models.BooleanField(default=True, help_text="Offered for new pools and upgrades.")

    class Meta:
        ordering = ["-branch", "-release_date", "-version"]

    def __str__(self) -> str:
        return self.version

    @property
    def version_key(self) -> Version:
        return version_key(self.version)


class NodeImage(models.Model):
    """A GPU node's machine image (catalog): its OS and kernel, the NVIDIA Container Toolkit, and the
    driver it preinstalls, if any (none: the GPU Operator installs the pool's driver at boot)."""

    name = models.CharField(max_length=63, unique=True, validators=[dns_label])
    os = models.CharField(max_length=64, help_text="e.g. Ubuntu 24.04")
    kernel_version = models.CharField(max_length=64, help_text="e.g. 6.8.0-85-generic")
    container_toolkit_version = models.CharField(max_length=24)
    driver_release = models.ForeignKey(
        DriverRelease,
        on_delete=models.PROTECT,
        null=True,
        blank=True,
        related_name="+",
        help_text="Preinstalled driver; empty when the GPU Operator installs it",
    )
    release_date = models.DateField()
    enabled = models.BooleanField(default=True, help_text="Offered for new pools and upgrades.")
    is_default = models.BooleanField(default=False, help_text="New pools get it unless they name one.")

    class Meta:
        ordering = ["-release_date", "name"]

    def __str__(self) -> str:
        return self.name


class RegionInventory(models.Model):
    """How many GPUs of a model a region has. Pools draw nodes from it until it runs out."""

    region = models.ForeignKey("clusters.Region", on_delete=models.CASCADE, related_name="inventory")
    gpu_model = models.ForeignKey(GpuModel, on_delete=models.CASCADE, related_name="inventory")
    total_gpus = models.PositiveIntegerField()

    class Meta:
        verbose_name_plural = "region inventory"
        ordering = ["region", "gpu_model"]
        constraints = [models.UniqueConstraint(fields=["region", "gpu_model"], name="uniq_region_gpu_model")]

    def __str__(self) -> str:
        return f"{self.region}: {self.total_gpus} × {self.gpu_model.name}"


# --- Tenant resources ------------------------------------------------------------------------------


class SharingMode(models.TextChoices):
    EXCLUSIVE = "exclusive"
    TIME_SLICING = "time-slicing"
    MPS = "mps"
    MIG = "mig"
    FRACTIONAL = "fractional"


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
    uuid = models.UUIDField(default=uuid.uuid4, unique=True)
    memory_mib = models.PositiveIntegerField()
    nvlink_domain = models.CharField(
        max_length=64, blank=True, help_text="GPUs sharing a value are NVLink-connected; blank = PCIe only"
    )
    healthy = models.BooleanField(default=True)

    objects = TenantScopedQuerySet.as_manager()

    class Meta:
        ordering = ["node", "index"]
        constraints = [models.UniqueConstraint(fields=["node", "index"], name="uniq_gpu_index_per_node")]

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


# --- GPU claims and allocations ----------------------------------------------------------------------


class Claim(models.Model):
    """A request for GPU capacity in a cluster, in the spirit of a Kubernetes DRA ResourceClaim:
    whole GPUs, one MIG slice, or a fraction of one GPU (memory and/or compute share)."""

    class Kind(models.TextChoices):
        WHOLE = "whole", "Whole GPUs"
        MIG = "mig", "MIG slice"
        FRACTION = "fraction", "GPU fraction"

    class Status(models.TextChoices):
        PENDING = "pending"
        ALLOCATED = "allocated"

    class Source(models.TextChoices):
        API = "api", "NVKE's API"
        RESOURCE_CLAIM = "resourceclaim", "A ResourceClaim on the cluster"
        POD = "pod", "A pod scheduled by NVKE"

    tenant = models.ForeignKey("tenancy.Tenant", on_delete=models.CASCADE, related_name="claims")
    cluster = models.ForeignKey("clusters.Cluster", on_delete=models.CASCADE, related_name="claims")
    pool = models.ForeignKey(
        NodePool,
        on_delete=models.CASCADE,
        null=True,
        blank=True,
        related_name="claims",
        help_text="Place only in this pool; empty = any pool of the cluster",
    )
    namespace = models.CharField(max_length=63, validators=[dns_label], default="default")
    name = models.CharField(max_length=63, validators=[dns_label])
    kind = models.CharField(max_length=8, choices=Kind.choices)
    gpus = models.PositiveSmallIntegerField(
        default=1, validators=[MinValueValidator(1), MaxValueValidator(8)]
    )
    nvlink_required = models.BooleanField(default=False)
    mig_profile = models.CharField(max_length=24, blank=True)
    gpu_memory_mib = models.PositiveIntegerField(null=True, blank=True)
    compute_percent = models.PositiveSmallIntegerField(
        null=True,
        blank=True,
        validators=[MinValueValidator(1), MaxValueValidator(100)],
        help_text="Fractions: the compute ceiling (the limit)",
    )
    guaranteed_percent = models.PositiveSmallIntegerField(
        null=True,
        blank=True,
        validators=[MaxValueValidator(100)],
        help_text="Fractions: guaranteed compute % (the request), at most the ceiling; empty = pool default",
    )
    cpu_milli = models.PositiveIntegerField(default=0)
    host_memory_mib = models.PositiveIntegerField(default=0)
    allowed_models = models.JSONField(default=list, blank=True, help_text="GPU model names; empty = any")
    priority = models.SmallIntegerField(default=0, help_text="Higher is placed first when capacity frees")
    training = models.BooleanField(
        default=False,
        help_text="A training job: a pool's upgrade deferral policy keeps its node from draining under it",
    )
    status = models.CharField(max_length=12, choices=Status.choices, default=Status.PENDING)
    pending_reason = models.TextField(blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    allocated_at = models.DateTimeField(null=True, blank=True)
    source = models.CharField(
        max_length=16,
        choices=Source.choices,
        default=Source.API,
        help_text="What made it: NVKE's API, or a ResourceClaim or pod on the cluster that NVKE adopted",
    )
    workload = models.JSONField(
        default=dict,
        blank=True,
        help_text="Where the cluster's workload stands (nodepools.workloads): state and message",
    )

    objects = TenantScopedQuerySet.as_manager()

    class Meta:
        ordering = ["cluster", "namespace", "name"]
        constraints = [
            models.UniqueConstraint(fields=["cluster", "namespace", "name"], name="uniq_claim_name"),
        ]
        indexes = [
            models.Index(fields=["cluster", "status", "-priority", "created_at"]),
            # Claims committed and not yet tried, which the allocation lock's holder places together:
            # a handful at any time, so this index stays small however many claims the cluster has.
            models.Index(
                fields=["cluster", "-priority", "created_at"],
                condition=models.Q(status="pending", pending_reason=""),
                name="claim_untried",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.namespace}/{self.name}"


class Allocation(models.Model):
    """Where a claim landed: one node, one or more GPU shares, and how isolated it is."""

    class Isolation(models.TextChoices):
        EXCLUSIVE = "exclusive", "Exclusive GPU"
        HARD = "hard", "Hard (MIG)"
        MEMORY_CAPPED = "memory-capped", "Memory-capped (MPS)"
        NONE = "none", "None (time-slicing)"

    claim = models.OneToOneField(Claim, on_delete=models.CASCADE, related_name="allocation")
    node = models.ForeignKey(Node, on_delete=models.CASCADE, related_name="allocations")
    isolation = models.CharField(max_length=16, choices=Isolation.choices)
    cpu_milli = models.PositiveIntegerField(default=0)
    host_memory_mib = models.PositiveIntegerField(default=0)
    created_at = models.DateTimeField(auto_now_add=True)

    def __str__(self) -> str:
        return f"{self.claim} on {self.node}"

    # What the claim holds over all its GPUs (the GPU-MEMORY and GPU-UTIL columns: memory, compute
    # ceiling and guaranteed compute); prefetch `shares`.
    @property
    def memory_mib(self) -> int:
        return sum(share.memory_mib for share in self.shares.all())

    @property
    def compute_milli(self) -> int:
        return sum(share.compute_milli for share in self.shares.all())

    @property
    def guaranteed_milli(self) -> int:
        return sum(share.guaranteed_milli for share in self.shares.all())


class GpuShare(models.Model):
    """One GPU's part of an allocation: memory, compute ceiling and guaranteed share (equal for whole GPUs
    and MIG slices), and the MIG slice if any."""

    allocation = models.ForeignKey(Allocation, on_delete=models.CASCADE, related_name="shares")
    gpu = models.ForeignKey(Gpu, on_delete=models.CASCADE, related_name="shares")
    memory_mib = models.PositiveIntegerField()
    compute_milli = models.PositiveSmallIntegerField(validators=[MaxValueValidator(1000)])  # the ceiling
    guaranteed_milli = models.PositiveSmallIntegerField(validators=[MaxValueValidator(1000)])
    exclusive = models.BooleanField(default=False)
    mig_profile = models.CharField(max_length=24, blank=True)
    mig_start = models.PositiveSmallIntegerField(null=True, blank=True)
    mig_size = models.PositiveSmallIntegerField(null=True, blank=True)

    class Meta:
        ordering = ["gpu", "mig_start"]

    def __str__(self) -> str:
        return f"{self.allocation.claim} on {self.gpu}"


class AllocationEvent(models.Model):
    """The cluster's allocation log: every placement added or removed, and resets (nodes or GPUs
    changed). Appended only under the cluster's allocation lock, so ids are in commit order; each
    process keeps its in-memory inventory in step by reading what it has not seen yet."""

    class Kind(models.TextChoices):
        ADD = "add"
        REMOVE = "remove"
        RESET = "reset"

    cluster = models.ForeignKey("clusters.Cluster", on_delete=models.CASCADE, related_name="+")
    kind = models.CharField(max_length=8, choices=Kind.choices)
    claim_id = models.BigIntegerField(null=True)
    placement = models.JSONField(null=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        indexes = [models.Index(fields=["cluster", "id"])]

    def __str__(self) -> str:
        return f"{self.kind} {self.claim_id or ''}"


class UsageInterval(models.Model):
    """Metering: one stretch of time during which a claim held one allocation, as it held it. Opened in
    the transaction that places the claim (or resizes it), closed in the one that removes the allocation
    (nodepools.usage), so a placement and its interval commit or roll back together. Names are copied:
    the history outlives the claim, its pool and its cluster."""

    tenant = models.ForeignKey("tenancy.Tenant", on_delete=models.CASCADE, related_name="+")
    allocation_id = models.BigIntegerField()
    claim_id = models.BigIntegerField()
    claim_name = models.CharField(max_length=63)
    namespace = models.CharField(max_length=63)
    kind = models.CharField(max_length=8)
    cluster_id = models.BigIntegerField()
    cluster_name = models.CharField(max_length=63)
    pool_id = models.BigIntegerField()
    pool_name = models.CharField(max_length=63)
    gpu_model = models.CharField(max_length=48)
    gpus = models.PositiveSmallIntegerField(help_text="GPUs it had a share of")
    memory_mib = models.PositiveIntegerField(help_text="GPU memory held, over all its GPUs")
    guaranteed_milli = models.PositiveIntegerField(help_text="Guaranteed compute, milli-GPUs, all GPUs")
    ceiling_milli = models.PositiveIntegerField(help_text="Compute ceilings, milli-GPUs over all its GPUs")
    gpu_equivalent_milli = models.PositiveIntegerField(
        help_text="Whole-GPU equivalents held (per GPU the larger of its memory and guaranteed compute share)"
    )
    started_at = models.DateTimeField()
    ended_at = models.DateTimeField(null=True, blank=True)

    objects = TenantScopedQuerySet.as_manager()

    class Meta:
        ordering = ["started_at", "pk"]
        indexes = [models.Index(fields=["tenant", "started_at"])]
        constraints = [  # an allocation is metered once at a time (and this index finds the open one)
            models.UniqueConstraint(
                fields=["allocation_id"], condition=models.Q(ended_at__isnull=True), name="one_open_usage"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.namespace}/{self.claim_name} from {self.started_at:%Y-%m-%d %H:%M:%S}"
