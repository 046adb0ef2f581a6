"""Forms of the dashboard. They parse and check input shapes; the services own the domain rules."""

from dataclasses import asdict

from django import forms
from django.db.models import Prefetch, Q
from django.utils import timezone

from catalog.models import DriverRelease, GpuModel, KubernetesVersion, MigProfile, Region, SharingMode
from claims.filtersets import ClaimFilter
from claims.models import Claim
from clusters.filtersets import ClusterFilter
from clusters.models import Cluster, dns_label
from nodepools.models import NodePool
from nodepools.sharing import MAX_OVERSUBSCRIPTION_PERCENT
from nvke.errors import DomainError
from nvke.quantity import parse_mib
from telemetry.models import RESCALING_BOUNDS
from telemetry.policy import Policy

from .user_words import form_field, in_form_words


def add_domain_error(form: forms.Form, error: DomainError) -> None:
    """Show a service's error next to the field it names, or above the form when it names none, in the
    form's words (user_words)."""
    field = form_field(form, error.field)
    form.add_error(field, in_form_words(form, error.message))


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


class ClusterAttachForm(forms.Form):
    """A running cluster to attach: its kubeconfig file, or endpoint, token and CA bundle."""

    name = forms.CharField(
        max_length=63, validators=[dns_label], help_text="How NVKE names it, e.g. on-prem-a."
    )
    kubeconfig = forms.FileField(
        required=False,
        help_text="A kubeconfig whose current context uses NVKE's service account token. Or fill in the "
        "three fields below instead.",
    )
    endpoint = forms.URLField(
        required=False, assume_scheme="https", label="API endpoint", help_text="e.g. https://10.0.0.1:6443"
    )
    token = forms.CharField(
        required=False,
        widget=forms.PasswordInput(render_value=True),  # a refused attach keeps it for the next try
        label="Bearer token",
        help_text="NVKE's service account token.",
    )
    ca_bundle = forms.CharField(
        required=False,
        widget=forms.Textarea(attrs={"rows": 4}),
        label="CA bundle (PEM)",
        help_text="The CA that signs the endpoint's certificate; empty when it is publicly trusted.",
    )

    def clean(self):
        data = super().clean()
        if data.get("kubeconfig"):
            if data.get("endpoint") or data.get("token"):
                raise forms.ValidationError("Give a kubeconfig or an endpoint and token, not both.")
        else:
            for field in ("endpoint", "token"):
                if not data.get(field):
                    self.add_error(field, "Required without a kubeconfig.")
        return data


