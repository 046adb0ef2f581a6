"""GPU claims: create (placed at once when capacity allows), release, place what is pending, defragment.

One service around one pure placement core (`nodepools.allocation`). Every placement in a cluster runs
under that cluster's allocation lock, reads the inventory fresh inside it, and writes the allocation in
the same transaction, so concurrent workers never over-commit a GPU."""

import datetime
import functools
import json
import threading
import time
from collections import Counter
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

from django.db import IntegrityError, connection, transaction
from django.db.models import Sum
from django.utils import timezone

from clusters.models import Cluster
from nvke.errors import Conflict, DomainError
from nvke.models import check_dns_label
from nvke.realtime import broadcast
from nvke.tenancy.context import TenantContext

from . import allocation as core
from . import claim_rows, quotas
from .allocation import fleet
from .allocation.state import unplaceable
from .claim_rows import AllocationRow, Outcome, ShareRow
from .models import Allocation, AllocationEvent, Claim, Gpu, GpuModel, GpuShare, Node, NodePool, SharingMode

LOCK_NAMESPACE = 0x4E564B45  # "NVKE": advisory-lock key space of the allocator
# SQLite (the embedded default) is one process: a thread lock suffices. Re-entrant, because on-commit
# callbacks (an eager placement pass after a release) run before the lock is let go.
_sqlite_lock = threading.RLock()
RECENT_SHAPES = 500  # claims that make up the workload FGD measures fragmentation against
CATALOG_TTL_S = 60  # how long a "never fits the catalog" answer is reused


@contextmanager
def allocation_lock(cluster_id: int) -> Iterator[None]:
    """A transaction holding the cluster's allocation lock until it commits. If it rolls back, this
    process's in-memory inventory of the cluster may hold changes that never happened: drop it."""
    try:
        if connection.vendor == "postgresql":
            # Inside a caller's transaction, join it: no savepoint round trips while the lock is held.
            # An error in here fails that whole transaction, as it propagates anyway.
            with transaction.atomic(savepoint=False):
                # One round trip: the lock, and the log entries this process's snapshot has not seen.
                snap = _snapshots.get(cluster_id)
                after = snap.last_event if snap else None
                with connection.cursor() as cursor:
                    cursor.execute(
                        "SELECT * FROM nvke_allocation_lock(%s, %s, %s)", [LOCK_NAMESPACE, cluster_id, after]
                    )
                    _log_tails[cluster_id] = (after, cursor.fetchall())
                yield
        else:
            with _sqlite_lock, transaction.atomic(savepoint=False):
                yield
    except BaseException:
        _snapshots.pop(cluster_id, None)
        raise
    finally:
        _log_tails.pop(cluster_id, None)


# --- claim shapes ------------------------------------------------------------------------------------


def request_of(claim: Claim) -> core.Request:
    """The pure core's view of a claim."""
    common = {
        "cpu_milli": claim.cpu_milli,
        "host_memory_mib": claim.host_memory_mib,
        "allowed_models": frozenset(claim.allowed_models),
    }
    if claim.kind == Claim.Kind.WHOLE:
        return core.Request("whole", gpus=claim.gpus, nvlink_required=claim.nvlink_required, **common)
    if claim.kind == Claim.Kind.MIG:
        return core.Request("mig", mig_profile=claim.mig_profile, **common)
    return core.Request(
        "fraction",
        memory_mib=claim.gpu_memory_mib or 0,
        compute_milli=(claim.compute_percent or 0) * 10,
        **common,
    )


