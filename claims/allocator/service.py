"""The allocator service: create, release, place what is pending, evict, resize, and hear that the
topology changed. The only writer of claims' status, allocations, GPU shares and the allocation log;
every change runs under the cluster's allocation lock (see `locks`) and reads the inventory inside it."""

import copy
from collections.abc import Callable
from dataclasses import dataclass, replace

from django.db import IntegrityError, transaction
from django.db.models import Q, QuerySet
from django.utils import timezone

from audit import recorder as audit
from claims import allocation as core
from claims import quotas
from claims.allocation.state import fraction_fits
from claims.allocator import admission, metering, moves, preemption
from claims.allocator.groups import place_group
from claims.allocator.inventory import CACHE, Snapshot, placement_json
from claims.allocator.locks import allocation_lock, allocation_lock_if_free, claim_after_holder
from claims.allocator.placing import find_placement, refusal_if_never_fits
from claims.allocator.queue import request_placement
from claims.allocator.rows import claims_by_pk, write_outcomes, write_pass
from claims.allocator.shapes import field_at_fault, request_of, validate_claim
from claims.events import publish_claim
from claims.models import Allocation, AllocationEvent, Claim, GpuShare, Queue
from clusters.models import Cluster
from nodepools.models import Node, NodePool
from nvke import jobs
from nvke.errors import Conflict, DomainError
from nvke.tenancy.context import TenantContext


def create_claim(
    *,
    context: TenantContext,
    cluster: Cluster,
    name: str,
    kind: str,
    namespace: str = "default",
    pool: NodePool | None = None,
    gpus: int = 1,
    nvlink_required: bool = False,
    mig_profile: str = "",
    gpu_memory_mib: int | None = None,
    compute_percent: int | None = None,
    guaranteed_percent: int | None = None,
    cpu_milli: int = 0,
    host_memory_mib: int = 0,
    allowed_models: list[str] | None = None,
    min_isolation: str = "none",
    priority: int = 0,
    training: bool = False,
    preemptible: bool = True,
    queue: Queue | None = None,
    place: bool = True,
    source: str = Claim.Source.API,
) -> Claim:
    """Validate, refuse what can never fit (400), then place now or leave it pending with a reason.
    With `place=False` the claim is queued: the allocator queue places it in its next batch. Without a
    `queue` it falls to its namespace's queue, if the cluster has one."""
    if cluster.status in (Cluster.Status.DELETING, Cluster.Status.FAILED):
        raise Conflict(f"Cluster {cluster.name} is {cluster.status}; it takes no claims.", field="cluster")
    if queue is not None and queue.cluster_id != cluster.pk:
        raise DomainError(f"Queue {queue} is not a queue of cluster {cluster.name}.", field="queue")
    claim = Claim(
        tenant=context.tenant,
        cluster=cluster,
        pool=pool,
        namespace=namespace,
        name=name,
        kind=kind,
        gpus=gpus,
        nvlink_required=nvlink_required,
        mig_profile=mig_profile,
        gpu_memory_mib=gpu_memory_mib,
        compute_percent=compute_percent,
        guaranteed_percent=guaranteed_percent,
        cpu_milli=cpu_milli,
        host_memory_mib=host_memory_mib,
        allowed_models=allowed_models or [],
        min_isolation=min_isolation,
        priority=priority,
        training=training,
        preemptible=preemptible,
        queue=queue or admission.queue_for(cluster.pk, namespace),
        source=source,
    )
    validate_claim(claim)
    if reason := refusal_if_never_fits(claim):
        raise DomainError(
            f"This claim can never fit: {reason}", field=field_at_fault(reason), code="never_fits"
        )
    duplicate = Conflict(
        f"Namespace {claim.namespace} of cluster {cluster.name} already has a claim named {claim.name!r}.",
        field="name",
        code="duplicate",
    )
    # One transaction, as long as the cluster's allocation lock is free: the tenant's claim quota (it
    # locks the tenant row when a limit applies), the claim, and its placement, which takes the lock
    # only after the claim is written. When another transaction holds the lock, the claim commits
    # pending instead and waits for that holder, which places every claim committed before it took the
    # lock: claims arriving together are placed in one pass and one commit.
    with transaction.atomic():
        quotas.check_claim(context.tenant, claim)
        try:
            audit.insert(claim)  # with its audit entry, in one statement
        except IntegrityError:  # the name is taken; leaving the block rolls back
            raise duplicate from None
        CACHE.workload(cluster.pk).record(request_of(claim))
        if not place:
            request_placement(cluster.pk)
            return claim
        if placed := _place_if_free(claim):
            return placed
    try:
        return _wait_for_placement(claim)
    except BaseException:
        request_placement(cluster.pk)  # the claim is written and waits: the allocator queue places it
        raise


