"""Forms of the dashboard. They parse and check input shapes; the services own the domain rules."""

from django import forms
from django.db.models import Q
from django.utils import timezone

from clusters.filters import ClusterFilter
from clusters.models import Cluster, KubernetesVersion, Region, dns_label
from nodepools.models import DriverRelease, GpuModel, NodePool, SharingMode
from nvke.errors import DomainError


def add_domain_error(form: forms.Form, error: DomainError) -> None:
    """Show a service's error next to the field it names, or above the form when it names none."""
    field = error.field if error.field in form.fields else None
    form.add_error(field, error.message)


class ClusterCreateForm(forms.Form):
    name = forms.CharField(
        max_length=63,
        validators=[dns_label],
        help_text="Lower-case letters, digits and '-', e.g. training-prod.",
    )
    kubernetes_version = forms.ModelChoiceField(
        queryset=KubernetesVersion.objects.filter(enabled=True), to_field_name="version", empty_label=None
    )
    region = forms.ModelChoiceField(
        queryset=Region.objects.filter(enabled=True), to_field_name="name", empty_label=None
    )
    control_plane_nodes = forms.TypedChoiceField(
        choices=[(1, "1"), (3, "3 (highly available)")], coerce=int, initial=3, label="Control plane nodes"
    )

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        default = KubernetesVersion.objects.filter(enabled=True, is_default=True).first()
        if default is not None:
            self.fields["kubernetes_version"].initial = default.version
        self.fields["region"].label_from_instance = lambda region: f"{region.display_name} ({region.name})"


def _driver_label(driver: DriverRelease) -> str:
    return (
        f"{driver.version} (R{driver.branch} {driver.get_branch_type_display()}, CUDA {driver.cuda_version})"
    )


class PoolCreateForm(forms.Form):
    name = forms.CharField(max_length=63, validators=[dns_label], help_text="Unique within the cluster.")
    gpu_model = forms.ModelChoiceField(
        queryset=GpuModel.objects.all(), to_field_name="name", empty_label=None, label="GPU model"
    )
    gpus_per_node = forms.IntegerField(min_value=1, max_value=8, initial=8, label="GPUs per node")
    node_count = forms.IntegerField(min_value=0, initial=1, label="Nodes", help_text="Desired node count.")
    min_nodes = forms.IntegerField(min_value=0, initial=0, label="Minimum nodes")
    max_nodes = forms.IntegerField(min_value=0, initial=4, label="Maximum nodes")
    driver_release = forms.ModelChoiceField(
        queryset=DriverRelease.objects.filter(enabled=True),
        to_field_name="version",
        empty_label=None,
        label="Driver",
    )
    sharing_mode = forms.ChoiceField(choices=SharingMode.choices, initial=SharingMode.EXCLUSIVE)
    mig_layout = forms.CharField(
        required=False,
        label="MIG layout",
        help_text="Comma-separated MIG profiles created on every GPU, e.g. 3g.40gb, 3g.40gb (mig mode only).",
    )

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        # Branches past end of life are refused by the service anyway; do not offer them.
        today = timezone.localdate()
        drivers = self.fields["driver_release"]
        drivers.queryset = drivers.queryset.filter(
            Q(branch_end_of_life__isnull=True) | Q(branch_end_of_life__gt=today)
        )
        drivers.label_from_instance = _driver_label

    def clean_mig_layout(self) -> list[str]:
        return [name.strip() for name in self.cleaned_data["mig_layout"].split(",") if name.strip()]


class PoolScaleForm(forms.Form):
    node_count = forms.IntegerField(min_value=0, label="Nodes")

    def __init__(self, *args, pool: NodePool, **kwargs):
        super().__init__(*args, initial={"node_count": pool.node_count}, **kwargs)
        # The bounds show in the browser; the service checks them again.
        field = self.fields["node_count"]
        field.widget.attrs.update(min=pool.min_nodes, max=pool.max_nodes)
        field.help_text = f"Between {pool.min_nodes} and {pool.max_nodes}."


class TenantSwitchForm(forms.Form):
    tenant = forms.IntegerField()


def cluster_filter(data, queryset) -> ClusterFilter:
    """The API's ClusterFilter, with selects instead of free text where the catalog knows the values."""
    filterset = ClusterFilter(data, queryset=queryset)
    fields = filterset.form.fields
    fields["status"].empty_label = "Any status"
    fields["status"].widget.choices = [("", "Any status"), *Cluster.Status.choices]
    fields["region"].widget = forms.Select(
        choices=[("", "Any region"), *Region.objects.filter(enabled=True).values_list("name", "name")]
    )
    fields["kubernetes_version"].widget = forms.Select(
        choices=[("", "Any version"), *KubernetesVersion.objects.values_list("version", "version")]
    )
    fields["kubernetes_version"].label = "Kubernetes"
    fields["region"].label = "Region"
    fields["name"].label = "Name"
    fields["name"].widget.attrs["placeholder"] = "Part of a name"
    return filterset