def validate_claim(claim: Claim) -> None:
    """Fields that belong together by kind; raises a DomainError naming the field."""
    check_dns_label(claim.name)
    check_dns_label(claim.namespace, field="namespace")
    fraction_fields = claim.gpu_memory_mib is not None or claim.compute_percent is not None
    if claim.kind == Claim.Kind.WHOLE:
        if fraction_fields or claim.mig_profile:
            raise DomainError(
                "A whole-GPU claim takes no mig_profile, gpu_memory or compute_percent.", field="kind"
            )
    elif claim.gpus != 1:
        raise DomainError(f"A {claim.kind} claim takes exactly one GPU.", field="gpus")
    elif claim.nvlink_required:
        raise DomainError("nvlink_required applies to whole-GPU claims.", field="nvlink_required")
    if claim.kind == Claim.Kind.MIG and (not claim.mig_profile or fraction_fields):
        raise DomainError("A MIG claim names a mig_profile and nothing else.", field="mig_profile")
    if claim.kind == Claim.Kind.FRACTION:
        if claim.mig_profile:
            raise DomainError("A fraction takes no mig_profile.", field="mig_profile")
        if not claim.gpu_memory_mib and not claim.compute_percent:
            raise DomainError("A fraction asks for gpu_memory and/or compute_percent.", field="gpu_memory")
    unknown = claim.allowed_models and sorted(
        set(claim.allowed_models) - set(GpuModel.objects.values_list("name", flat=True))
    )
    if unknown:
        raise DomainError(f"Unknown GPU model {unknown[0]!r}.", field="allowed_models")
    if claim.pool_id and claim.pool.cluster_id != claim.cluster_id:
        raise DomainError("The pool belongs to another cluster.", field="pool")


# --- inventory ---------------------------------------------------------------------------------------


def _profiles(pool: NodePool) -> list[core.Profile]:
    """The MIG profiles a pool's GPUs can be cut into. A static layout pins each profile to the starts
    the layout gives it, so claims only land on the slices the layout creates."""
    profiles = [
        core.Profile(p.name, p.compute_slices, p.memory_slices, tuple(p.placements), p.max_instances)
        for p in pool.gpu_model.mig_profiles.all()
    ]
    if not pool.mig_layout:
        return profiles
    by_name = {p.name: p for p in profiles}
    starts = core.place_layout([by_name[name] for name in pool.mig_layout], profiles) or []
    pinned = []
    for p in profiles:  # a profile outside the layout keeps its geometry but no start and no instance
        mine = tuple(start for name, start in zip(pool.mig_layout, starts, strict=True) if name == p.name)
        pinned.append(core.Profile(p.name, p.compute_slices, p.memory_slices, mine, len(mine)))
    return pinned


def pool_shape(pool: NodePool) -> core.NodeState:
    """An empty node of the pool: what fits_ever compares a claim against."""
    model = pool.gpu_model
    nvlink = "board" if model.nvlink and pool.gpus_per_node > 1 else ""
    return core.NodeState(
        id=f"shape-{pool.pk}",
        gpu_model=model.name,
        sharing_mode=pool.sharing_mode,
        gpus=[core.GpuState(i, model.memory_mib, nvlink_domain=nvlink) for i in range(pool.gpus_per_node)],
        cpu_milli_total=model.host_cpus_per_gpu * pool.gpus_per_node * 1000,
        memory_mib_total=model.host_memory_gib_per_gpu * pool.gpus_per_node * 1024,
        mig_profiles=_profiles(pool) if pool.sharing_mode == SharingMode.MIG else [],
    )


def catalog_shapes() -> list[core.NodeState]:
    """Every node the catalog could give a new pool: each GPU model, full board, each sharing mode."""
    shapes = []
    for model in GpuModel.objects.prefetch_related("mig_profiles"):
        modes = [m for m in SharingMode.values if m != SharingMode.MIG or model.supports_mig]
        for mode in modes:
            pool = NodePool(gpu_model=model, gpus_per_node=model.max_gpus_per_node, sharing_mode=mode)
            shapes.append(pool_shape(pool))
    return shapes


@dataclass
class Inventory:
    """A cluster's schedulable state, loaded inside the allocation lock."""

    pools: list[NodePool]
    nodes: dict[int, core.NodeState] = field(default_factory=dict)  # by Node pk
    pool_nodes: dict[int, list[core.NodeState]] = field(default_factory=dict)  # by NodePool pk
    gpu_pk: dict[tuple[int, int], int] = field(default_factory=dict)  # (node pk, index) -> Gpu pk
    placements: dict[int, core.Placement] = field(default_factory=dict)  # by Claim pk


