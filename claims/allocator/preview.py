"""What draining nodes would do to their claims, before anyone drains them: for each node in turn, where
each of its claims would be placed if that node left service now, or why it would wait (a claim group's
member: where its group would go, or that the drain takes the group below its minimum; a claim with no
room left that the drain's placement pass would let preempt: whom it would preempt). Reads only: it
works on a copy of the cluster's inventory and writes nothing (the driver-upgrade form shows it)."""

import copy
from dataclasses import dataclass

from claims.allocation.preemption import Victim, choose_victims
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
    preempts: tuple[Claim, ...] = ()  # the claims of lower priority it would take the GPUs of to go there


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
        moved, preempted = [], {}
        for claim in on_node:
            if claim.group_id is not None:
                result[node_id].append(_group_outcome(claim, snap, names))
                continue
            placement, reason = find_placement(claim, snap, model_at(snap, node_id))  # as evict_claims
            victims: tuple[Claim, ...] = ()
            if placement is None:
                victims, placement = _preempting(claim, snap, preempted)
            if placement is None:
                result[node_id].append(DrainOutcome(claim, "", reason))
                continue
            snap.apply(claim.pk, placement)
            moved.append(claim.pk)
            result[node_id].append(DrainOutcome(claim, names.get(placement.node_id, ""), "", victims))
        for claim_id in moved:  # back as it was, for the next node
            target = snap.inventory.placements.pop(claim_id)
            snap.fleet_of[target.node_id].release(target)
        for claim_id, placement in preempted.items():
            snap.apply(claim_id, placement)
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


def _preempting(
    claim: Claim, snap: Snapshot, preempted: dict[int, object]
) -> tuple[tuple[Claim, ...], object | None]:
    """A moved claim with no room left may preempt, as the drain's placement pass lets it
    (claims.allocator.preemption): the fewest preemptible claims of lower priority (a group as one unit)
    whose GPUs make it fit, and where it would go; ((), None) when none would do. The victims are lifted
    off the copy (into `preempted`, put back by the caller once the node is done)."""
    rows = Claim.objects.filter(
        cluster_id=claim.cluster_id,
        status=Claim.Status.ALLOCATED,
        preemptible=True,
        priority__lt=claim.priority,
    ).order_by("pk")
    units: dict[object, list[Claim]] = {}
    for row in rows:
        if row.pk in snap.inventory.placements:
            units.setdefault(row.group_id or ("claim", row.pk), []).append(row)
    placements = snap.inventory.placements
    victims = {
        Victim(
            tuple(m.pk for m in members),
            len({(placements[m.pk].node_id, i) for m in members for i in placements[m.pk].gpu_indexes}),
            members[0].priority,
            max(m.created_at for m in members).timestamp(),
        ): members
        for members in units.values()
    }
    lifted: dict[int, object] = {}

    def take(victim: Victim) -> None:
        for pk in victim.claims:
            lifted[pk] = placements.pop(pk)
            snap.fleet_of[lifted[pk].node_id].release(lifted[pk])

    def give_back(victim: Victim) -> None:
        for pk in victim.claims:
            snap.apply(pk, lifted.pop(pk))

    def nodes(victim: Victim) -> set[int]:
        return {placements[pk].node_id for pk in victim.claims}

    chosen = choose_victims(
        list(victims), lambda: find_placement(claim, snap)[0] is not None, take, give_back, nodes
    )
    if not chosen:
        return (), None
    for victim in chosen:
        take(victim)
    preempted.update(lifted)
    return tuple(m for victim in chosen for m in victims[victim]), find_placement(claim, snap)[0]