def _wait_for_placement(claim: Claim) -> Claim:
    """A claim committed untried: placed by the allocation lock's holder, or by this process when the
    lock came free first. Returns it as placed (allocated, or pending with the reason)."""
    while True:
        state = claim_after_holder(claim.cluster_id, claim.pk)
        if state is None:
            raise Claim.DoesNotExist(f"Claim {claim} was deleted before it was placed.")
        if state[:2] != (Claim.Status.PENDING, ""):  # the holder tried it
            claim.status, claim.pending_reason, claim.allocated_at = state
            return claim
        with transaction.atomic():  # a savepoint in a caller's transaction: a failure leaves it usable
            if placed := _place_if_free(claim):
                return placed


def _place_if_free(claim: Claim) -> Claim | None:
    """If the cluster's allocation lock is free, place the claim with the other claims committed and not
    yet tried, and return it as placed; None when another transaction holds the lock, or tried it."""
    with allocation_lock_if_free(claim.cluster_id, claim.pk, PLACE_AT_ONCE) as untried:
        if untried is None:
            return None
        others = [pk for pk in untried if pk != claim.pk]  # this claim, if untried, comes first
        loaded = claims_by_pk(others) if others else {}
        batch = [claim if pk == claim.pk else loaded[pk] for pk in untried]
        snap = CACHE.snapshot(claim.cluster_id)
        _place_all(batch, snap)
        waiting = any(c.status == Claim.Status.PENDING for c in batch)
        if waiting and any(p.autoscaling for p in snap.inventory.pools):
            jobs.enqueue("nodepools.tasks.autoscale_cluster", claim.cluster_id)  # a new node may hold it
        return claim if claim.pk in untried else None


# How many claims one holder of the allocation lock places: its own and those of the processes that
# found the lock held; enough to take in every waiter's claim, few enough to answer quickly.
PLACE_AT_ONCE = 64


def release_claim(claim: Claim) -> None:
    """Free the claim's capacity at once; pending claims of the cluster get another try."""
    with allocation_lock(claim.cluster_id):
        snap = CACHE.snapshot(claim.cluster_id)
        publish_claim(claim, "claim.released", pool=snap.pool_holding(claim.pk) or claim.pool_id)
        Claim.objects.filter(pk=claim.pk).delete()
        snap.remove(claim.pk)
        request_placement(claim.cluster_id)


def place_pending(cluster_id: int) -> int:
    """Try every pending claim of the cluster, highest priority and oldest first; returns how many were
    placed. One inventory load for the whole pass."""
    with allocation_lock(cluster_id):
        pending = list(
            Claim.objects.filter(cluster_id=cluster_id, status=Claim.Status.PENDING)
            .select_related("pool", "group")
            .order_by("-priority", "created_at")
        )
        if not pending:
            return 0
        return _place_all(pending, CACHE.snapshot(cluster_id))


