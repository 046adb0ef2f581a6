"""Preemption in a placement pass: a claim (or group) still waiting after the pass takes the GPUs of
placed claims of lower priority that are preemptible, the fewest it needs (`claims.allocation.preemption`
chooses them), and is placed in their stead. A victim is not deleted: its allocation goes, it waits
pending again with the reason, `preempted_by`/`preempted_at` say who took its GPUs and when, and the
allocator queue tries it again after commit. A group is taken as a unit (every placed member), and a
group preempts as a unit: only when its whole minimum then fits.

With a grace period (`NVKE_PREEMPTION_GRACE_S`) the victims are told first (`preempted_by`, a
`claim.preempting` event, an audit entry) and keep their GPUs until it ends; the preemptor waits with
the reason, and the pass after the grace takes them, if it still needs them. Each preemption is told
to the victim's watchers (a `claim.preempted` event) and written to the audit log. On a real cluster
the victim's workload is a claim gone back to pending, so its pods are evicted the way a drain's are
(the provider's workloads pass evicts the holders of a claim taken back).

With queues (`admission`), priority counts within a queue only (claims without one are a queue of
their own), and a claim whose queue asks back its nominal quota reclaims it: it may take claims of
any priority from queues of its cohort that borrow on that GPU model (Kueue's reclaimWithinCohort:
Any). It fits only where its queue then admits it, and takes the fewest victims as ever."""

import datetime
from collections import defaultdict
from functools import partial

from django.conf import settings
from django.db.models import Q
from django.utils import timezone

from audit.recorder import record
from claims import allocation as core
from claims.allocation.preemption import Victim, choose_victims
from claims.allocation.queues import Book, Use
from claims.allocator import admission
from claims.allocator.groups import gang_fits, place_group, placed_members
from claims.allocator.inventory import CACHE, Snapshot
from claims.allocator.placing import candidate_pools
from claims.allocator.queue import request_placement
from claims.allocator.shapes import request_of
from claims.events import publish_claim
from claims.models import Allocation, Claim
from nvke import jobs


def preempt_for(
    waiting: list[Claim], passed: set[int], snap: Snapshot, book: Book | None = None
) -> list[tuple[Claim, core.Placement]]:
    """Place what still waits (highest priority first) by preempting, where it can; `passed`: the claims
    of this pass, never victims (their rows are not written yet). With a grace period, victims are told
    first and taken by a later pass once it ends; the preemptor waits, saying so. Sets the status of
    each claim it places; returns their placements, applied to the snapshot (and charged to `book`)."""
    top = max(claim.priority for claim in waiting)
    candidates = Q(priority__lt=top)
    if book is not None:  # reclaim: any claim of a queue in a cohort may be a borrowed one
        candidates |= Q(queue_id__in=[q for q, cohort in book.cohort_of.items() if cohort])
    rows = (
        Claim.objects.filter(
            candidates, cluster_id=snap.cluster_id, status=Claim.Status.ALLOCATED, preemptible=True
        )
        .exclude(pk__in=passed)
        .values_list(*VICTIM_COLUMNS)
    )
    victims, notices, queue_of = _victims(rows, snap)
    if not victims:
        return []
    holds = {v: _holds(snap, v) for v in victims}

    def take(victim: Victim) -> None:  # out of the fleets, and out of its queue's book
        _lift(snap, victim)
        if book is not None and queue_of[victim] is not None:
            for model, use in holds[victim].items():
                book.refund(queue_of[victim], model, use)

    def give_back(victim: Victim) -> None:
        _put_back(snap, victim)
        if book is not None and queue_of[victim] is not None:
            for model, use in holds[victim].items():
                book.charge(queue_of[victim], model, use)

    grace = datetime.timedelta(seconds=settings.NVKE_PREEMPTION_GRACE_S)
    now = timezone.now()
    placed = []
    groups_seen = set()
    for claim in sorted(waiting, key=lambda c: -c.priority):
        if claim.status != Claim.Status.PENDING or claim.group_id in groups_seen:
            continue
        members, need = [claim], 1
        if claim.group_id is not None:
            groups_seen.add(claim.group_id)
            members = [c for c in waiting if c.group_id == claim.group_id]
            minimum = claim.group.min_members - placed_members(claim.group, snap)
            if minimum <= 0:
                continue  # its minimum is met: members beyond it never preempt
            need = minimum

            def fits(members=members, minimum=minimum) -> bool:
                return gang_fits(members, minimum, snap) and _queue_admits(members[0], book, minimum)
        else:

            def fits(claim=claim) -> bool:
                return _fits(claim, snap, book)

        # Where the fleet has no room for it anywhere, only the node whose victims are lifted can make
        # some: each node is weighed alone. (Room elsewhere, refused by its queue, needs the whole.)
        fits_in = None
        if claim.group_id is None and not _fits(claim, snap, None):
            fits_in = partial(_fits_on, claim, snap, book)

        told = [v for v in victims if notices.get(v, (None,))[0] == claim.pk]
        if told and (ends := max(notices[v][1] for v in told) + grace) > now:
            _wait(members, told, ends)
            continue
        free = [
            v for v in victims if v not in notices and _may_take(claim, v, queue_of[v], holds[v], book, need)
        ]
        if not told and not free:
            continue
        chosen = _choose(
            [*told, *free],
            told,
            fits,
            take,
            give_back,
            snap,
            whole_group=claim.group_id is not None,
            fits_in=fits_in,
        )
        if chosen is None:
            continue
        for victim in chosen:
            victims.remove(victim)
        fresh = [v for v in chosen if v not in told]
        if grace and fresh:
            _tell(claim, fresh, now, snap)
            _wait(members, fresh, now + grace)
            jobs.enqueue(
                "claims.tasks.place_pending_claims", snap.cluster_id, countdown=grace.total_seconds()
            )
            continue
        for victim in chosen:  # out of the books for good: _preempt takes their placements
            take(victim)
            _put_back(snap, victim)
        _preempt(claim, [pk for v in chosen for pk in v.claims], snap)
        if claim.group_id is not None:
            placed += place_group(claim.group, members, snap, book)
        else:
            placement, _ = admission.place(claim, snap, book)
            snap.apply(claim.pk, placement)
            claim.status, claim.pending_reason, claim.allocated_at = Claim.Status.ALLOCATED, "", now
            placed.append((claim, placement))
    return placed


