"""Defragmentation planner: a bounded set of claim moves that frees whole GPUs."""

from __future__ import annotations

import copy
from collections.abc import Hashable, Iterable, Mapping
from dataclasses import dataclass

from claims.allocation.fleet import BINPACK, Fleet
from claims.allocation.state import FRACTION, MIG_SLICE, NodeState, Placement


@dataclass(frozen=True)
class ClaimMove:
    claim_id: Hashable
    source: Placement
    target: Placement


def plan_defrag(
    nodes: Iterable[NodeState], placements: Mapping[Hashable, Placement], max_moves: int
) -> list[ClaimMove]:
    """Moves (at most `max_moves`) that empty as many GPUs as this greedy finds. `nodes` are not changed.

    Greedy, not optimal: repeatedly take the GPU that is cheapest to empty (fewest claims on it, then
    least used) whose claims all fit elsewhere, and move them. A claim may only go to a GPU that is
    already in use (moving onto an idle GPU would just move the hole) and is re-placed with the normal
    rules (binpack), so every move is a valid placement of the claim's own request. Only fractions and
    MIG slices move: moving a whole-GPU claim frees one GPU and takes another. Apply the moves in order
    (release source, apply target). Everything is tried on one copy of the fleet whose idle GPUs are
    closed, each trial undone; a GPU a plan empties is closed there in turn."""
    work = copy.deepcopy(list(nodes))
    for node in work:
        for g in node.gpus:
            if g.idle():
                g.healthy = False
    scratch = Fleet(work)
    current = dict(placements)
    moves: list[ClaimMove] = []
    hopeless: set[tuple[Hashable, int]] = set()
    while len(moves) < max_moves:
        plan = None
        for gpu, claims in _sources(current, max_moves - len(moves)):
            if gpu not in hopeless:
                plan = _empty(scratch, gpu, [(c, current[c]) for c in claims])
                if plan is not None:
                    break
                hopeless.add(gpu)
        if plan is None:
            break
        for move in plan:
            scratch.release(move.source)
            scratch.apply(move.target)
            current[move.claim_id] = move.target
        _set_health(scratch, gpu, False)
        moves.extend(plan)
        hopeless.clear()  # the fleet changed: earlier failures may now succeed
    return moves


def _sources(current: Mapping[Hashable, Placement], budget: int) -> list[tuple[tuple[Hashable, int], list]]:
    """GPUs that only hold movable claims, no more than `budget` of them, cheapest first."""
    on_gpu: dict[tuple[Hashable, int], list[Hashable]] = {}
    pinned = set()
    for claim_id, p in current.items():
        for index in p.gpu_indexes:
            on_gpu.setdefault((p.node_id, index), []).append(claim_id)
            if p.request.kind not in (FRACTION, MIG_SLICE):
                pinned.add((p.node_id, index))
    options = [(gpu, claims) for gpu, claims in on_gpu.items() if gpu not in pinned and len(claims) <= budget]
    used = {
        gpu: sum(current[c].compute_milli + current[c].memory_mib for c in claims) for gpu, claims in options
    }
    return sorted(options, key=lambda item: (len(item[1]), used[item[0]], repr(item[0])))


def _set_health(fleet: Fleet, gpu: tuple[Hashable, int], healthy: bool) -> None:
    fleet.node(gpu[0]).gpus[gpu[1]].healthy = healthy
    fleet.refresh(gpu[0])


def _empty(
    scratch: Fleet, gpu: tuple[Hashable, int], claims: list[tuple[Hashable, Placement]]
) -> list[ClaimMove] | None:
    """Moves that take every claim off `gpu` (closed meanwhile), found on `scratch` and undone there."""
    plan: list[ClaimMove] = []
    released: list[Placement] = []
    healthy = scratch.node(gpu[0]).gpus[gpu[1]].healthy
    _set_health(scratch, gpu, False)
    for claim_id, source in claims:
        scratch.release(source)
        released.append(source)
        target = scratch.place(source.request, BINPACK)
        if not isinstance(target, Placement):
            break
        scratch.apply(target)
        plan.append(ClaimMove(claim_id, source, target))
    for move in reversed(plan):
        scratch.release(move.target)
    _set_health(scratch, gpu, True)  # apply() puts claims only on healthy GPUs
    for source in released:
        scratch.apply(source)
    _set_health(scratch, gpu, healthy)
    return plan if len(plan) == len(claims) else None