def load_inventory(cluster_id: int, *, placements: bool = False) -> Inventory:
    """The cluster's nodes and GPUs with what is allocated on them, in a handful of flat queries (this
    runs inside the allocation lock for every claim). `placements` also rebuilds each claim's placement,
    which only defragmentation needs."""
    pools = list(
        NodePool.objects.filter(cluster_id=cluster_id)
        .exclude(status=NodePool.Status.DELETING)
        .select_related("gpu_model")
        .prefetch_related("gpu_model__mig_profiles")
        .order_by("name")
    )
    inventory = Inventory(pools=pools, pool_nodes={pool.pk: [] for pool in pools})
    by_pool = {pool.pk: pool for pool in pools}
    profiles = {pool.pk: _profiles(pool) for pool in pools if pool.sharing_mode == SharingMode.MIG}
    node_rows = Node.objects.filter(pool__in=pools).order_by("name")
    for pk, pool_id, status, cordoned, cpu, memory in node_rows.values_list(
        "pk", "pool_id", "status", "cordoned", "cpu_millicores", "memory_mib"
    ):
        pool = by_pool[pool_id]
        state = core.NodeState(
            id=pk,
            gpu_model=pool.gpu_model.name,
            sharing_mode=pool.sharing_mode,
            gpus=[],
            cpu_milli_total=cpu,
            memory_mib_total=memory,
            schedulable=status == Node.Status.READY and not cordoned,
            mig_profiles=profiles.get(pool_id, []),
        )
        inventory.nodes[pk] = state
        inventory.pool_nodes[pool_id].append(state)
    gpus: dict[int, core.GpuState] = {}
    gpu_rows = Gpu.objects.filter(node__pool__in=pools).order_by("node_id", "index")
    for pk, node_id, index, memory, nvlink, healthy in gpu_rows.values_list(
        "pk", "node_id", "index", "memory_mib", "nvlink_domain", "healthy"
    ):
        gpus[pk] = core.GpuState(index, memory, nvlink_domain=nvlink, healthy=healthy)
        inventory.nodes[node_id].gpus.append(gpus[pk])
        inventory.gpu_pk[node_id, index] = pk
    shares = GpuShare.objects.filter(gpu__node__pool__in=pools)
    for gpu_id, memory, compute, exclusive, profile, start, size in shares.values_list(
        "gpu_id", "memory_mib", "compute_milli", "exclusive", "mig_profile", "mig_start", "mig_size"
    ):
        gpu = gpus[gpu_id]
        gpu.memory_used_mib += memory
        gpu.compute_used += compute
        gpu.exclusive |= exclusive
        if start is not None:
            gpu.mig_used.append(core.MigSlice(start, size, profile))
    host = Allocation.objects.filter(node__pool__in=pools).values("node_id")
    for row in host.annotate(cpu=Sum("cpu_milli"), memory=Sum("host_memory_mib")):
        node = inventory.nodes[row["node_id"]]
        node.cpu_milli_used, node.memory_mib_used = row["cpu"], row["memory"]
    if placements:
        inventory.placements = _placements(pools)
    return inventory


def _placements(pools: list[NodePool]) -> dict[int, core.Placement]:
    """Each allocated claim's placement, rebuilt from its allocation rows."""
    result = {}
    allocations = Allocation.objects.filter(node__pool__in=pools).select_related("claim")
    for alloc in allocations.prefetch_related("shares__gpu"):
        shares = sorted(alloc.shares.all(), key=lambda s: s.gpu.index)
        first = shares[0] if shares else None
        result[alloc.claim_id] = core.Placement(
            node_id=alloc.node_id,
            gpu_indexes=tuple(s.gpu.index for s in shares),
            memory_mib=first.memory_mib if first else 0,
            compute_milli=first.compute_milli if first else 0,
            isolation=alloc.isolation,
            request=request_of(alloc.claim),
            mig_start=first.mig_start if first else None,
            mig_size=(first.mig_size or 0) if first else 0,
        )
    return result


# --- the in-memory inventory, kept in step with the allocation log --------------------------------------


def _placement_json(claim_id: int, p: core.Placement) -> dict:
    r = p.request
    return {
        "node": p.node_id,
        "gpus": list(p.gpu_indexes),
        "memory_mib": p.memory_mib,
        "compute_milli": p.compute_milli,
        "isolation": p.isolation,
        "mig_start": p.mig_start,
        "mig_size": p.mig_size,
        "request": {
            "kind": r.kind,
            "gpus": r.gpus,
            "nvlink_required": r.nvlink_required,
            "mig_profile": r.mig_profile,
            "memory_mib": r.memory_mib,
            "compute_milli": r.compute_milli,
            "cpu_milli": r.cpu_milli,
            "host_memory_mib": r.host_memory_mib,
            "allowed_models": sorted(r.allowed_models),
        },
    }


