"""Claim groups (gangs) under the allocation lock: create one with its members, place its pending
members all or nothing (`claims.allocation.gangs` chooses where), release it as a unit.

A group is placed when at least `min_members` of its members are allocated. Its pending members are
placed together: never fewer than what takes the group to its minimum, so a group below it holds
nothing. Members wait with a non-empty reason from the start, so the allocation lock's holder, which
places claims committed and not yet tried, never takes part of a group in its batch."""

from django.db import IntegrityError, transaction
from django.utils import timezone

from audit import recorder as audit
from claims import allocation as core
from claims import quotas
from claims.allocation.queues import Book
from claims.allocator import admission
from claims.allocator.inventory import CACHE, Snapshot
from claims.allocator.locks import allocation_lock
from claims.allocator.placing import candidate_pools, find_placement, refusal_if_never_fits
from claims.allocator.queue import request_placement
from claims.allocator.rows import write_outcomes
from claims.allocator.shapes import field_at_fault, request_of, validate_claim
from claims.events import publish_claim
from claims.models import Claim, ClaimGroup
from clusters.models import Cluster
from nvke.errors import Conflict, DomainError
from nvke.tenancy.context import TenantContext

NOT_YET_TRIED = "Waiting for its group to be placed."


def create_group(
    *,
    context: TenantContext,
    cluster: Cluster,
    name: str,
    members: int,
    min_members: int,
    names: list[str] | None = None,
    **member: object,
) -> ClaimGroup:
    """A group of `members` identical claims (`member`: the claim fields, as create_claim takes them),
    named <name>-0, <name>-1, ... (or `names`: an adopted gang's pods or claims); validated and refused
    (400) as one claim is, then placed at once as a unit: at least `min_members` of them, or none."""
    if cluster.status in (Cluster.Status.DELETING, Cluster.Status.FAILED):
        raise Conflict(f"Cluster {cluster.name} is {cluster.status}; it takes no claims.", field="cluster")
    if not 1 <= min_members <= members:
        raise DomainError(f"min_members must be 1..members ({members}).", field="min_members")
    if names is None and len(name) + len(f"-{members - 1}") > 63:
        raise DomainError("The name leaves no room for its members' suffixes (-0, -1, ...).", field="name")
    names = names or [f"{name}-{i}" for i in range(members)]
    group = ClaimGroup(
        tenant=context.tenant,
        cluster=cluster,
        namespace=member.get("namespace", "default"),
        name=name,
        members=members,
        min_members=min_members,
        priority=member.get("priority", 0),
    )
    if member.get("queue") is None:
        member["queue"] = admission.queue_for(cluster.pk, group.namespace)
    elif member["queue"].cluster_id != cluster.pk:
        raise DomainError(f"Queue {member['queue']} is not a queue of cluster {cluster.name}.", field="queue")
    claims = [
        Claim(tenant=context.tenant, cluster=cluster, name=claim_name, pending_reason=NOT_YET_TRIED, **member)
        for claim_name in names
    ]
    try:
        validate_claim(claims[0])
        if refusal := refusal_if_never_fits(claims[0]):
            raise DomainError(
                f"No member of group {group} could ever fit: {refusal}", field=field_at_fault(refusal)
            )
    except DomainError as error:  # the member's fields are the template's
        field = error.field if error.field in ("name", "cluster") else f"template.{error.field}"
        raise DomainError(error.message, field=field) from None
    with transaction.atomic():
        try:
            with transaction.atomic():
                group.save()
        except IntegrityError:
            raise Conflict(
                f"Cluster {cluster.name} already has a group named {group}.", field="name", code="duplicate"
            ) from None
        _insert_members(context, group, claims)
        with allocation_lock(cluster.pk):
            snap = CACHE.snapshot(cluster.pk)
            write_outcomes(claims, place_group(group, claims, snap, admission.load_book(snap)), snap)
    return group


