from django.db import models

from catalog.models import KubernetesVersion, Region
from nvke.encryption import EncryptedTextField
from nvke.models import Conditions, TenantScopedQuerySet, dns_label


class Cluster(Conditions):
    class Status(models.TextChoices):
        PROVISIONING = "provisioning"
        RUNNING = "running"
        FAILED = "failed"
        DELETING = "deleting"

    tenant = models.ForeignKey("tenancy.Tenant", on_delete=models.CASCADE, related_name="clusters")
    name = models.CharField(max_length=63, validators=[dns_label])
    attached = models.BooleanField(
        default=False,
        help_text="An existing cluster a tenant attached (the Kubernetes provider drives it); NVKE never "
        "provisions or deletes it.",
    )
    provider = models.CharField(
        max_length=32,
        blank=True,
        help_text="The provider that made it and drives it (nvke.providers: simulator, clusterapi; "
        "kubernetes for an attached cluster), recorded when it is created so that changing NVKE_PROVIDER "
        "leaves it with its own. Empty: whichever NVKE_PROVIDER names.",
    )
    # An attached cluster has neither: NVKE did not choose its version or its machines' region.
    kubernetes_version = models.ForeignKey(KubernetesVersion, on_delete=models.PROTECT, null=True, blank=True)
    kubernetes_target = models.ForeignKey(
        KubernetesVersion,
        on_delete=models.PROTECT,
        null=True,
        blank=True,
        related_name="+",
        help_text="The version its control plane is being upgraded to (upgrades.control_plane)",
    )
    region = models.ForeignKey(
        Region, on_delete=models.PROTECT, related_name="clusters", null=True, blank=True
    )
    control_plane_nodes = models.PositiveSmallIntegerField(
        choices=[(0, "0 (not managed by NVKE)"), (1, "1"), (3, "3 (highly available)")]
    )
    observed = models.JSONField(
        default=dict,
        blank=True,
        help_text="What NVKE last found on an attached cluster: version, features, GPU stack, GPU nodes.",
    )
    status = models.CharField(max_length=16, choices=Status.choices, default=Status.PROVISIONING)
    endpoint = models.CharField(max_length=200, blank=True)
    admin_token = EncryptedTextField(
        blank=True,
        editable=False,
        help_text="Bearer token: cluster-admin from provisioning (shown only in kubeconfigs), or NVKE's "
        "service account token on an attached cluster (never shown). Encrypted.",
    )
    ca_bundle = models.TextField(
        blank=True,
        editable=False,
        help_text="PEM CA bundle that signs the endpoint's certificate; empty when publicly trusted.",
    )
    auto_upgrade = models.BooleanField(
        default=False,
        help_text="Near its version's end of support, upgrade the control plane and pools by themselves, "
        "inside the maintenance windows",
    )
    time_zone = models.CharField(
        max_length=64, default="UTC", help_text="IANA time zone of its maintenance windows and exclusions"
    )
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    objects = TenantScopedQuerySet.as_manager()

    class Meta:
        ordering = ["name"]
        constraints = [
            models.UniqueConstraint(fields=["tenant", "name"], name="uniq_cluster_name_per_tenant")
        ]

    def __str__(self) -> str:
        return self.name


class ClusterAddon(models.Model):
    """One add-on of the cluster's GPU stack (clusters/addons.py CATALOG), installed at provisioning."""

    class Status(models.TextChoices):
        INSTALLING = "installing"
        INSTALLED = "installed"
        FAILED = "failed"

    cluster = models.ForeignKey(Cluster, on_delete=models.CASCADE, related_name="addons")
    name = models.CharField(max_length=63)
    version = models.CharField(max_length=32)
    status = models.CharField(max_length=16, choices=Status.choices, default=Status.INSTALLING)
    message = models.CharField(max_length=300, blank=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["cluster", "pk"]
        constraints = [models.UniqueConstraint(fields=["cluster", "name"], name="uniq_addon_per_cluster")]

    def __str__(self) -> str:
        return f"{self.name} {self.version}"