def evict_claims(cluster_id: int, claim_ids: list[int]) -> int:
    """Take allocated claims off their GPUs (a drain, a failed GPU) and place them again at once where
    they fit; the rest wait pending with the reason. A group member moves with its whole group, which
    is placed again as a unit or waits holding nothing. The node or GPU they leave must be unschedulable
    already (`nodepools.nodes` sees to it), or they land back on it. Returns how many were placed again."""
    with allocation_lock(cluster_id):
        snap = CACHE.snapshot(cluster_id)
        in_groups = Claim.objects.filter(pk__in=claim_ids, group__isnull=False).values("group_id")
        claims = list(
            Claim.objects.filter(cluster_id=cluster_id, status=Claim.Status.ALLOCATED)
            .filter(Q(pk__in=claim_ids) | Q(group_id__in=in_groups))
            .select_related("pool", "group")
            .order_by("-priority", "created_at")
        )
        before = moves.nodes_of([claim.pk for claim in claims])
        Allocation.objects.filter(claim__in=claims).delete()
        for claim in claims:
            snap.remove(claim.pk)
        placed = _place_all(claims, snap, before)
        moves.record_moves(claims, before)
        return placed


def evict_node(cluster_id: int, node_id: int) -> tuple[int, int]:
    """Move every claim off a node being drained (cordoned already): (claims, placed elsewhere)."""
    claims = list(Claim.objects.filter(allocation__node_id=node_id).values_list("pk", flat=True))
    return len(claims), evict_claims(cluster_id, claims) if claims else 0


@dataclass(frozen=True)
class Resized:
    """What `resize_claim` found and did. `claim`: the claim as it stood under the lock, before;
    `asked`: the share asked for (None: left as it is); `compute_percent`: the share it holds now;
    `moved`: to another GPU (else in place, or not at all); `refusal`: why no GPU fits the share asked
    for (the claim keeps its own); `gpu_before`/`gpu_after`: the Gpu pks it was and is on."""

    claim: Claim
    asked: int | None
    compute_percent: int
    gpu_before: int
    gpu_after: int
    moved: bool = False
    refusal: str = ""

    @property
    def changed(self) -> bool:
        return self.compute_percent != self.claim.compute_percent


def resize_claim(claim_id: int, *, compute_percent: int | Callable[[Claim], int | None]) -> Resized | None:
    """Give an allocated fraction a new compute share: in place when its GPU has the headroom, else on
    another GPU where it fits, else not at all (with the reason). `compute_percent` is the share, or a
    function of the claim as it stands under the lock that gives it (None: leave it), so a decision
    made from the claim's current share is made on what is current. None if the claim is gone or is
    not an allocated one-GPU fraction. The lock is held until the caller's transaction commits, so the
    claim stays as the answer says until then. The log records a remove and an add, so other
    processes catch up without reloading their inventory."""
    claim = Claim.objects.filter(pk=claim_id).only("cluster_id").first()
    if claim is None:
        return None
    with allocation_lock(claim.cluster_id):
        allocated = Claim.objects.select_related("pool").filter(status=Claim.Status.ALLOCATED)
        claim = allocated.filter(pk=claim_id).first()
        snap = CACHE.snapshot(claim.cluster_id) if claim else None
        old = snap.inventory.placements.get(claim_id) if snap else None
        if old is None or claim.kind != Claim.Kind.FRACTION or len(old.gpu_indexes) != 1:
            return None
        before = snap.inventory.gpu_pk[old.node_id, old.gpu_indexes[0]]
        asked = compute_percent(claim) if callable(compute_percent) else compute_percent
        unchanged = Resized(claim, asked, claim.compute_percent, before, before)
        if asked is None or asked == claim.compute_percent:
            return unchanged
        resized = copy.copy(claim)
        resized.compute_percent = asked
        request = request_of(resized)
        node = snap.node(old.node_id)
        guaranteed = node.guarantee(request)
        grown = (guaranteed - old.guaranteed_milli, request.compute_milli - old.compute_milli)
        gpu = node.gpus[old.gpu_indexes[0]]
        if max(grown) <= 0 or fraction_fits(gpu, node, 0, *grown):
            new = replace(
                old, compute_milli=request.compute_milli, guaranteed_milli=guaranteed, request=request
            )
            snap.remove(claim_id)
            snap.apply(claim_id, new)
            GpuShare.objects.filter(allocation__claim_id=claim_id).update(
                compute_milli=new.compute_milli, guaranteed_milli=guaranteed
            )
            allocation_id = Allocation.objects.filter(claim_id=claim_id).values_list("pk", flat=True).get()
            metering.reopen(allocation_id, metering.usage_row(snap, resized, new), timezone.now())
            Claim.objects.filter(pk=claim_id).update(compute_percent=asked)
            _log_add(snap, claim_id, new)
            return replace(unchanged, compute_percent=asked)
        placement, reason = find_placement(resized, snap)
        if placement is None:
            return replace(unchanged, refusal=reason)
        before_nodes = moves.nodes_of([claim_id])
        Claim.objects.filter(pk=claim_id).update(compute_percent=asked)
        Allocation.objects.filter(claim_id=claim_id).delete()
        snap.remove(claim_id)
        snap.apply(claim_id, placement)
        write_pass(snap, [(resized, placement)], [])
        from_pool = snap.pool_of[old.node_id]
        publish_claim(resized, "claim.moved", pool=snap.pool_holding(claim_id), from_pool=from_pool)
        moves.record_moves([claim], before_nodes)
        after = snap.inventory.gpu_pk[placement.node_id, placement.gpu_indexes[0]]
        return replace(unchanged, compute_percent=asked, moved=True, gpu_after=after)