def _placement_of(data: dict) -> core.Placement:
    return core.Placement(
        node_id=data["node"],
        gpu_indexes=tuple(data["gpus"]),
        memory_mib=data["memory_mib"],
        compute_milli=data["compute_milli"],
        isolation=data["isolation"],
        request=core.Request(**data["request"]),
        mig_start=data["mig_start"],
        mig_size=data["mig_size"],
    )


class Snapshot:
    """One process's copy of a cluster's inventory, with a placement `Fleet` per pool. Used only inside
    the allocation lock: it catches up on the log first, and every change it makes is logged."""

    MAX_AGE_S = 300  # reload now and then: bounds the fleets' internal logs, survives log pruning

    def __init__(self, cluster_id: int) -> None:
        self.cluster_id = cluster_id
        self.inventory = load_inventory(cluster_id, placements=True)
        cache = core.PlacementCache()
        self.fleets = {pk: core.Fleet(nodes, cache) for pk, nodes in self.inventory.pool_nodes.items()}
        self.pool_of = {node.id: pk for pk, nodes in self.inventory.pool_nodes.items() for node in nodes}
        self.fleet_of = {node_id: self.fleets[pk] for node_id, pk in self.pool_of.items()}
        last = (
            AllocationEvent.objects.filter(cluster_id=cluster_id).order_by("-id").values_list("id", flat=True)
        )
        self.last_event = last.first() or 0
        self.loaded_at = time.monotonic()

    def catch_up(self) -> bool:
        """Apply what other processes logged since; False when a reload is needed instead."""
        if time.monotonic() - self.loaded_at > self.MAX_AGE_S:
            return False
        for event_id, kind, claim_id, placement in self._unseen_log():
            if kind == AllocationEvent.Kind.RESET:
                return False
            if kind == AllocationEvent.Kind.ADD:
                self.apply(claim_id, _placement_of(placement))
            else:
                self._release(claim_id)
            self.last_event = event_id
        return True

    def _unseen_log(self) -> Iterable[tuple[int, str, int | None, dict | None]]:
        after, rows = _log_tails.get(self.cluster_id, (None, None))
        if rows is not None and after == self.last_event:  # fetched with the lock
            # Django's PostgreSQL backend hands jsonb to raw cursors as text.
            return ((i, kind, c, json.loads(p) if p else None) for i, kind, c, p in rows)
        events = AllocationEvent.objects.filter(cluster_id=self.cluster_id, id__gt=self.last_event)
        return events.order_by("id").values_list("id", "kind", "claim_id", "placement")

    def apply(self, claim_id: int, placement: core.Placement) -> None:
        """In memory only: the caller writes the allocation and logs it (`_write_pass`)."""
        self.fleet_of[placement.node_id].apply(placement)
        self.inventory.placements[claim_id] = placement

    def pool_holding(self, claim_id: int) -> int | None:
        """The pool the claim is placed in, if it is."""
        placement = self.inventory.placements.get(claim_id)
        return self.pool_of[placement.node_id] if placement is not None else None

    def _release(self, claim_id: int) -> None:
        placement = self.inventory.placements.pop(claim_id, None)
        if placement is not None:
            self.fleet_of[placement.node_id].release(placement)

    def _log(self, events: list[AllocationEvent]) -> None:
        # One insert; ids come in list order, and we hold the lock, so the log stays in commit order.
        self.last_event = max(e.pk for e in AllocationEvent.objects.bulk_create(events))

    def remove(self, claim_id: int) -> None:
        if claim_id in self.inventory.placements:
            self._release(claim_id)
            self._log(
                [
                    AllocationEvent(
                        cluster_id=self.cluster_id, kind=AllocationEvent.Kind.REMOVE, claim_id=claim_id
                    )
                ]
            )


_snapshots: dict[int, Snapshot] = {}
# Per cluster: the log entries after a given id, read with the lock by `allocation_lock` (PostgreSQL).
_log_tails: dict[int, tuple[int | None, list[tuple]]] = {}
LOG_RETENTION_S = 2 * Snapshot.MAX_AGE_S  # a snapshot reloads before the entries it needs are pruned


