"""Which driver releases a pool may move to, and for each refused one every rule it breaks. Builds on
nodepools.compatibility (architecture, GPU floor, MIG floor, end of life, disabled, the CUDA version the
tenant needs) and adds the rule that only an upgrade has: the release the pool already runs."""

from nodepools.compatibility import Refusal, cuda_refusal, driver_refusals
from nodepools.models import DriverRelease, NodePool

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
    if refusal := cuda_refusal(
        driver, cuda, releases if releases is not None else list(DriverRelease.objects.all())
    ):
        refusals.append(refusal)
    return refusals


def driver_options(pool: NodePool, cuda: str = "") -> list[tuple[DriverRelease, list[Refusal]]]:
    """Every release in the catalog with why the pool cannot move to it (empty: it can), newest first."""
    releases = list(DriverRelease.objects.prefetch_related("architectures"))
    return [(driver, upgrade_refusals(pool, driver, cuda, releases)) for driver in releases]
