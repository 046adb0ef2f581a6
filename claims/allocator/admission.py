"""Queues under the allocation lock: a pass's book of what each queue of the cluster uses and may still
admit (`claims.allocation.queues` keeps it), the queue a new claim falls to, and placing a claim
within its queue's quota. Usage is counted from the snapshot's placements, so the book is as current
as the placements it admits against, and every admission is made holding the cluster's lock: never
past nominal + borrowing limit, however many processes place at once."""

from collections import defaultdict
from collections.abc import Iterable, Iterator

from django.db.models import Count, Sum

from catalog.models import GpuModel
from claims import allocation as core
from claims.allocation.queues import Book, Quota, Use
from claims.allocator.inventory import Snapshot
from claims.allocator.placing import find_placement
from claims.models import Claim, GpuShare, Queue


def queue_for(cluster_id: int, namespace: str) -> Queue | None:
    """The queue a claim in the namespace falls to when it names none."""
    # Filtered here, not in SQL: SQLite has no JSON containment, and a cluster has a handful of queues.
    return next((q for q in Queue.objects.filter(cluster_id=cluster_id) if namespace in q.namespaces), None)


def quota_of(entry: dict, memory_per_gpu: int) -> Quota:
    """One `Queue.quotas` entry as the book's quota: nominal memory defaults to its GPUs' memory."""
    memory = entry.get("gpu_memory_mib")
    nominal = Use(entry["gpus"], entry["gpus"] * memory_per_gpu if memory is None else memory)
    return Quota(nominal, memory_per_gpu, entry.get("borrowing_limit"), entry.get("lending_limit"))


def book_of(queues: Iterable[Queue]) -> Book:
    memory = dict(GpuModel.objects.values_list("name", "memory_mib"))
    quotas = {
        q.pk: {e["gpu_model"]: quota_of(e, memory.get(e["gpu_model"], 0)) for e in q.quotas} for q in queues
    }
    return Book(quotas, {q.pk: q.cohort for q in queues})


def load_book(snap: Snapshot) -> Book | None:
    """The cluster's queues with what their placed claims hold now; None when it has no queues (claims
    are placed as they always were)."""
    queues = list(Queue.objects.filter(cluster_id=snap.cluster_id))
    if not queues:
        return None
    book = book_of(queues)
    placed = Claim.objects.filter(
        cluster_id=snap.cluster_id, queue__isnull=False, status=Claim.Status.ALLOCATED
    )
    for pk, queue_id in placed.values_list("pk", "queue_id"):
        if (placement := snap.inventory.placements.get(pk)) is not None:
            book.charge(queue_id, model_of(snap, placement), use_of(placement))
    return book


def model_of(snap: Snapshot, placement: core.Placement) -> str:
    return snap.node(placement.node_id).gpu_model


def use_of(placement: core.Placement) -> Use:
    """What a placement holds: whole GPUs (exclusive ones), and the GPU memory of all its shares."""
    gpus = len(placement.gpu_indexes)
    return Use(gpus if placement.isolation == "exclusive" else 0, placement.memory_mib * gpus)


def place(
    claim: Claim, snap: Snapshot, book: Book | None, keep_model: str = ""
) -> tuple[core.Placement | None, str]:
    """Where the claim fits among GPU models its queue admits it on (those of `keep_model` first, as
    `find_placement`); else why it waits (its queue's reason when the fleet had room). Charges the book
    with what it places; the caller applies it."""
    if book is None or claim.queue_id is None:
        return find_placement(claim, snap, keep_model)
    refused: set[str] = set()
    why = ""
    while True:
        placement, reason = find_placement(claim, snap, keep_model, refused)
        if placement is None:
            return None, f"Waiting for its queue's quota: {why}." if why else reason
        model = model_of(snap, placement)
        if not (why := book.refusal(claim.queue_id, model, use_of(placement))):
            book.charge(claim.queue_id, model, use_of(placement))
            return placement, ""
        refused.add(model)


def admits_group(
    book: Book | None, queue_id: int | None, placed: list[tuple[Claim, core.Placement]], snap: Snapshot
) -> str:
    """Why the queue cannot admit a group's placed members together ("" when it can; then charged)."""
    if book is None or queue_id is None or not placed:
        return ""
    total: dict[str, Use] = defaultdict(Use)
    for _, placement in placed:
        total[model_of(snap, placement)] += use_of(placement)
    for model, use in total.items():
        if why := book.refusal(queue_id, model, use):
            return f"Waiting for its queue's quota: {why}."
    for model, use in total.items():
        book.charge(queue_id, model, use)
    return ""


