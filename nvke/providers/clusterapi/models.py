"""The management cluster the Cluster API provider provisions in: one row, edited in the admin."""

from django.db import models

from nvke.encryption import EncryptedTextField


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
        help_text="apiVersion of the infrastructure provider's kinds, e.g. "
        "infrastructure.cluster.x-k8s.io/v1beta2.",
    )
    cluster_template = models.CharField(
        max_length=253,
        help_text="Kind/name of the infrastructure cluster template every cluster's infrastructure is made "
        "from, e.g. Metal3ClusterTemplate/gpu-cloud.",
    )
    control_plane_machine_template = models.CharField(
        max_length=253,
        help_text="Kind/name of the infrastructure machine template of control-plane machines. GPU pools "
        "use the machine template of the same kind labelled nvke.io/gpu-model=<GPU model name>.",
    )
    kubernetes_versions = models.JSONField(
        default=dict,
        blank=True,
        help_text="The release each catalog minor version runs, as the machine images have it: "
        '{"1.34": "v1.34.2"}.',
    )
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        verbose_name = "management cluster"

    def __str__(self) -> str:
        return f"Cluster API management cluster (namespace {self.namespace})"