def prune_log() -> int:
    cutoff = timezone.now() - datetime.timedelta(seconds=LOG_RETENTION_S)
    return AllocationEvent.objects.filter(created_at__lt=cutoff).delete()[0]


def snapshot(cluster_id: int) -> Snapshot:
    """The cluster's current inventory; call with the allocation lock held."""
    snap = _snapshots.get(cluster_id)
    if snap is None or not snap.catch_up():
        snap = _snapshots[cluster_id] = Snapshot(cluster_id)
    return snap


# --- placing -----------------------------------------------------------------------------------------


_workloads: dict[int, core.Workload] = {}


def workload_for(cluster_id: int) -> core.Workload:
    """The recent mix of claim shapes in the cluster (FGD's target workload), kept per process."""
    workload = _workloads.get(cluster_id)
    if workload is None:
        recent = Claim.objects.filter(cluster_id=cluster_id).order_by("-created_at")[:RECENT_SHAPES]
        workload = _workloads[cluster_id] = core.Workload(
            [request_of(c) for c in reversed(recent)], window=RECENT_SHAPES, refresh_every=50
        )
    return workload


def _candidate_pools(claim: Claim, inventory: Inventory) -> list[NodePool]:
    pools = [p for p in inventory.pools if not claim.pool_id or p.pk == claim.pool_id]
    # Whole GPUs go to exclusive pools first; sharing pools give them only idle GPUs.
    return sorted(pools, key=lambda p: claim.kind == Claim.Kind.WHOLE and p.sharing_mode != "exclusive")


def find_placement(claim: Claim, snap: "Snapshot") -> tuple[core.Placement | None, str]:
    """The first candidate pool (in order) that fits, by that pool's policy; else why nothing fits."""
    request = request_of(claim)
    workload = workload_for(claim.cluster_id)
    counts: Counter[str] = Counter()
    total = 0
    for pool in _candidate_pools(claim, snap.inventory):
        nodes = snap.inventory.pool_nodes[pool.pk]
        total += len(nodes)
        if not nodes:
            continue
        result = snap.fleets[pool.pk].place(request, pool.placement_policy, workload)
        if result:
            return result, ""
        counts.update(result.counts)
    if total == 0:
        return None, "No ready GPU nodes in the cluster" + (" pool." if claim.pool_id else ".")
    return None, unplaceable(counts, total).reason


def _write_pass(
    snap: "Snapshot", placed: list[tuple[Claim, core.Placement]], outcomes: list[Outcome]
) -> None:
    """Rows for placements already applied to the snapshot (allocations, GPU shares, log entries) and the
    claims' new status, in one statement on PostgreSQL however many claims."""
    last = claim_rows.write(
        claim_rows.Pass(
            cluster_id=snap.cluster_id,
            allocations=[
                AllocationRow(claim.pk, p.node_id, p.isolation, claim.cpu_milli, claim.host_memory_mib)
                for claim, p in placed
            ],
            shares=[
                ShareRow(
                    claim_id=claim.pk,
                    gpu_id=snap.inventory.gpu_pk[p.node_id, index],
                    memory_mib=p.memory_mib,
                    compute_milli=p.compute_milli,
                    exclusive=claim.kind == Claim.Kind.WHOLE,
                    mig_profile=claim.mig_profile if p.mig_start is not None else "",
                    mig_start=p.mig_start,
                    mig_size=p.mig_size or None,
                )
                for claim, p in placed
                for index in p.gpu_indexes
            ],
            log=[(claim.pk, _placement_json(claim.pk, p)) for claim, p in placed],
            outcomes=outcomes,
        )
    )
    if last is not None:
        snap.last_event = last


def _place_all(claims: list[Claim], snap: "Snapshot") -> int:
    """Place what fits, in order (each placement counts for the next), record why the rest wait, and
    write it all in a handful of statements. Returns how many were placed."""
    placed = []
    now = timezone.now()
    for claim in claims:
        placement, reason = find_placement(claim, snap)
        if placement is not None:
            snap.apply(claim.pk, placement)
            placed.append((claim, placement))
            claim.status, claim.pending_reason, claim.allocated_at = Claim.Status.ALLOCATED, "", now
        else:
            claim.status, claim.pending_reason, claim.allocated_at = Claim.Status.PENDING, reason, None
    _write_pass(snap, placed, [Outcome(c.pk, c.status, c.pending_reason, c.allocated_at) for c in claims])
    for claim in claims:
        _publish(claim, pool=snap.pool_holding(claim.pk) or claim.pool_id)
    return len(placed)