def in_fair_order(claims: list[Claim], book: Book | None) -> Iterator[Claim]:
    """The claims in their order, except that across queues the next is the first claim of the queue
    whose dominant share of what it borrows would be smallest once that claim is admitted (Kueue's
    fair sharing); asked again after each, as each placement moves the shares. Claims without a queue
    keep their place, at share 0."""
    if book is None:
        yield from claims
        return
    lines: dict[int | None, list[tuple[int, Claim]]] = defaultdict(list)
    for i, claim in enumerate(reversed(claims)):  # each line popped from its end: its first claim
        lines[claim.queue_id].append((len(claims) - 1 - i, claim))
    while lines:
        queue = min(lines, key=lambda q: (_share_with(book, lines[q][-1][1]), lines[q][-1][0]))
        yield lines[queue].pop()[1]
        if not lines[queue]:
            del lines[queue]


def _share_with(book: Book, claim: Claim) -> float:
    """The queue's dominant share once the claim is admitted, on the GPU model where it would be least."""
    if claim.queue_id is None:
        return 0.0
    models = book.quotas[claim.queue_id] or {"": None}
    return min(book.share(claim.queue_id, (model, ask(claim, book, model))) for model in models)


def ask(claim: Claim, book: Book, model: str) -> Use:
    """About what the claim would hold of the model, before it is placed (for reclaim's "is its queue
    within nominal?"; admission itself checks the placement's own figures): whole GPUs and their memory,
    a fraction's memory (its compute share of the GPU's when it names none); a MIG slice, nothing."""
    quota = book.quotas[claim.queue_id].get(model)
    per_gpu = quota.memory_per_gpu if quota else 0
    if claim.kind == Claim.Kind.WHOLE:
        return Use(claim.gpus, claim.gpus * per_gpu)
    if claim.kind == Claim.Kind.FRACTION:
        return Use(0, claim.gpu_memory_mib or per_gpu * (claim.compute_percent or 100) // 100)
    return Use()


def standing(queues: list[Queue]) -> dict[int, dict]:
    """Each queue as it stands, read from the rows (no lock: a view, not a decision): per GPU model what
    it has nominally, uses, borrows, lends and may still take, in GPUs and GPU memory; its dominant
    share of what it borrows; its pending claims by priority. `queues`: one cluster's, all of them."""
    book = book_of(queues)
    shares = GpuShare.objects.filter(allocation__claim__queue__in=queues)
    for queue_id, model, exclusive, memory in shares.values_list(
        "allocation__claim__queue_id", "gpu__node__pool__gpu_model__name", "exclusive", "memory_mib"
    ):
        book.charge(queue_id, model, Use(int(exclusive), memory))
    waiting = (
        Claim.objects.filter(queue__in=queues, status=Claim.Status.PENDING)
        .values("queue_id", "priority")
        .annotate(claims=Count("pk"), gpus=Sum("gpus"))
        .order_by("-priority")
    )
    pending: dict[int, list[dict]] = defaultdict(list)
    for row in waiting:
        pending[row.pop("queue_id")].append(row)
    result = {}
    for queue in queues:
        models = sorted(set(book.quotas[queue.pk]) | {m for m, _ in book.usage[queue.pk]})
        result[queue.pk] = {
            "models": [
                {"gpu_model": m, **{key: _figures(book, queue.pk, m, r) for key, r in FIGURES}}
                for m in models
            ],
            "share": round(book.share(queue.pk), 4),
            "pending": pending[queue.pk],
        }
    return result


FIGURES = (("gpus", "gpus"), ("gpu_memory_mib", "memory"))


def _figures(book: Book, queue: int, model: str, resource: str) -> dict[str, int]:
    nominal, used = book.nominal(queue, model, resource), book.used(queue, model, resource)
    return {
        "nominal": nominal,
        "used": used,
        "borrowed": max(0, used - nominal),
        "lent": book.lent(queue, model, resource),
        "available": book.available(queue, model, resource),
    }
