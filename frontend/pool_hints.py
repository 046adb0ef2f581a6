"""Compatibility hints of the node-pool form: for every GPU model, which offered drivers fit it (and why
the others do not) and which sharing modes it allows. Embedded in the page as JSON; pool_form.js shows
the chosen model's hints and greys out what does not fit. The service checks the same rules again."""

from django.db.models import Prefetch, QuerySet

from nodepools.compatibility import driver_refusals, sharing_refusal
from nodepools.models import DriverRelease, GpuModel, MigProfile, SharingMode
from nvke.quantity import human_mib


def _driver_fit(drivers: list[DriverRelease], model: GpuModel, sharing_mode: str) -> dict[str, list[str]]:
    """Driver version -> the reasons it cannot run `model` in `sharing_mode` (empty: it fits)."""
    return {
        driver.version: [refusal.message for refusal in driver_refusals(driver, model, sharing_mode)]
        for driver in drivers
    }


def pool_hints(drivers: QuerySet[DriverRelease]) -> dict[str, dict]:
    """GPU model name -> its hints, over the drivers the form offers."""
    offered = list(drivers.prefetch_related("architectures"))
    models = GpuModel.objects.select_related("architecture").prefetch_related(
        Prefetch("mig_profiles", queryset=MigProfile.objects.order_by("-memory_slices", "name"))
    )
    hints = {}
    for model in models:
        sharing = {}
        for mode in SharingMode.values:
            refusal = sharing_refusal(model, mode)
            sharing[mode] = refusal.message if refusal else ""
        hints[model.name] = {
            "display_name": model.display_name,
            "summary": (
                f"{human_mib(model.memory_mib)} per GPU, {model.get_form_factor_display()}"
                f"{', NVLink' if model.nvlink else ''}; up to {model.max_gpus_per_node} GPUs per node; "
                f"needs driver {model.min_driver_version} or newer"
            ),
            "max_gpus_per_node": model.max_gpus_per_node,
            "sharing": sharing,
            "mig_profiles": [profile.name for profile in model.mig_profiles.all()],
            # MIG can need a newer driver than the GPU itself; every other mode has the same rules.
            "drivers": {
                "mig": _driver_fit(offered, model, SharingMode.MIG),
                "other": _driver_fit(offered, model, SharingMode.EXCLUSIVE),
            },
        }
    return hints