def driver_label(driver: DriverRelease) -> str:
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
    node_selector = forms.CharField(
        required=False,
        label="Node selector",
        help_text="Labels a node must carry to join the pool, e.g. zone=a, team=ml. NVKE adopts Ready nodes "
        "with this GPU model and count, and labels and taints them nvke.io/pool.",
    )
    compute_oversubscription_percent = forms.IntegerField(
        required=False,
        min_value=100,
        max_value=MAX_OVERSUBSCRIPTION_PERCENT,
        label="Compute ceilings may add up to (%)",
        help_text="Per GPU, for time-slicing, MPS and fractional pools. Empty: the mode's default "
        "(200% for time-slicing and MPS, 100% otherwise).",
    )
    default_guaranteed_percent = forms.IntegerField(
        required=False,
        min_value=0,
        max_value=100,
        label="Default guaranteed compute (%)",
        help_text="For claims that name none, at most their ceiling. Empty: the mode's default (10% for "
        "time-slicing and MPS, the claim's ceiling for fractional).",
    )
    wait_for_capacity = forms.BooleanField(
        required=False,
        label="Create it even if some nodes must wait for GPUs",
        help_text="Nodes the region cannot give you now wait pending, and come as GPUs free up.",
    )

    def __init__(self, *args, attached: bool = False, capacity: dict | None = None, **kwargs):
        super().__init__(*args, **kwargs)
        if not attached:  # NVKE makes the nodes of a cluster it provisioned: there is nothing to select
            del self.fields["node_selector"]
        if capacity is None:  # an attached cluster's own nodes: no region inventory to wait for
            del self.fields["wait_for_capacity"]
        else:
            self.fields["gpu_model"].label_from_instance = lambda model: (
                f"{model.display_name} ({capacity[model.name]['available_gpus']} GPUs available to you)"
                if model.name in capacity
                else f"{model.display_name} (none in this region)"
            )
        # Branches past end of life are refused by the service anyway; do not offer them.
        today = timezone.localdate()
        drivers = self.fields["driver_release"]
        drivers.queryset = drivers.queryset.filter(
            Q(branch_end_of_life__isnull=True) | Q(branch_end_of_life__gt=today)
        )
        drivers.label_from_instance = driver_label

    def clean_mig_layout(self) -> list[str]:
        return [name.strip() for name in self.cleaned_data["mig_layout"].split(",") if name.strip()]

    def pool_fields(self) -> dict:
        """The cleaned data as `create_pool` takes it; an empty sharing-policy field: the mode's default."""
        policy = ("compute_oversubscription_percent", "default_guaranteed_percent")
        return {
            k: v
            for k, v in self.cleaned_data.items()
            if k != "wait_for_capacity" and (k not in policy or v is not None)
        }

    def clean_node_selector(self) -> dict[str, str]:
        pairs = [pair.strip() for pair in self.cleaned_data["node_selector"].split(",") if pair.strip()]
        if bad := [pair for pair in pairs if "=" not in pair]:
            raise forms.ValidationError(f"{bad[0]!r} is not key=value.")
        return dict((key.strip(), value.strip()) for key, _, value in (pair.partition("=") for pair in pairs))


class PoolScaleForm(forms.Form):
    node_count = forms.IntegerField(min_value=0, label="Nodes")

    def __init__(self, *args, pool: NodePool, **kwargs):
        super().__init__(*args, initial={"node_count": pool.node_count}, **kwargs)
        # The bounds show in the browser; the service checks them again.
        field = self.fields["node_count"]
        field.widget.attrs.update(min=pool.min_nodes, max=pool.max_nodes)
        field.help_text = f"Between {pool.min_nodes} and {pool.max_nodes}."


class PoolAutoscalingForm(forms.Form):
    """The pool's autoscaler: on or off, its bounds and scale-down delay (the service checks them)."""

    autoscaling = forms.BooleanField(
        required=False,
        label="Autoscale",
        help_text="Add nodes for pending claims a new node would fit; remove nodes that hold no claim.",
    )
    min_nodes = forms.IntegerField(min_value=0, label="Minimum nodes")
    max_nodes = forms.IntegerField(min_value=0, label="Maximum nodes")
    scale_down_delay_s = forms.IntegerField(
        min_value=1,
        label="Scale-down delay (seconds)",
        help_text="How long a node holds no claim before it goes.",
    )

    def __init__(self, *args, pool: NodePool, **kwargs):
        initial = {name: getattr(pool, name) for name in self.base_fields}
        super().__init__(*args, initial=initial, **kwargs)


