"""The simulator's virtual cloud. It lives in the database so that every web and worker process sees
one fleet; the control plane reaches it only through the provider interface (nothing outside this package
imports these models; `.importlinter` enforces it)."""

from django.db import models

from nvke.encryption import EncryptedTextField


class SimCluster(models.Model):
    key = models.CharField(max_length=64, unique=True)
    region = models.CharField(max_length=32)
    control_plane_nodes = models.PositiveSmallIntegerField()
    endpoint = models.CharField(max_length=200)
    kubernetes_version = models.CharField(max_length=16, blank=True, help_text="Its control plane's minor")
    admin_token = EncryptedTextField(
        blank=True, editable=False, help_text="The virtual cluster's admin bearer token"
    )

    def __str__(self) -> str:
        return self.key


class SimNode(models.Model):
    cluster = models.ForeignKey(SimCluster, on_delete=models.CASCADE, related_name="nodes")
    pool = models.CharField(max_length=63)
    name = models.CharField(max_length=253)
    region = models.CharField(max_length=32)
    gpu_model = models.CharField(max_length=48)
    ready = models.BooleanField(default=True)
    unschedulable = models.BooleanField(default=False)
    driver_version = models.CharField(max_length=24)
    cpu_millicores = models.PositiveIntegerField()
    memory_mib = models.PositiveBigIntegerField()
    labels = models.JSONField(default=dict)
    gpus = models.JSONField(default=list, help_text="[{index, uuid, memory_mib, nvlink_domain, healthy}]")
    preflight = models.JSONField(
        default=dict, blank=True, help_text="Sharing preflight facts that differ from a fit node's (a fault)"
    )
    busy_until = models.DateTimeField(null=True, blank=True, help_text="An operation runs until then")
    driver_target = models.CharField(max_length=24, blank=True, help_text="The driver being installed")
    driver_outcome = models.CharField(max_length=300, blank=True, help_text="'', 'unhealthy' or a failure")
    driver_failure = models.CharField(max_length=300, blank=True, help_text="Why the last install failed")
    kubelet_version = models.CharField(max_length=32, blank=True, help_text="v1.34.0")
    kubelet_target = models.CharField(
        max_length=32, blank=True, help_text="The kubelet its replacement machine comes up with"
    )
    image = models.CharField(max_length=63, blank=True, help_text="Its machine image")
    image_target = models.CharField(max_length=63, blank=True, help_text="Its replacement's image")

    class Drain(models.TextChoices):
        NONE = "", "not drained"  # workloads may be running
        DRAINING = "draining"  # until busy_until
        BLOCKED = "blocked"  # evictions refused (a PodDisruptionBudget); a later drain call retries
        DRAINED = "drained"

    drain_state = models.CharField(max_length=16, choices=Drain.choices, blank=True)
    drain_reason = models.CharField(max_length=64, blank=True, help_text="Why a blocked drain waits")
    drain_message = models.CharField(max_length=300, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["created_at", "name"]
        constraints = [models.UniqueConstraint(fields=["cluster", "name"], name="uniq_simnode_name")]

    def __str__(self) -> str:
        return self.name


class SimFault(models.Model):
    """An injected failure: the next `remaining` calls of `operation` whose target name matches fail."""

    class Operation(models.TextChoices):
        PROVISION_CLUSTER = "provision_cluster"
        SCALE_POOL = "scale_pool"
        CORDON = "cordon"
        DRAIN = "drain"  # the drain stays blocked with the fault's reason (DisruptionBudget: a PDB)
        UNCORDON = "uncordon"
        INSTALL_DRIVER = "install_driver"  # the install fails; the node keeps its driver
        VALIDATE = "validate"  # the install completes but a GPU comes back unhealthy
        UPGRADE_CONTROL_PLANE = "upgrade_control_plane"  # the control plane refuses the new version
        REPLACE_NODE = "replace_node"  # the node's replacement machine is refused

    operation = models.CharField(max_length=32, choices=Operation.choices)
    target = models.CharField(max_length=253, blank=True, help_text="Cluster/pool/node key; blank = any")
    reason = models.CharField(max_length=64, default="SimulatedFault")
    message = models.CharField(max_length=300, default="Injected failure")
    remaining = models.PositiveIntegerField(default=1)

    def __str__(self) -> str:
        return f"{self.operation} {self.target or '*'} ×{self.remaining}"