def _log_add(snap: Snapshot, claim_id: int, placement: core.Placement) -> None:
    event = AllocationEvent.objects.create(
        cluster_id=snap.cluster_id,
        kind=AllocationEvent.Kind.ADD,
        claim_id=claim_id,
        placement=placement_json(placement),
    )
    snap.last_event = event.pk


def topology_changed(cluster_id: int) -> None:
    """Nodes or GPUs of the cluster changed (added, removed, cordoned, health): every process reloads
    its inventory before the next placement. `nodepools.nodes` calls it inside the transaction that
    made the change."""
    with allocation_lock(cluster_id):
        AllocationEvent.objects.create(cluster_id=cluster_id, kind=AllocationEvent.Kind.RESET)


def nodes_removed(nodes: QuerySet[Node]) -> None:
    """Claims on nodes about to disappear go back to pending (their allocations go with the nodes)."""
    Claim.objects.filter(allocation__node__in=nodes).update(
        status=Claim.Status.PENDING,
        pending_reason="Its node was removed; waiting for capacity.",
        allocated_at=None,
    )


def _place_all(claims: list[Claim], snap: Snapshot, moved_from: dict | None = None) -> int:
    """Place what fits, in order (each placement counts for the next; across queues, the queue borrowing
    least goes first), within each claim's queue quota (`admission`), let what still waits preempt
    (`preemption`: lower priority in its queue, borrowed claims in its cohort), record why the rest
    wait, and write it all in a handful of statements. A group's members are placed together, as a
    unit, where the first of them comes. `moved_from`: claim id → where a claim being moved was
    (`moves.Where`): it keeps its GPU model if it can. Returns how many were placed."""
    placed = []
    now = timezone.now()
    groups_seen = set()
    book = admission.load_book(snap)
    for claim in admission.in_fair_order(claims, book):
        if claim.group_id is not None:
            if claim.group_id not in groups_seen:
                groups_seen.add(claim.group_id)
                members = [c for c in claims if c.group_id == claim.group_id]
                placed += place_group(claim.group, members, snap, book)
            continue
        was = (moved_from or {}).get(claim.pk)
        placement, reason = admission.place(claim, snap, book, was.gpu_model if was else "")
        if placement is not None:
            snap.apply(claim.pk, placement)
            placed.append((claim, placement))
            claim.status, claim.pending_reason, claim.allocated_at = Claim.Status.ALLOCATED, "", now
        else:
            claim.status, claim.pending_reason, claim.allocated_at = Claim.Status.PENDING, reason, None
    waiting = [claim for claim in claims if claim.status == Claim.Status.PENDING]
    if waiting:
        placed += preemption.preempt_for(waiting, {claim.pk for claim in claims}, snap, book)
    write_outcomes(claims, placed, snap)
    return len(placed)