class PoolRescalingForm(forms.Form):
    """A pool's dynamic rescaling policy (telemetry.policy). The whole policy is posted; the service
    checks the bounds and that the idle threshold is below the pressure threshold."""

    enabled = forms.BooleanField(
        required=False,
        label="Grow claims under pressure",
        help_text="Off: claims never grow; grown ones still shrink back when idle.",
    )
    pressure_percent = forms.IntegerField(label="Pressure threshold (% of a claim's share)")
    pressure_s = forms.IntegerField(label="Pressure lasting (seconds)")
    max_growth_percent = forms.IntegerField(label="Grow up to (% of the request)")
    idle_percent = forms.IntegerField(label="Idle threshold (% of a claim's share)")
    idle_s = forms.IntegerField(label="Idle lasting (seconds)")

    GROWTH = ("enabled", "pressure_percent", "pressure_s", "max_growth_percent")
    SHRINKING = ("idle_percent", "idle_s")

    def __init__(self, *args, policy: Policy, **kwargs):
        super().__init__(*args, initial=asdict(policy), **kwargs)
        for name, (low, high) in RESCALING_BOUNDS.items():  # shown in the browser; the service checks
            self.fields[name].widget.attrs.update(min=low, max=high)
            self.fields[name].help_text = f"{low} to {high}."
        self.fields["idle_percent"].help_text += " Below the pressure threshold."

    def growth_fields(self) -> list:
        return [self[name] for name in self.GROWTH]

    def shrinking_fields(self) -> list:
        return [self[name] for name in self.SHRINKING]


def _cluster_mig_profiles(cluster: Cluster) -> list[tuple[str, str]]:
    """(name, label) of every MIG profile a claim can get in the cluster's MIG pools: a pool with a
    static layout offers only the profiles of its layout, an on-demand pool every profile of its GPU."""
    pools = cluster.node_pools.filter(sharing_mode=SharingMode.MIG).prefetch_related(
        Prefetch("gpu_model__mig_profiles", queryset=MigProfile.objects.order_by("-memory_slices", "name"))
    )
    offered: dict[str, list[str]] = {}
    for pool in pools.order_by("name"):
        for profile in pool.gpu_model.mig_profiles.all():
            if not pool.mig_layout or profile.name in pool.mig_layout:
                offered.setdefault(profile.name, []).append(pool.name)
    return [(name, f"{name} (pool {', '.join(where)})") for name, where in offered.items()]


