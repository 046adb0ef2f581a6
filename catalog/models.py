"""The catalog operators keep: GPU architectures and models, MIG profiles, driver releases, node
images, Kubernetes versions, regions and the GPUs each region has. Everyone reads it; it reads no
other app. The tables keep the names they had in nodepools and clusters (`db_table`), so no data
moved when the catalog became an app of its own."""

from django.core.exceptions import ValidationError
from django.db import models
from packaging.version import Version

from catalog.versions import is_valid_version, version_key
from nvke.models import dns_label


def validate_version(value: str) -> None:
    if not is_valid_version(value):
        raise ValidationError(f"{value!r} is not a dotted numeric version like 570.133.20.")


class Architecture(models.Model):
    """A GPU architecture (Turing, Ampere, Hopper, ...), the unit drivers declare support for."""

    name = models.CharField(max_length=32, unique=True)
    compute_capabilities = models.CharField(max_length=32, help_text="e.g. 8.0, 8.6")

    class Meta:
        db_table = "nodepools_architecture"
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
        db_table = "nodepools_gpumodel"
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
        db_table = "nodepools_migprofile"
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
    architectures = models.ManyToManyField(
        Architecture, related_name="driver_releases", db_table="nodepools_driverrelease_architectures"
    )
    enabled = models.BooleanField(default=True, help_text="Offered for new pools and upgrades.")

    class Meta:
        db_table = "nodepools_driverrelease"
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
        db_table = "nodepools_nodeimage"
        ordering = ["-release_date", "name"]

    def __str__(self) -> str:
        return self.name


class RegionInventory(models.Model):
    """How many GPUs of a model a region has. Pools draw nodes from it until it runs out."""

    region = models.ForeignKey("Region", on_delete=models.CASCADE, related_name="inventory")
    gpu_model = models.ForeignKey(GpuModel, on_delete=models.CASCADE, related_name="inventory")
    total_gpus = models.PositiveIntegerField()

    class Meta:
        db_table = "nodepools_regioninventory"
        verbose_name_plural = "region inventory"
        ordering = ["region", "gpu_model"]
        constraints = [models.UniqueConstraint(fields=["region", "gpu_model"], name="uniq_region_gpu_model")]

    def __str__(self) -> str:
        return f"{self.region}: {self.total_gpus} × {self.gpu_model.name}"


class SharingMode(models.TextChoices):
    EXCLUSIVE = "exclusive"
    TIME_SLICING = "time-slicing"
    MPS = "mps"
    MIG = "mig"
    FRACTIONAL = "fractional"


class KubernetesVersion(models.Model):
    """A Kubernetes minor version tenants may run (catalog)."""

    version = models.CharField(max_length=16, unique=True, help_text="Minor version, e.g. 1.34")
    enabled = models.BooleanField(default=True, help_text="Offered for new clusters.")
    is_default = models.BooleanField(default=False)
    end_of_support = models.DateField(null=True, blank=True)

    class Meta:
        db_table = "clusters_kubernetesversion"
        ordering = ["-version"]

    def __str__(self) -> str:
        return self.version


class Region(models.Model):
    """A place clusters run in; its GPU inventory (per model) is finite."""

    name = models.CharField(max_length=32, unique=True, validators=[dns_label])
    display_name = models.CharField(max_length=100)
    enabled = models.BooleanField(default=True)

    class Meta:
        db_table = "clusters_region"
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name