def _publish(claim: Claim, type_: str = "claim.status", *, pool: int | None, **extra) -> None:
    """`pool`: where the claim is placed (or, pending, the pool it asks for), so a pool's pages follow
    only their own claims."""
    event = {
        "type": type_,
        "claim": claim.pk,
        "cluster": claim.cluster_id,
        "pool": pool,
        "namespace": claim.namespace,
        "name": claim.name,
        "status": claim.status,
        "reason": claim.pending_reason,
        **extra,
    }
    broadcast(claim.tenant_id, event, cluster_id=claim.cluster_id)


def refusal_if_never_fits(claim: Claim) -> str | None:
    """Why the claim can never fit: not even an empty node of its pool, or, when it names none, of any
    pool the cluster could be given from the catalog (a missing pool is a pending reason, not a 400)."""
    if claim.pool_id:
        return core.fits_ever(request_of(claim), [pool_shape(claim.pool)])
    return _catalog_refusal(request_of(claim), int(time.monotonic() // CATALOG_TTL_S))


# Which claim field a "never fits" reason points at; reasons about where a node is (its mode, its model)
# say nothing about the claim's size and are skipped.
_FIELD_OF_REASON = {
    fleet.NO_PROFILE: "mig_profile",
    fleet.NO_MIG_PLACEMENT: "mig_profile",
    fleet.INSUFFICIENT_GPU_MEMORY: "gpu_memory",
    fleet.INSUFFICIENT_GPU_COMPUTE: "compute_percent",
    fleet.NOT_ENOUGH_GPUS: "gpus",
    fleet.NO_NVLINK: "nvlink_required",
    fleet.INSUFFICIENT_CPU: "cpu_milli",
    fleet.INSUFFICIENT_HOST_MEMORY: "host_memory_mib",
}


def field_at_fault(reason: str) -> str:
    """The field to name for a never-fits reason ("0/9 nodes: 6 insufficient GPU memory, 3 wrong sharing
    mode" → gpu_memory): the most frequent reason that is about the claim's size, else `kind`."""
    for part in reason.partition(": ")[2].split(", "):
        name = part.partition(" ")[2]
        if name in _FIELD_OF_REASON:
            return _FIELD_OF_REASON[name]
    return "kind"


@functools.lru_cache(maxsize=512)
def _catalog_refusal(request: core.Request, period: int) -> str | None:
    """Cached per claim shape for a short period: the catalog changes rarely, claims arrive often."""
    return core.fits_ever(request, _catalog_shapes(period))


@functools.lru_cache(maxsize=1)
def _catalog_shapes(period: int) -> list[core.NodeState]:
    return catalog_shapes()


def create_claim(*, context: TenantContext, cluster: Cluster, place: bool = True, **fields) -> Claim:
    """Validate, refuse what can never fit (400), then place now or leave it pending with a reason.
    With `place=False` the claim is queued: the allocator queue places it in its next batch."""
    if cluster.status in (Cluster.Status.DELETING, Cluster.Status.FAILED):
        raise Conflict(f"Cluster {cluster.name} is {cluster.status}; it takes no claims.", field="cluster")
    claim = Claim(tenant=context.tenant, cluster=cluster, **fields)
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
    # One transaction: the tenant's claim quota (it locks the tenant row when a limit applies), the claim,
    # and its placement, which takes the allocation lock only after the claim is written.
    with transaction.atomic():
        quotas.check_claim(context.tenant, claim)
        try:
            claim.save()
        except IntegrityError:  # the name is taken; leaving the block rolls back
            raise duplicate from None
        workload_for(cluster.pk).record(request_of(claim))
        if not place:
            from .tasks import request_placement

            request_placement(cluster.pk)
            return claim
        with allocation_lock(cluster.pk):
            _place_all([claim], snapshot(cluster.pk))
    return claim


def release_claim(claim: Claim) -> None:
    """Free the claim's capacity at once; pending claims of the cluster get another try."""
    from .tasks import request_placement

    with allocation_lock(claim.cluster_id):
        snap = snapshot(claim.cluster_id)
        _publish(claim, "claim.released", pool=snap.pool_holding(claim.pk) or claim.pool_id)
        Claim.objects.filter(pk=claim.pk).delete()
        snap.remove(claim.pk)
        request_placement(claim.cluster_id)


def place_pending(cluster_id: int) -> int:
    """Try every pending claim of the cluster, highest priority and oldest first; returns how many were
    placed. One inventory load for the whole pass."""
    with allocation_lock(cluster_id):
        pending = list(
            Claim.objects.filter(cluster_id=cluster_id, status=Claim.Status.PENDING)
            .select_related("pool")
            .order_by("-priority", "created_at")
        )
        if not pending:
            return 0
        return _place_all(pending, snapshot(cluster_id))


def unplace_claims_on(nodes) -> None:
    """Claims on nodes about to disappear go back to pending (their allocations go with the nodes)."""
    Claim.objects.filter(allocation__node__in=nodes).update(
        status=Claim.Status.PENDING,
        pending_reason="Its node was removed; waiting for capacity.",
        allocated_at=None,
    )


def evict_claims(cluster_id: int, claim_ids: list[int]) -> int:
    """Take allocated claims off their GPUs (a drain, a failed GPU) and place them again at once where
    they fit; the rest wait pending with the reason. Mark the node or GPU they leave unschedulable first
    (and call `topology_changed`), or they land back on it. Returns how many were placed again."""
    with allocation_lock(cluster_id):
        snap = snapshot(cluster_id)
        claims = list(
            Claim.objects.filter(cluster_id=cluster_id, pk__in=claim_ids, status=Claim.Status.ALLOCATED)
            .select_related("pool")
            .order_by("-priority", "created_at")
        )
        Allocation.objects.filter(claim__in=claims).delete()
        for claim in claims:
            snap.remove(claim.pk)
        return _place_all(claims, snap)


def topology_changed(cluster_id: int) -> None:
    """Nodes or GPUs of the cluster changed (added, removed, cordoned, health): every process reloads
    its inventory before the next placement. Call inside the transaction that made the change."""
    with allocation_lock(cluster_id):
        AllocationEvent.objects.create(cluster_id=cluster_id, kind=AllocationEvent.Kind.RESET)


# --- defragmentation ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class PlannedMove:
    claim: int
    from_node: int
    from_gpus: tuple[int, ...]
    to_node: int
    to_gpus: tuple[int, ...]
    mig_start: int | None


def _planned(moves: list[core.Move]) -> list[PlannedMove]:
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


def _idle_gpus(inventory: Inventory) -> int:
    return sum(gpu.idle() for node in inventory.nodes.values() for gpu in node.gpus)


def plan_defrag(cluster_id: int, max_moves: int) -> tuple[list[PlannedMove], int]:
    """Moves that free whole GPUs, and how many GPUs they free. Changes nothing."""
    inventory = load_inventory(cluster_id, placements=True)
    moves = core.plan_defrag(list(inventory.nodes.values()), inventory.placements, max_moves)
    before = _idle_gpus(inventory)
    for move in moves:
        core.release(move.source, inventory.nodes)
        core.apply(move.target, inventory.nodes)
    return _planned(moves), _idle_gpus(inventory) - before


def apply_defrag(cluster_id: int, max_moves: int) -> tuple[list[PlannedMove], int]:
    """Plan and carry out the moves as re-allocations, under the allocation lock."""
    with allocation_lock(cluster_id):
        snap = snapshot(cluster_id)
        before = _idle_gpus(snap.inventory)
        moves = core.plan_defrag(list(snap.inventory.nodes.values()), snap.inventory.placements, max_moves)
        claims = Claim.objects.in_bulk([m.claim_id for m in moves])
        for move in moves:
            claim = claims[move.claim_id]
            from_pool = snap.pool_holding(claim.pk)
            Allocation.objects.filter(claim=claim).delete()
            snap.remove(claim.pk)
            snap.apply(claim.pk, move.target)
            _write_pass(snap, [(claim, move.target)], [])
            _publish(claim, "claim.moved", pool=snap.pool_holding(claim.pk), from_pool=from_pool)
        return _planned(moves), _idle_gpus(snap.inventory) - before
