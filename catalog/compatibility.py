"""Which drivers, sharing modes and MIG layouts a GPU model admits, and which node images a pool's driver
and sharing mode admit. Each refusal names its rule."""

import datetime
import re
from dataclasses import dataclass

from django.utils import timezone

from catalog.mig import Profile, place_layout
from catalog.models import DriverRelease, GpuModel, NodeImage, SharingMode
from catalog.versions import version_key
from nvke.agent.preflight import MIN_KERNEL, checks
from nvke.errors import DomainError

CUDA_VERSION = re.compile(r"[0-9]+(?:\.[0-9]+)*")  # "12.8", or a bare major: "12"
# The same rule for the API schema, so that what it calls valid is what is taken.
CUDA_PARAMETER = {"type": "string", "pattern": "^([0-9]+(\\.[0-9]+)*)?$"}


@dataclass(frozen=True)
class Refusal:
    rule: str
    message: str


def cuda_refusal(driver: DriverRelease, cuda: str, releases: list[DriverRelease]) -> Refusal | None:
    """A driver runs CUDA up to its own `cuda_version` natively; name the lowest branch that runs `cuda`."""
    if cuda and not CUDA_VERSION.fullmatch(cuda):
        raise DomainError(f"cuda {cuda!r} is not a version like 12.8.", field="cuda", code="invalid_version")
    if not cuda or version_key(driver.cuda_version) >= version_key(cuda):
        return None
    branches = sorted(r.branch for r in releases if version_key(r.cuda_version) >= version_key(cuda))
    needs = f"≥ {branches[0]}" if branches else "a newer driver than the catalog has"
    return Refusal(
        "cuda_minimum",
        f"CUDA {cuda} needs {needs}; driver {driver.version} supports CUDA {driver.cuda_version}.",
    )


def driver_refusals(
    driver: DriverRelease, gpu_model: GpuModel, sharing_mode: str, today: datetime.date | None = None
) -> list[Refusal]:
    """Why `driver` cannot run `gpu_model` in `sharing_mode`; empty when it can."""
    today = today or timezone.localdate()
    refusals = []
    arch = gpu_model.architecture
    if not driver.enabled:
        refusals.append(
            Refusal("driver_disabled", f"Driver {driver.version} is not offered by this platform.")
        )
    if not any(a.pk == arch.pk for a in driver.architectures.all()):
        refusals.append(
            Refusal(
                "architecture",
                f"Driver branch {driver.branch} ({driver.version}) does not support {arch.name}.",
            )
        )
    if version_key(driver.version) < version_key(gpu_model.min_driver_version):
        refusals.append(
            Refusal(
                "gpu_minimum",
                f"{gpu_model.display_name} needs driver {gpu_model.min_driver_version} or newer; "
                f"{driver.version} is older.",
            )
        )
    if (
        sharing_mode == SharingMode.MIG
        and gpu_model.mig_min_driver_version
        and version_key(driver.version) < version_key(gpu_model.mig_min_driver_version)
    ):
        refusals.append(
            Refusal(
                "mig_minimum",
                f"MIG on {gpu_model.display_name} needs driver {gpu_model.mig_min_driver_version} or newer.",
            )
        )
    if driver.branch_end_of_life and driver.branch_end_of_life <= today:
        refusals.append(
            Refusal(
                "end_of_life",
                f"Driver branch {driver.branch} reached end of life on {driver.branch_end_of_life:%Y-%m-%d}.",
            )
        )
    return refusals


def sharing_refusal(gpu_model: GpuModel, sharing_mode: str) -> Refusal | None:
    if sharing_mode == SharingMode.MIG and not gpu_model.supports_mig:
        return Refusal("mig_unsupported", f"{gpu_model.display_name} does not support MIG.")
    return None


def mig_layout_refusal(gpu_model: GpuModel, layout: list[str]) -> Refusal | None:
    """A layout is a list of profile names created on every GPU; it must fit by the placement rules."""
    profiles = {
        p.name: Profile(p.name, p.compute_slices, p.memory_slices, tuple(p.placements), p.max_instances)
        for p in gpu_model.mig_profiles.all()
    }
    unknown = [name for name in layout if name not in profiles]
    if unknown:
        return Refusal(
            "unknown_mig_profile",
            f"{gpu_model.display_name} has no MIG profile {unknown[0]!r}; "
            f"it has {', '.join(sorted(profiles))}.",
        )
    if layout and place_layout([profiles[n] for n in layout], list(profiles.values())) is None:
        return Refusal("mig_layout_does_not_fit", f"MIG layout {' + '.join(layout)} does not fit on one GPU.")
    return None


def image_refusals(image: NodeImage, driver: DriverRelease, sharing_mode: str) -> list[Refusal]:
    """Why a pool on `driver` in `sharing_mode` cannot run on machines of `image`; empty when it can: the
    kernel a sharing mode needs, and a preinstalled driver that must be the pool's own (the GPU Operator
    does not replace a driver on the host)."""
    refusals = []
    if not image.enabled:
        refusals.append(Refusal("image_disabled", f"Image {image.name} is not offered by this platform."))
    facts = {"kernel_version": image.kernel_version}
    if any(c.name == "kernel_version" and c.ok is False for c in checks(facts, sharing_mode)):
        refusals.append(
            Refusal(
                "kernel_too_old",
                f"Image {image.name} runs kernel {image.kernel_version}: {sharing_mode} sharing needs kernel "
                f"≥ {MIN_KERNEL}.",
            )
        )
    if image.driver_release_id is not None and image.driver_release_id != driver.pk:
        refusals.append(
            Refusal(
                "image_driver",
                f"Image {image.name} preinstalls driver {image.driver_release}, not the pool's "
                f"{driver.version}: choose an image without a preinstalled driver, or move the driver with "
                "it.",
            )
        )
    return refusals


def driver_compatibility(
    gpu_model: GpuModel, sharing_mode: str, cuda: str = ""
) -> list[tuple[DriverRelease, list[Refusal]]]:
    """Every driver release with why it cannot run this GPU (empty list: it can), newest first; with
    `cuda`, also why it cannot run that CUDA version (the rule a pool's driver-options apply)."""
    drivers = list(DriverRelease.objects.prefetch_related("architectures").select_related())
    rows = []
    for driver in drivers:
        refusals = driver_refusals(driver, gpu_model, sharing_mode)
        if refusal := cuda_refusal(driver, cuda, drivers):
            refusals.append(refusal)
        rows.append((driver, refusals))
    return rows