def _insert_members(context: TenantContext, group: ClaimGroup, claims: list[Claim]) -> None:
    for claim in claims:
        claim.group = group
        quotas.check_claim(context.tenant, claim)
        try:
            with transaction.atomic():
                audit.insert(claim)
        except IntegrityError:
            raise Conflict(
                f"Cluster {group.cluster.name} already has a claim named {claim}.",
                field="name",
                code="duplicate",
            ) from None
        CACHE.workload(group.cluster_id).record(request_of(claim))


SHAPE = ("kind", "gpus", "gpu_memory_mib", "compute_percent", "mig_profile")


def adopt_members(
    *,
    context: TenantContext,
    cluster: Cluster,
    name: str,
    min_members: int,
    members: list[tuple[str, dict]],
) -> ClaimGroup | None:
    """The requests of a Kubernetes gang's pods, found on the cluster (each its name and create_claim's
    fields, alike), adopted as members of the claim group named after the gang: a new group once at
    least `min_members` are found (fewer: None, nothing made; the provider tells the pods), else more
    members of the group there is, placed where they fit. Refused (DomainError, said on every pod) when
    they ask for different GPUs: a gang's members are alike."""
    fields = [member for _, member in members]
    namespace = fields[0]["namespace"]
    group = ClaimGroup.objects.filter(cluster=cluster, namespace=namespace, name=name).first()
    if group is None and len(members) < min_members:
        return None
    existing = Claim.objects.filter(group=group).values(*SHAPE).first() if group else None
    shapes = {tuple(f.get(k) for k in SHAPE) for f in fields} | (
        {tuple(existing.values())} if existing else set()
    )
    if len(shapes) > 1:
        raise DomainError(
            f"The pods of group {namespace}/{name} ask for different GPUs; NVKE places a group of alike "
            "members (one GPU request each, the same).",
            field="group",
        )
    names = [member_name for member_name, _ in members]
    if group is None:
        return create_group(
            context=context,
            cluster=cluster,
            name=name,
            members=len(members),
            min_members=min_members,
            names=names,
            **fields[0],
        )
    member = {**fields[0], "queue": fields[0].get("queue") or admission.queue_for(cluster.pk, namespace)}
    claims = [
        Claim(tenant=context.tenant, cluster=cluster, name=claim_name, pending_reason=NOT_YET_TRIED, **member)
        for claim_name in names
    ]
    with transaction.atomic():
        _insert_members(context, group, claims)
        group = ClaimGroup.objects.select_for_update().get(pk=group.pk)
        group.members += len(claims)
        group.save(update_fields=["members"])  # audited, as any change of a group
        with allocation_lock(cluster.pk):
            snap = CACHE.snapshot(cluster.pk)
            pending = list(
                Claim.objects.filter(group=group, status=Claim.Status.PENDING).select_related("pool")
            )
            write_outcomes(pending, place_group(group, pending, snap, admission.load_book(snap)), snap)
    return group


def release_group(group: ClaimGroup) -> None:
    """Free every member's capacity at once and delete the group; pending claims get another try."""
    with allocation_lock(group.cluster_id):
        snap = CACHE.snapshot(group.cluster_id)
        members = list(Claim.objects.filter(group=group))
        for claim in members:
            publish_claim(claim, "claim.released", pool=snap.pool_holding(claim.pk) or claim.pool_id)
        group.delete()  # its members with it
        for claim in members:
            snap.remove(claim.pk)
        request_placement(group.cluster_id)


