"""The management cluster the Cluster API provider provisions in: one row, edited in the admin."""

import re

from django.core.exceptions import ValidationError
from django.core.validators import RegexValidator
from django.db import models

from nvke.encryption import EncryptedTextField

KIND_NAME = RegexValidator(
    r"^[A-Za-z][-A-Za-z0-9]*/[a-z0-9]([-a-z0-9.]*[a-z0-9])?$",
    "Give Kind/name, e.g. Metal3ClusterTemplate/gpu.",
)
API_VERSION = RegexValidator(
    r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?/v[0-9]+((alpha|beta)[0-9]+)?$",
    "Give group/version, e.g. infrastructure.cluster.x-k8s.io/v1beta2.",
)


def validate_releases(value) -> None:
    """{"1.34": "v1.34.2"}: a catalog minor version to the release of that minor."""
    if not isinstance(value, dict):
        raise ValidationError('Give an object such as {"1.34": "v1.34.2"}.')
    for minor, release in value.items():
        if not (
            isinstance(release, str)
            and re.fullmatch(r"\d+\.\d+", minor)
            and re.fullmatch(rf"v?{re.escape(minor)}\.\d+", release)
        ):
            raise ValidationError(
                f"{minor!r}: {release!r} is not a release of Kubernetes {minor} (v{minor}.N)."
            )


class ManagementCluster(models.Model):
    """Where and from what NVKE's clusters are made: a Cluster API management cluster (its kubeconfig,
    encrypted), the namespace NVKE's objects live in, and the operator's infrastructure templates."""

    kubeconfig = EncryptedTextField(
        blank=True,
        help_text="kubeconfig of the management cluster (encrypted; never shown). Empty: the file "
        "NVKE_CAPI_KUBECONFIG names. Its user needs the rights of docs/operations.md's Cluster API section.",
    )
    namespace = models.CharField(
        max_length=63, default="nvke", help_text="Namespace of NVKE's Cluster API objects (it must exist)."
    )
    infrastructure_api_version = models.CharField(
        max_length=253,
        validators=[API_VERSION],
        help_text="apiVersion of the infrastructure provider's kinds, e.g. "
        "infrastructure.cluster.x-k8s.io/v1beta2.",
    )
    cluster_template = models.CharField(
        max_length=253,
        validators=[KIND_NAME],
        help_text="Kind/name of the infrastructure cluster template every cluster's infrastructure is made "
        "from, e.g. Metal3ClusterTemplate/gpu-cloud.",
    )
    control_plane_machine_template = models.CharField(
        max_length=253,
        validators=[KIND_NAME],
        help_text="Kind/name of the infrastructure machine template of control-plane machines. GPU pools "
        "use the machine template of the same kind labelled nvke.io/gpu-model=<GPU model name> and "
        "nvke.io/node-image=<the pool's node image> (or, for the infrastructure's own image, no "
        "node-image label).",
    )
    kubernetes_versions = models.JSONField(
        default=dict,
        blank=True,
        validators=[validate_releases],
        help_text="The release each catalog minor version runs, as the machine images have it: "
        '{"1.34": "v1.34.2"}.',
    )
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        verbose_name = "management cluster"

    def __str__(self) -> str:
        return f"Cluster API management cluster (namespace {self.namespace})"


class MachineReplacement(models.Model):
    """A node whose Machine NVKE deleted to have it replaced (ClusterAPIOperations.replace_node): the
    MachineDeployment that makes its successor and the Machines it had then, so that the successor is a
    Machine that was not there yet. Kept with the cluster (removed when it is deleted): the old node's
    name is how a run keeps asking after its successor until it follows it."""

    cluster = models.CharField(max_length=63, help_text="The Cluster API Cluster's name.")
    node = models.CharField(max_length=253, help_text="The node whose Machine was deleted.")
    deployment = models.CharField(max_length=253, help_text="Its MachineDeployment.")
    machines_before = models.JSONField(default=list, help_text="The deployment's Machines then.")
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["cluster", "node"], name="machine_replacement_unique_node")
        ]

    def __str__(self) -> str:
        return f"{self.cluster}/{self.node} (replaced)"
