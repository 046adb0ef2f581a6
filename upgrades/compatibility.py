"""Which driver releases a pool may move to, and for each refused one every rule it breaks. Builds on
catalog.compatibility (architecture, GPU floor, MIG floor, end of life, disabled, the CUDA version the
tenant needs) and adds the rules that only an upgrade has: the release the pool already runs, and the
driver its node image preinstalls. Which Kubernetes versions and node images a pool may move to:
clusters.skew's rules and catalog.compatibility's image rules, on a cluster whose machines NVKE makes
and whose provider replaces them one at a time."""

from catalog.compatibility import Refusal, cuda_refusal, driver_refusals, image_refusals
from catalog.models import DriverRelease, KubernetesVersion, NodeImage
from clusters import skew
from clusters.services import cluster_ref
from nodepools.models import NodePool
from nvke.providers import operations_type

ROLLBACK_EXEMPT = {"end_of_life", "driver_disabled"}  # going back to what ran before is allowed


def upgrade_refusals(
    pool: NodePool,
    driver: DriverRelease,
    cuda: str = "",
    releases: list[DriverRelease] | None = None,
    rollback: bool = False,
) -> list[Refusal]:
    """Why `pool` cannot move to `driver`; empty when it can."""
    refusals = driver_refusals(driver, pool.gpu_model, pool.sharing_mode)
    if rollback:
        refusals = [r for r in refusals if r.rule not in ROLLBACK_EXEMPT]
    if driver.pk == pool.driver_release_id:
        refusals.insert(0, Refusal("same_release", f"The pool already runs driver {driver.version}."))
    elif pool.node_image is not None:
        refusals += [
            r for r in image_refusals(pool.node_image, driver, pool.sharing_mode) if r.rule == "image_driver"
        ]
    if refusal := cuda_refusal(
        driver, cuda, releases if releases is not None else list(DriverRelease.objects.all())
    ):
        refusals.append(refusal)
    return refusals


def driver_options(pool: NodePool, cuda: str = "") -> list[tuple[DriverRelease, list[Refusal]]]:
    """Every release in the catalog with why the pool cannot move to it (empty: it can), newest first."""
    releases = list(DriverRelease.objects.prefetch_related("architectures"))
    return [(driver, upgrade_refusals(pool, driver, cuda, releases)) for driver in releases]


def _machines_refusal(pool: NodePool) -> Refusal | None:
    """Why NVKE cannot replace the pool's machines: an attached cluster's are its owner's; some providers
    cannot replace them one at a time yet."""
    cluster = pool.cluster
    if cluster.attached or cluster.kubernetes_version is None or not pool.kubernetes_version:
        return Refusal(
            "not_managed",
            f"Cluster {cluster.name} is attached: its machines, their image and the Kubernetes they run "
            "are its owner's to upgrade, not NVKE's.",
        )
    if not operations_type(cluster_ref(cluster)).replaces_nodes:
        return Refusal(
            "not_supported",
            f"Cluster {cluster.name}'s provider cannot replace a pool's machines one at a time yet: "
            "upgrade its pools in the management cluster.",
        )
    return None


def kubernetes_refusal(pool: NodePool, version: str, catalog: set[str] | None = None) -> Refusal | None:
    """Why `pool` cannot move to Kubernetes `version` (a minor, 1.35); None when it can. `catalog`: the
    catalog's versions, when the caller has them."""
    cluster = pool.cluster
    if refusal := _machines_refusal(pool):
        return refusal
    if catalog is None:
        catalog = set(KubernetesVersion.objects.values_list("version", flat=True))
    if version not in catalog:
        return Refusal("unknown_version", f"Kubernetes {version!r} is not in the catalog.")
    if cluster.kubernetes_target_id is not None:
        return Refusal(
            "control_plane_upgrading",
            f"Cluster {cluster.name}'s control plane is being upgraded; upgrade the pool once it is done.",
        )
    return skew.pool_refusal(cluster.kubernetes_version.version, pool.kubernetes_version, version, pool.name)


def kubernetes_options(pool: NodePool) -> list[tuple[str, Refusal | None]]:
    """Every catalog version with why the pool cannot move to it (None: it can), newest first."""
    catalog = list(KubernetesVersion.objects.values_list("version", flat=True))
    ordered = sorted(catalog, key=skew.minor_of, reverse=True)
    return [(version, kubernetes_refusal(pool, version, set(catalog))) for version in ordered]


def image_options(pool: NodePool) -> list[tuple[NodeImage, list[Refusal]]]:
    """Every catalog image with why the pool cannot move to it (empty: it can), newest first."""
    machines = _machines_refusal(pool)
    options = []
    for image in NodeImage.objects.select_related("driver_release"):
        refusals = [machines] if machines else []
        if image.pk == pool.node_image_id:
            refusals.append(Refusal("same_image", f"The pool already runs image {image.name}."))
        refusals += image_refusals(image, pool.driver_release, pool.sharing_mode)
        options.append((image, refusals))
    return options
