"""Claims and their placements: a claim, its allocation and GPU shares (written by the allocator
alone), the allocation log and the metered usage intervals. The tables keep the names they had when
these models lived in nodepools (`db_table`), so no data moved when the app was split."""

from django.core.validators import MaxValueValidator, MinValueValidator
from django.db import models

from nodepools.models import Gpu, Node, NodePool
from nvke.models import TenantScopedQuerySet, dns_label


class ClaimGroup(models.Model):
    """A gang: `members` identical claims placed all or nothing, at least `min_members` of them at once,
    packed onto as few nodes / NVLink domains / racks / zones as they fit (claims.allocation.gangs).
    Its state is its members': placed when at least `min_members` of them are allocated."""

    tenant = models.ForeignKey("tenancy.Tenant", on_delete=models.CASCADE, related_name="claim_groups")
    cluster = models.ForeignKey("clusters.Cluster", on_delete=models.CASCADE, related_name="claim_groups")
    namespace = models.CharField(max_length=63, validators=[dns_label], default="default")
    name = models.CharField(max_length=63, validators=[dns_label])
    members = models.PositiveSmallIntegerField(validators=[MinValueValidator(1), MaxValueValidator(256)])
    min_members = models.PositiveSmallIntegerField(validators=[MinValueValidator(1), MaxValueValidator(256)])
    priority = models.SmallIntegerField(default=0)
    created_at = models.DateTimeField(auto_now_add=True)

    objects = TenantScopedQuerySet.as_manager()

    class Meta:
        ordering = ["cluster", "namespace", "name"]
        constraints = [
            models.UniqueConstraint(fields=["cluster", "namespace", "name"], name="uniq_claim_group_name"),
            models.CheckConstraint(
                condition=models.Q(min_members__lte=models.F("members")), name="group_min_within_members"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.namespace}/{self.name}"


class Queue(models.Model):
    """A queue of a cluster (a team's, or some namespaces'): a nominal GPU quota per GPU model, and a
    cohort (a name shared by queues of the cluster) whose unused quota it may borrow up to a borrowing
    limit and lends up to a lending limit (claims.allocation.queues keeps the books). A claim in one of
    `namespaces` falls to it unless it names a queue. The tenant's quotas stay the outer bound."""

    tenant = models.ForeignKey("tenancy.Tenant", on_delete=models.CASCADE, related_name="queues")
    cluster = models.ForeignKey("clusters.Cluster", on_delete=models.CASCADE, related_name="queues")
    name = models.CharField(max_length=63, validators=[dns_label])
    namespaces = models.JSONField(default=list, blank=True, help_text="Claims in these namespaces fall to it")
    cohort = models.CharField(
        max_length=63, blank=True, help_text="Queues of the cluster with the same cohort lend and borrow"
    )
    quotas = models.JSONField(
        default=list,
        blank=True,
        help_text="Per GPU model: gpu_model, gpus, gpu_memory_mib (nominal), borrowing_limit and "
        "lending_limit (GPUs; null: none)",
    )
    created_at = models.DateTimeField(auto_now_add=True)

    objects = TenantScopedQuerySet.as_manager()

    class Meta:
        ordering = ["cluster", "name"]
        constraints = [models.UniqueConstraint(fields=["cluster", "name"], name="uniq_queue_name")]

    def __str__(self) -> str:
        return self.name


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
        UI = "ui", "NVKE's web UI"
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
    min_isolation = models.CharField(
        max_length=16,
        choices=[
            ("none", "Any: time-slicing will do"),
            ("memory-capped", "Memory held (MPS or better)"),
            ("hard", "Hard: a MIG slice or a whole GPU"),
            ("exclusive", "Exclusive: whole GPUs"),
        ],
        default="none",
        help_text="The least isolation it may be placed with (claims.allocation.state.ISOLATION_LEVELS)",
    )
    priority = models.SmallIntegerField(default=0, help_text="Higher is placed first when capacity frees")
    training = models.BooleanField(
        default=False,
        help_text="A training job: a pool's upgrade deferral policy keeps its node from draining under it",
    )
    preemptible = models.BooleanField(
        default=True,
        help_text="A pending claim of higher priority may take its GPUs (it goes back to pending); "
        "false: never",
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
        help_text="Where the cluster's workload stands (claims.workloads): state and message",
    )
    preempted_by = models.ForeignKey(
        "self",
        on_delete=models.SET_NULL,
        null=True,
        blank=True,
        related_name="+",
        help_text="The claim of higher priority that last took its GPUs (claims.allocator.preemption)",
    )
    preempted_at = models.DateTimeField(null=True, blank=True)
    queue = models.ForeignKey(
        Queue,
        on_delete=models.SET_NULL,
        null=True,
        blank=True,
        related_name="claims",
        help_text="The queue whose quota admits it; empty: its namespace's queue, if any, else none",
    )
    group = models.ForeignKey(
        ClaimGroup,
        on_delete=models.CASCADE,
        null=True,
        blank=True,
        related_name="claims",
        help_text="The gang it is a member of: placed, moved and released with it",
    )

    objects = TenantScopedQuerySet.as_manager()

    class Meta:
        db_table = "nodepools_claim"
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

    class Meta:
        db_table = "nodepools_allocation"

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
        db_table = "nodepools_gpushare"
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
        db_table = "nodepools_allocationevent"
        indexes = [models.Index(fields=["cluster", "id"])]

    def __str__(self) -> str:
        return f"{self.kind} {self.claim_id or ''}"


class UsageInterval(models.Model):
    """Metering: one stretch of time during which a claim held one allocation, as it held it. Opened in
    the transaction that places the claim (or resizes it), closed in the one that removes the allocation
    (claims.usage), so a placement and its interval commit or roll back together. Names are copied:
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
        db_table = "nodepools_usageinterval"
        ordering = ["started_at", "pk"]
        indexes = [models.Index(fields=["tenant", "started_at"])]
        constraints = [  # an allocation is metered once at a time (and this index finds the open one)
            models.UniqueConstraint(
                fields=["allocation_id"], condition=models.Q(ended_at__isnull=True), name="one_open_usage"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.namespace}/{self.claim_name} from {self.started_at:%Y-%m-%d %H:%M:%S}"
