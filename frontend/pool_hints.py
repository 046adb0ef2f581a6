"""Hints of the node-pool form: for every GPU model, which offered drivers fit it (and why the others do
not) and which sharing modes it allows; and what the tenant may get of each in the cluster's region.
Embedded in the page as JSON; pool_form.js shows the chosen model's hints, greys out what does not fit
and warns while the pool asks for more GPUs than the tenant may get. The service checks the same rules
again, and the view asks before creating a pool that would wait for GPUs."""

from django.db.models import Prefetch, QuerySet

from catalog.compatibility import driver_refusals, sharing_refusal
from catalog.models import DriverRelease, GpuModel, MigProfile, SharingMode
from clusters.models import Cluster
from nodepools.capacity import offers
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


BOUND = {  # what limits what a tenant may get now (nodepools.capacity.Offer.limited_by)
    "quota": "what your GPU quota leaves",
    "capacity": "the GPUs free in the region now",
    "fair_share": "your fair share while other tenants wait for these GPUs",
}


def capacity_hints(cluster: Cluster, tenant_id: int) -> dict | None:
    """GPU model name -> what the tenant may add of it in the cluster's region now (the figures of
    `regions/`), for the form's labels and warnings; None where region inventory does not apply (an
    attached cluster brings its own nodes). A model the region has none of is absent."""
    if cluster.attached or cluster.region_id is None:
        return None
    return {
        offer.gpu_model: {
            "available_gpus": offer.available_gpus,
            "quota_left_gpus": offer.quota_left_gpus,
            "bound": BOUND[offer.limited_by],
        }
        for offer in offers(cluster.region_id, tenant_id)
    }


def shortfall(region: str, model: GpuModel, hint: dict | None, gpus_per_node: int, node_count: int) -> str:
    """Why a pool of `node_count` nodes would not get them all now; "" when it would."""
    if node_count == 0:
        return ""
    if hint is None:
        return f"Region {region} has no {model.display_name} GPUs: the pool's nodes would wait pending."
    asked, available = gpus_per_node * node_count, hint["available_gpus"]
    if asked <= available:
        return ""
    waiting = node_count - available // gpus_per_node
    return (
        f"This pool asks for {asked} {model.display_name} GPUs; you may get {available} in {region} now "
        f"({hint['bound']}): {waiting} of its {node_count} nodes would wait pending."
    )
