"""NVKE's GPU-sharing allocator: pure placement core (no Django). See fleet.place()."""

from catalog.mig import Profile, place_layout
from claims.allocation import gangs
from claims.allocation.defrag import ClaimMove, plan_defrag
from claims.allocation.fgd import Distribution, Workload
from claims.allocation.fleet import POLICIES, Fleet, PlacementCache, empty_fleet, fits_ever, place
from claims.allocation.state import (
    ISOLATION_LEVELS,
    ISOLATION_RANK,
    GpuState,
    MigSlice,
    NodeState,
    Placement,
    Request,
    Unplaceable,
    apply,
    invariant_violations,
    release,
)

__all__ = [
    "ISOLATION_LEVELS",
    "ISOLATION_RANK",
    "POLICIES",
    "Distribution",
    "Fleet",
    "GpuState",
    "MigSlice",
    "ClaimMove",
    "NodeState",
    "Placement",
    "PlacementCache",
    "Profile",
    "Request",
    "Unplaceable",
    "Workload",
    "apply",
    "empty_fleet",
    "fits_ever",
    "gangs",
    "invariant_violations",
    "place",
    "place_layout",
    "plan_defrag",
    "release",
]
