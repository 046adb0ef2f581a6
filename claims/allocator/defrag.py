"""Defragmentation: moves that free whole GPUs, planned on a fresh inventory (a dry run changes
nothing) or carried out as re-allocations under the allocation lock."""

from dataclasses import dataclass

from claims import allocation as core
from claims.allocator import moves as moved
from claims.allocator.inventory import CACHE, load_inventory
from claims.allocator.locks import allocation_lock
from claims.allocator.rows import write_pass
from claims.events import publish_claim
from claims.models import Allocation, Claim


@dataclass(frozen=True)
class PlannedMove:
    claim: int
    from_node: int
    from_gpus: tuple[int, ...]
    to_node: int
    to_gpus: tuple[int, ...]
    mig_start: int | None


def _planned(moves: list[core.ClaimMove]) -> list[PlannedMove]:
    return [
        PlannedMove(
            m.claim_id,
            m.source.node_id,
            m.source.gpu_indexes,
            m.target.node_id,
            m.target.gpu_indexes,
            m.target.mig_start,
        )
        for m in moves
    ]


def _movable(cluster_id: int, placements: dict[int, core.Placement]) -> dict[int, core.Placement]:
    """Placements defragmentation may move: not a claim group's members, which move only as a unit."""
    members = set(
        Claim.objects.filter(cluster_id=cluster_id, group__isnull=False).values_list("pk", flat=True)
    )
    return {pk: p for pk, p in placements.items() if pk not in members}


def plan_defrag(cluster_id: int, max_moves: int) -> tuple[list[PlannedMove], int]:
    """Moves that free whole GPUs, and how many GPUs they free. Changes nothing."""
    inventory = load_inventory(cluster_id, placements=True)
    moves = core.plan_defrag(
        list(inventory.nodes.values()), _movable(cluster_id, inventory.placements), max_moves
    )
    before = inventory.idle_gpus()
    for move in moves:
        core.release(move.source, inventory.nodes)
        core.apply(move.target, inventory.nodes)
    return _planned(moves), inventory.idle_gpus() - before


def apply_defrag(cluster_id: int, max_moves: int) -> tuple[list[PlannedMove], int]:
    """Plan and carry out the moves as re-allocations, under the allocation lock."""
    with allocation_lock(cluster_id):
        snap = CACHE.snapshot(cluster_id)
        idle_before = snap.inventory.idle_gpus()
        movable = _movable(cluster_id, snap.inventory.placements)
        moves = core.plan_defrag(list(snap.inventory.nodes.values()), movable, max_moves)
        claims = Claim.objects.in_bulk([m.claim_id for m in moves])
        before = moved.nodes_of(list(claims))
        for move in moves:
            claim = claims[move.claim_id]
            from_pool = snap.pool_holding(claim.pk)
            Allocation.objects.filter(claim=claim).delete()
            snap.remove(claim.pk)
            snap.apply(claim.pk, move.target)
            write_pass(snap, [(claim, move.target)], [])
            publish_claim(claim, "claim.moved", pool=snap.pool_holding(claim.pk), from_pool=from_pool)
        moved.record_moves(list(claims.values()), before)
        return _planned(moves), snap.inventory.idle_gpus() - idle_before