# A victim's row; a notice is live while its preemptor waits and it was told in its current placement.
VICTIM_COLUMNS = (
    *("pk", "priority", "created_at", "group_id"),
    *("preempted_by_id", "preempted_at", "allocated_at", "preempted_by__status", "queue_id"),
)


def _may_take(
    claim: Claim, victim: Victim, queue: int | None, holds: dict[str, Use], book: Book | None, need: int
) -> bool:
    """In its own queue (or among claims with none): a victim of lower priority. Across queues of one
    cohort: a victim whose queue borrows on a GPU model where the claim's queue is asking back its
    nominal quota (it would borrow nothing), whatever its priority. `need`: how many claims like it
    are asking (a group: the members its minimum still lacks)."""
    if queue == claim.queue_id:
        return victim.priority < claim.priority
    if book is None or queue is None or claim.queue_id is None:
        return False
    cohort = book.cohort_of[claim.queue_id]
    if not cohort or book.cohort_of[queue] != cohort:
        return False
    return any(
        book.borrowing(queue, model)
        and book.within_nominal(claim.queue_id, model, admission.ask(claim, book, model) * need)
        for model in holds
    )


def _choose(
    candidates: list[Victim],
    told: list[Victim],
    fits,
    take,
    give_back,
    snap: Snapshot,
    *,
    whole_group: bool,
    fits_in=None,
) -> list[Victim] | None:
    """The victims told already, if the preemptor fits once they go; else the fewest of all."""
    if told:
        for victim in told:
            take(victim)
        enough = fits()
        for victim in told:
            give_back(victim)
        if enough:
            return told
    on_nodes = None if whole_group else lambda v: _nodes(snap, v)
    return choose_victims(candidates, fits, take, give_back, on_nodes, fits_in)


def _victims(
    rows, snap: Snapshot
) -> tuple[list[Victim], dict[Victim, tuple[int, datetime.datetime]], dict[Victim, int | None]]:
    """The placed claims as units (one per claim, one per group: its members that are placed), the
    live notices: victim → (the waiting preemptor that told it, when), and each victim's queue."""
    units: dict[object, list[tuple]] = {}
    for row in rows:
        if row[0] in snap.inventory.placements:
            units.setdefault(row[3] or ("claim", row[0]), []).append(row)
    victims, notices, queue_of = [], {}, {}
    for members in units.values():
        placements = [snap.inventory.placements[row[0]] for row in members]
        gpus = len({(p.node_id, i) for p in placements for i in p.gpu_indexes})
        newest = max(row[2] for row in members)
        victim = Victim(tuple(row[0] for row in members), gpus, members[0][1], newest.timestamp())
        victims.append(victim)
        queue_of[victim] = members[0][8]
        by, told_at, allocated_at, by_status = members[0][4:8]
        if by is not None and by_status == Claim.Status.PENDING and told_at >= allocated_at:
            notices[victim] = (by, told_at)
    return victims, notices, queue_of


def _holds(snap: Snapshot, victim: Victim) -> dict[str, Use]:
    """What the victim holds, per GPU model."""
    held: dict[str, Use] = defaultdict(Use)
    for pk in victim.claims:
        placement = snap.inventory.placements[pk]
        held[admission.model_of(snap, placement)] += admission.use_of(placement)
    return held


