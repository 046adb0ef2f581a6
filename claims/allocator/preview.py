"""What draining nodes would do to their claims, before anyone drains them: for each node in turn, where
each of its claims would be placed if that node left service now, or why it would wait (a claim group's
member: where its group would go, or that the drain takes the group below its minimum). Reads only: it
works on a copy of the cluster's inventory and writes nothing (the driver-upgrade form shows it)."""

import copy
from dataclasses import dataclass

from claims.allocator.groups import place_group
from claims.allocator.inventory import CACHE, Snapshot
from claims.allocator.locks import allocation_lock
from claims.allocator.placing import find_placement, model_at
from claims.models import Claim
from nodepools.models import Node


@dataclass(frozen=True)
class DrainOutcome:
    claim: Claim
    to_node: str  # where it would go; "" when it would wait
    reason: str  # why it would wait


def drain_preview(cluster_id: int, node_ids: list[int]) -> dict[int, list[DrainOutcome]]:
    """Node pk → what becomes of each claim on it (highest priority first) if that node alone is drained;
    the other nodes of `node_ids` stay in service meanwhile, as when an upgrade takes one at a time."""
    with allocation_lock(cluster_id):
        snap = copy.deepcopy(CACHE.snapshot(cluster_id))  # the copy is ours to change
    claims = (
        Claim.objects.filter(allocation__node_id__in=node_ids, status=Claim.Status.ALLOCATED)
        .select_related("pool", "allocation", "group")
        .order_by("-priority", "created_at")
    )
    names = dict(Node.objects.filter(pool__cluster_id=cluster_id).values_list("pk", "name"))
    result: dict[int, list[DrainOutcome]] = {node_id: [] for node_id in node_ids}
    for node_id in node_ids:
        on_node = [c for c in claims if c.allocation.node_id == node_id and c.pk in snap.inventory.placements]
        if node_id not in snap.fleet_of:
            continue
        fleet, node = snap.fleet_of[node_id], snap.node(node_id)
        node.schedulable = False
        fleet.refresh(node_id)
        originals = {c.pk: snap.inventory.placements.pop(c.pk) for c in on_node}
        for placement in originals.values():
            fleet.release(placement)
        moved = []
        for claim in on_node:
            if claim.group_id is not None:
                result[node_id].append(_group_outcome(claim, snap, names))
                continue
            placement, reason = find_placement(claim, snap, model_at(snap, node_id))  # as evict_claims
            if placement is None:
                result[node_id].append(DrainOutcome(claim, "", reason))
                continue
            snap.apply(claim.pk, placement)
            moved.append(claim.pk)
            result[node_id].append(DrainOutcome(claim, names.get(placement.node_id, ""), ""))
        for claim_id in moved:  # back as it was, for the next node
            target = snap.inventory.placements.pop(claim_id)
            snap.fleet_of[target.node_id].release(target)
        for claim_id, placement in originals.items():
            fleet.apply(placement)
            snap.inventory.placements[claim_id] = placement
        node.schedulable = True
        fleet.refresh(node_id)
    return result


def _group_outcome(claim: Claim, snap: Snapshot, names: dict[int, str]) -> DrainOutcome:
    """A group member moves with its whole group (`evict_claims`): where it would go when the group is
    placed again as a unit, or the group's reason when the drain would take it below its minimum. The
    copy is left as it was."""
    members = list(
        Claim.objects.filter(group_id=claim.group_id, status=Claim.Status.ALLOCATED).select_related("pool")
    )
    elsewhere = {
        m.pk: snap.inventory.placements.pop(m.pk) for m in members if m.pk in snap.inventory.placements
    }
    for placement in elsewhere.values():
        snap.fleet_of[placement.node_id].release(placement)
    placed = dict((c.pk, p) for c, p in place_group(claim.group, members, snap))
    outcome = next(m for m in members if m.pk == claim.pk)
    for claim_id, placement in placed.items():
        snap.inventory.placements.pop(claim_id)
        snap.fleet_of[placement.node_id].release(placement)
    for claim_id, placement in elsewhere.items():
        snap.apply(claim_id, placement)
    if claim.pk in placed:
        return DrainOutcome(claim, names.get(placed[claim.pk].node_id, ""), "")
    return DrainOutcome(claim, "", outcome.pending_reason)