def place_group(
    group: ClaimGroup, pending: list[Claim], snap: Snapshot, book: Book | None = None
) -> list[tuple[Claim, core.Placement]]:
    """Place the group's pending members as a unit, applied to the snapshot: at least as many as take it
    to its minimum, in the tightest domain, and only if their queue admits them all (`book`); else
    none, each member left pending with the group's reason. Sets each member's status; the caller
    writes the rows."""
    placed_already = placed_members(group, snap)
    minimum = max(0, group.min_members - placed_already)
    first = pending[0]
    request = request_of(first)
    best = _best_gang(pending, minimum, snap)
    now = timezone.now()
    if not isinstance(best, core.gangs.GangPlacement):
        fits = best.fits if best else 0
        reason = _waiting(group, request, minimum, fits, placed_already)
        if fits == 0:
            reason += f" One member alone: {find_placement(first, snap)[1]}"
        for claim in pending:
            claim.status, claim.pending_reason, claim.allocated_at = Claim.Status.PENDING, reason, None
        return []
    placed = list(zip(pending, best.placements, strict=False))
    if refusal := admission.admits_group(book, first.queue_id, placed, snap):
        for claim in pending:
            claim.status, claim.pending_reason, claim.allocated_at = Claim.Status.PENDING, refusal, None
        return []
    for claim, placement in placed:
        snap.apply(claim.pk, placement)
        claim.status, claim.pending_reason, claim.allocated_at = Claim.Status.ALLOCATED, "", now
    rest = (
        f"Group {group} is placed with {placed_already + len(placed)} of its {group.members} members "
        "(its minimum is met); this one waits for capacity."
    )
    for claim in pending[len(placed) :]:
        claim.status, claim.pending_reason, claim.allocated_at = Claim.Status.PENDING, rest, None
    return placed


def placed_members(group: ClaimGroup, snap: Snapshot) -> int:
    member_ids = Claim.objects.filter(group_id=group.pk).values_list("pk", flat=True)
    return sum(1 for pk in member_ids if pk in snap.inventory.placements)


def gang_fits(pending: list[Claim], minimum: int, snap: Snapshot) -> bool:
    """Whether at least `minimum` of the pending members would be placed now (reads only)."""
    return isinstance(_best_gang(pending, minimum, snap), core.gangs.GangPlacement)


def _best_gang(
    pending: list[Claim], minimum: int, snap: Snapshot
) -> core.gangs.GangPlacement | core.gangs.GangShortfall | None:
    """The most members of the pool that places the most (all of them in the first that can)."""
    request = request_of(pending[0])
    best: core.gangs.GangPlacement | core.gangs.GangShortfall | None = None
    for pool in candidate_pools(pending[0], snap.inventory):
        fleet = snap.fleets[pool.pk]
        found = core.gangs.place_gang(
            request, len(pending), minimum, fleet, snap.inventory.topology, _on_node
        )
        if _more(found, best):
            best = found
        if isinstance(found, core.gangs.GangPlacement) and len(found.placements) == len(pending):
            break
    return best


def _on_node(fleet: core.Fleet, request: core.Request) -> core.Placement | None:
    """Where a member goes on one node: packed (the gang chose the node; the pool's policy chose nodes)."""
    return fleet.place(request, "binpack") or None


def _more(found, best) -> bool:
    """A placement beats a shortfall; more members beat fewer."""
    if best is None:
        return True
    size = len(found.placements) if isinstance(found, core.gangs.GangPlacement) else -1
    best_size = len(best.placements) if isinstance(best, core.gangs.GangPlacement) else -1
    if size != best_size:
        return size > best_size
    return isinstance(found, core.gangs.GangShortfall) and found.fits > best.fits


def _waiting(group: ClaimGroup, request: core.Request, minimum: int, fits: int, placed: int) -> str:
    member = _member_shape(request)
    if minimum == 0:
        return (
            f"Group {group} is placed with {placed} of its {group.members} members; this one waits for room."
        )
    return (
        f"Group {group} holds nothing: it needs {minimum} members of {member} placed at once "
        f"(its minimum is {group.min_members} of {group.members}) and only {fits} fit now; "
        f"it lacks room for {minimum - fits}."
    )


def _member_shape(request: core.Request) -> str:
    if request.kind == "whole":
        return f"{request.gpus} whole GPU{'s' if request.gpus > 1 else ''}"
    if request.kind == "mig":
        return f"a {request.mig_profile} MIG slice"
    return f"{request.compute_milli / 10:g}% of a GPU"
