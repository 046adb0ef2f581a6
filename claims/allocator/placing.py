"""Where one claim fits: the first of its candidate pools that has room, by that pool's placement policy,
else why it waits (with the numbers); and whether it could ever fit at all. Reads the snapshot only;
callers apply and write what it finds."""

from collections import Counter

from claims import allocation as core
from claims.allocation import fleet
from claims.allocation.state import isolation_on, unplaceable
from claims.allocator.inventory import CACHE, Inventory, Snapshot
from claims.allocator.shapes import catalog_shapes, pool_shape, request_of
from claims.allocator.shortfall import AT_MAXIMUM, SCALE_UP, shortfall
from claims.models import Claim
from nodepools.models import NodePool
from nvke import caches


def refusal_if_never_fits(claim: Claim) -> str | None:
    """Why the claim can never fit: not even an empty node of its pool, or, when it names none, of any
    pool the cluster could be given from the catalog (a missing pool is a pending reason, not a 400);
    with what it needs against the most an empty node offers, for the reason most nodes gave."""
    request = request_of(claim)
    if claim.pool_id:
        shapes = [pool_shape(claim.pool)]
        reason = core.fits_ever(request, shapes)
    else:
        reason = CACHE.catalog_refusal(request)
        shapes = catalog_shapes() if reason else []  # the figures: only for a refusal, which is rare
    if not reason:
        return None
    refused = core.empty_fleet(shapes).place(request, fleet.BINPACK)
    top = max(refused.counts, key=refused.counts.get) if refused.counts else ""
    numbers = shortfall(request, shapes, top, helps="") if top else ""
    return f"{reason}. It {numbers}" if numbers else reason


def candidate_pools(
    claim: Claim, inventory: Inventory, keep_model: str = "", refused: set[str] = frozenset()
) -> list[NodePool]:
    """The pools to try, in order. Whole GPUs go to exclusive pools first (sharing pools give them only
    idle GPUs); a fraction to the pools that isolate it most first (MPS holds its memory, time-slicing
    does not), so "any pool" keeps what isolation it can; a claim being moved (`keep_model`: the GPU
    model it leaves) to pools of its model before others. `refused`: GPU models the claim's queue does
    not admit it on."""
    pools = [
        p
        for p in inventory.pools
        if (not claim.pool_id or p.pk == claim.pool_id) and p.gpu_model.name not in refused
    ]
    return sorted(
        pools,
        key=lambda p: (
            claim.kind == Claim.Kind.WHOLE and p.sharing_mode != "exclusive",
            -core.ISOLATION_RANK[isolation_on(claim.kind, p.sharing_mode)],
            bool(keep_model) and p.gpu_model.display_name != keep_model,
        ),
    )


def model_at(snap: Snapshot, node_id: int) -> str:
    """The GPU model (its name in words) of a node of the snapshot: what a move from it keeps if it can."""
    pool_pk = snap.pool_of.get(node_id)
    return next((p.gpu_model.display_name for p in snap.inventory.pools if p.pk == pool_pk), "")


def find_placement(
    claim: Claim, snap: Snapshot, keep_model: str = "", refused: set[str] = frozenset()
) -> tuple[core.Placement | None, str]:
    """The first candidate pool (in order) that fits, by that pool's policy; else why nothing fits.
    `keep_model`: the GPU model a claim being moved leaves, whose pools it tries first; `refused`: GPU
    models its queue does not admit it on."""
    request = request_of(claim)
    workload = CACHE.workload(claim.cluster_id)
    counts: Counter[str] = Counter()
    total = 0
    tried = []
    for pool in candidate_pools(claim, snap.inventory, keep_model, refused):
        nodes = snap.inventory.pool_nodes[pool.pk]
        total += len(nodes)
        if not nodes:
            continue
        result = snap.fleets[pool.pk].place(request, pool.placement_policy, workload)
        if result:
            return result, ""
        counts.update(result.counts)
        tried.append(pool.pk)
    if total == 0:
        return None, "No ready GPU nodes in the cluster" + (" pool." if claim.pool_id else ".")
    return None, _with_numbers(unplaceable(counts, total), request, snap, tried)


SHORTFALLS_KEPT = 1000
# (snapshot, request, pools and their fleets' versions) → the numbers. A plain dict: a pending pass asks
# once per claim it cannot place.
_SHORTFALLS = caches.emptied_when_full("claims.allocator.shortfalls", SHORTFALLS_KEPT)


def _with_numbers(reason: core.Unplaceable, request: core.Request, snap: Snapshot, pools: list[int]) -> str:
    """The reason, then what the claim needs against the best on offer for its most frequent part. A
    claim shape is answered once per state of the fleets (a pending pass holds many claims alike)."""
    # A reloaded snapshot starts its fleets' versions again (its load time tells it from the last one),
    # and so does a copy (drain_preview's): the object tells it from the original.
    key = (id(snap), snap.loaded_at, request, tuple((pk, snap.fleets[pk].version) for pk in pools))
    numbers = _SHORTFALLS.get(key)
    if numbers is None:
        top = max(reason.counts, key=reason.counts.get)
        nodes = [node for pk in pools for node in snap.inventory.pool_nodes[pk]]
        # Scaling up helps only where a pool has room to grow.
        tried = [pool for pool in snap.inventory.pools if pool.pk in pools]
        helps = AT_MAXIMUM if tried and all(p.node_count >= p.max_nodes for p in tried) else SCALE_UP
        numbers = _SHORTFALLS.put(key, shortfall(request, nodes, top, helps))
    return f"{reason.reason}. It {numbers}" if numbers else reason.reason
