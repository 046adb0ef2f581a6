"""Which driver releases a pool may move to, and for each refused one every rule it breaks. Builds on
nodepools.compatibility (architecture, GPU floor, MIG floor, end of life, disabled) and adds the rules
that only an upgrade has: the release the pool already runs, and a CUDA version the tenant needs."""

import re

from nodepools.compatibility import Refusal, driver_refusals
from nodepools.models import DriverRelease, NodePool
from nodepools.versions import version_key
from nvke.errors import DomainError

CUDA_VERSION = re.compile(r"[0-9]+(?:\.[0-9]+)*")  # "12.8", or a bare major: "12"
ROLLBACK_EXEMPT = {"end_of_life", "driver_disabled"}  # going back to what ran before is allowed


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