def _wait(members: list[Claim], victims: list[Victim], ends: datetime.datetime) -> None:
    count = sum(len(v.claims) for v in victims)
    reason = (
        f"Preempting {count} claim{'s' if count > 1 else ''} of lower priority: their GPUs are taken at "
        f"{ends:%Y-%m-%d %H:%M:%S} UTC, when their grace period ends."
    )
    for member in members:
        member.status, member.pending_reason, member.allocated_at = Claim.Status.PENDING, reason, None


def _tell(preemptor: Claim, victims: list[Victim], now: datetime.datetime, snap: Snapshot) -> None:
    """The grace period starts: the victims keep their GPUs until it ends, and are told."""
    ids = [pk for v in victims for pk in v.claims]
    Claim.objects.filter(pk__in=ids).update(preempted_by=preemptor.pk, preempted_at=now)
    for victim in Claim.objects.filter(pk__in=ids):
        record(victim, {"preempted_by": [None, str(preemptor)]}, tenant_id=victim.tenant_id)
        publish_claim(
            victim, "claim.preempting", pool=snap.pool_holding(victim.pk), preempted_by=preemptor.pk
        )


def _fits(claim: Claim, snap: Snapshot, book: Book | None) -> bool:
    """Whether the claim would be placed now, where its queue admits it (reads only; no pending reason
    worked out)."""
    request = request_of(claim)
    workload = CACHE.workload(claim.cluster_id)
    for pool in candidate_pools(claim, snap.inventory):
        if not snap.inventory.pool_nodes[pool.pk]:
            continue
        found = snap.fleets[pool.pk].place(request, pool.placement_policy, workload)
        if found and (
            book is None
            or claim.queue_id is None
            or not book.refusal(claim.queue_id, pool.gpu_model.name, admission.use_of(found))
        ):
            return True
    return False


def _queue_admits(claim: Claim, book: Book | None, need: int) -> bool:
    """Whether the claim's queue would admit `need` claims like it on some GPU model it has quota for
    (a group's members; placing them checks their own figures)."""
    if book is None or claim.queue_id is None:
        return True
    return any(
        not book.refusal(claim.queue_id, m, admission.ask(claim, book, m) * need)
        for m in book.quotas[claim.queue_id]
    )


def _fits_on(claim: Claim, snap: Snapshot, book: Book | None, node_id: int) -> bool:
    """Whether the claim would fit on this one node now, where its queue admits it (reads only)."""
    if claim.pool_id and snap.pool_of[node_id] != claim.pool_id:
        return False
    placement = snap.fleet_of[node_id].place_on(node_id, request_of(claim))
    if placement is None:
        return False
    if book is None or claim.queue_id is None:
        return True
    return not book.refusal(claim.queue_id, admission.model_of(snap, placement), admission.use_of(placement))


def _nodes(snap: Snapshot, victim: Victim) -> set[int]:
    return {snap.inventory.placements[pk].node_id for pk in victim.claims}


def _lift(snap: Snapshot, victim: Victim) -> None:
    """Out of the fleets for a try (the inventory keeps the placement, the log hears nothing)."""
    for pk in victim.claims:
        placement = snap.inventory.placements[pk]
        snap.fleet_of[placement.node_id].release(placement)


def _put_back(snap: Snapshot, victim: Victim) -> None:
    for pk in victim.claims:
        placement = snap.inventory.placements[pk]
        snap.fleet_of[placement.node_id].apply(placement)


def _preempt(preemptor: Claim, victim_ids: list[int], snap: Snapshot) -> None:
    """Take the victims' placements (their rows, the snapshot, the log), leave them pending with the
    reason, and tell it: an event to their watchers, an audit entry each; the allocator queue tries
    them again after commit."""
    now = timezone.now()
    by = f"group {preemptor.group}" if preemptor.group_id else f"claim {preemptor}"
    reason = (
        f"Preempted by {by} (priority {preemptor.priority}) at {now:%Y-%m-%d %H:%M:%S} UTC; "
        "waiting for capacity."
    )
    victims = list(Claim.objects.filter(pk__in=victim_ids).select_related("group"))
    pools = {victim.pk: snap.pool_holding(victim.pk) for victim in victims}
    Allocation.objects.filter(claim_id__in=victim_ids).delete()  # their usage intervals close with them
    for pk in victim_ids:
        snap.remove(pk)
    Claim.objects.filter(pk__in=victim_ids).update(
        status=Claim.Status.PENDING,
        pending_reason=reason,
        allocated_at=None,
        preempted_by=preemptor.pk,
        preempted_at=now,
    )
    for victim in victims:
        victim.status, victim.pending_reason, victim.allocated_at = Claim.Status.PENDING, reason, None
        record(
            victim,
            {
                "status": [Claim.Status.ALLOCATED, Claim.Status.PENDING],
                "preempted_by": [None, str(preemptor)],
            },
            tenant_id=victim.tenant_id,
        )
        publish_claim(victim, "claim.preempted", pool=pools[victim.pk], preempted_by=preemptor.pk)
    request_placement(snap.cluster_id)
