"""What draining nodes would do to their claims, before anyone drains them: for each node in turn, where
each of its claims would be placed if that node left service now, or why it would wait. Reads only: it
works on a copy of the cluster's inventory and writes nothing (the driver-upgrade form shows it)."""

import copy
from dataclasses import dataclass

from claims.allocator.inventory import CACHE
from claims.allocator.locks import allocation_lock
from claims.allocator.service import find_placement
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
        .select_related("pool", "allocation")
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
            placement, reason = find_placement(claim, snap)
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