class ClaimCreateForm(forms.Form):
    """A GPU claim. Which fields apply depends on the kind; the service says which one does not fit."""

    namespace = forms.CharField(max_length=63, validators=[dns_label], initial="default")
    name = forms.CharField(
        max_length=63, validators=[dns_label], help_text="Unique within the namespace, e.g. llm-infer."
    )
    kind = forms.ChoiceField(
        choices=Claim.Kind.choices,
        initial=Claim.Kind.FRACTION,
        help_text="Whole GPUs, one MIG slice, or a fraction of one GPU: its section below asks how much.",
    )
    pool = forms.ModelChoiceField(
        queryset=NodePool.objects.none(),
        required=False,
        empty_label="Any pool of the cluster",
        help_text="Place the claim only in this pool.",
    )
    gpus = forms.IntegerField(min_value=1, max_value=8, initial=1, label="GPUs", help_text="Whole GPUs only.")
    nvlink_required = forms.BooleanField(
        required=False, label="NVLink required", help_text="Whole GPUs on one NVLink domain."
    )
    mig_profile = forms.CharField(
        max_length=24, required=False, label="MIG profile", help_text="The slice to carve, e.g. 3g.40gb."
    )
    gpu_memory = forms.CharField(
        required=False,
        label="GPU memory",
        help_text="A quantity like 4Gi or 512Mi.",
        widget=forms.TextInput(attrs={"placeholder": "4Gi"}),
    )
    compute_percent = forms.IntegerField(
        min_value=1,
        max_value=100,
        required=False,
        label="Compute ceiling %",
        help_text="The most of the GPU's compute it may use (its limit).",
    )
    guaranteed_percent = forms.IntegerField(
        min_value=0,
        max_value=100,
        required=False,
        label="Guaranteed compute %",
        help_text="What it may always have (its request), at most the ceiling. Empty: the pool's default.",
    )
    allowed_models = forms.MultipleChoiceField(
        required=False,
        label="GPU models",
        help_text="Place it only on these GPU models (none chosen: any model of the cluster's pools).",
        widget=forms.CheckboxSelectMultiple,
    )
    min_isolation = forms.ChoiceField(
        choices=Claim._meta.get_field("min_isolation").choices,
        initial="none",
        required=False,  # as in the API: not given, any
        label="Isolation at least",
        help_text="Never placed with less: memory held needs an MPS pool (or a MIG slice or whole GPUs); "
        "a fraction is at most memory held, a MIG slice at most hard.",
    )
    training = forms.BooleanField(
        required=False,
        label="Training job",
        help_text="A pool whose upgrades wait for training claims keeps this claim's node from draining.",
    )
    cpu_milli = forms.IntegerField(min_value=0, initial=0, label="Host CPU (millicores)")
    host_memory_mib = forms.IntegerField(min_value=0, initial=0, label="Host memory (MiB)")
    priority = forms.IntegerField(
        min_value=-32768,
        max_value=32767,
        initial=0,
        help_text="Higher is placed first when capacity frees.",
    )
    non_preemptible = forms.BooleanField(
        required=False,
        label="Never preempt",
        help_text="A pending claim of higher priority may not take its GPUs.",
    )

    def __init__(self, *args, cluster: Cluster, **kwargs):
        super().__init__(*args, **kwargs)
        pool = self.fields["pool"]
        pool.queryset = cluster.node_pools.select_related("gpu_model").order_by("name")
        pool.label_from_instance = lambda p: f"{p.name} ({p.gpu_model.display_name}, {p.sharing_mode})"
        models = {p.gpu_model.name: p.gpu_model.display_name for p in pool.queryset}
        self.fields["allowed_models"].choices = sorted(models.items(), key=lambda item: item[1])
        profiles = _cluster_mig_profiles(cluster)
        if profiles:  # else free text: the claim may wait for a MIG pool to be added
            self.fields["mig_profile"].widget = forms.Select(choices=[("", "—"), *profiles])
            self.fields["mig_profile"].help_text = "Profiles of this cluster's MIG pools."

    def clean_gpu_memory(self) -> int | None:
        text = self.cleaned_data["gpu_memory"].strip()
        if not text:
            return None
        try:
            mib = parse_mib(text)
        except ValueError as error:
            raise forms.ValidationError(str(error)) from None
        if mib < 1:
            raise forms.ValidationError("Ask for at least 1Mi.")
        return mib

    def claim_fields(self) -> dict:
        """The cleaned data as `create_claim` takes it, without the sections of the other kinds (hidden
        in the browser, their values may linger there)."""
        data = dict(self.cleaned_data)
        data["gpu_memory_mib"] = data.pop("gpu_memory")
        data["preemptible"] = not data.pop("non_preemptible")
        data["min_isolation"] = data["min_isolation"] or "none"
        kind = data["kind"]
        if kind != Claim.Kind.WHOLE:
            data.update(gpus=1, nvlink_required=False)
        if kind != Claim.Kind.MIG:
            data["mig_profile"] = ""
        if kind != Claim.Kind.FRACTION:
            data.update(gpu_memory_mib=None, compute_percent=None, guaranteed_percent=None)
        return data


class TenantSwitchForm(forms.Form):
    tenant = forms.IntegerField()


RELEASED = "released"  # the claims page's status filter: released claims, from the audit log


def claim_filter(data, queryset, namespaces: list[str]) -> ClaimFilter:
    """The API's ClaimFilter on a cluster's claims page: its namespaces and the statuses, as selects."""
    filterset = ClaimFilter(data, queryset=queryset)
    for name in set(filterset.filters) - {"namespace", "status"}:
        del filterset.filters[name]
    fields = filterset.form.fields
    fields["namespace"].widget = forms.Select(
        choices=[("", "Any namespace"), *((ns, ns) for ns in namespaces)]
    )
    # Released claims are gone from the table; the audit log keeps them (frontend.views.claims).
    fields["status"].empty_label = "Any status"
    fields["status"].choices = [*Claim.Status.choices, (RELEASED, "Released")]
    fields["namespace"].label, fields["status"].label = "Namespace", "Status"
    return filterset


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
