"""A cluster's schedulable state: loaded from the rows in a handful of flat queries, and kept per
process as a `Snapshot` that catches up on the allocation log instead of reloading. Everything this
process remembers between placements lives in one object, `CACHE`."""

import datetime
import json
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import TypeVar

from django.conf import settings
from django.db.models import Sum
from django.utils import timezone

from catalog.models import SharingMode
from claims import allocation as core
from claims.allocator.shapes import catalog_shapes, mig_profiles, request_of
from claims.models import Allocation, AllocationEvent, Claim, GpuShare
from nodepools import preflight, sharing
from nodepools.models import Gpu, Node, NodePool
from nvke import caches

RECENT_SHAPES = 500  # claims that make up the workload FGD measures fragmentation against
CATALOG_TTL_S = 60  # how long a "never fits the catalog" answer is reused
CLUSTERS_KEPT = 64  # snapshots and workloads kept per process; past it the one loaded first goes


@dataclass
class Inventory:
    """A cluster's schedulable state, loaded inside the allocation lock."""

    pools: list[NodePool]
    nodes: dict[int, core.NodeState] = field(default_factory=dict)  # by Node pk
    pool_nodes: dict[int, list[core.NodeState]] = field(default_factory=dict)  # by NodePool pk
    gpu_pk: dict[tuple[int, int], int] = field(default_factory=dict)  # (node pk, index) -> Gpu pk
    placements: dict[int, core.Placement] = field(default_factory=dict)  # by Claim pk
    # Node pk -> its NVLink domain, rack and zone as its labels name them (claim groups pack into them).
    topology: dict[int, dict[str, str]] = field(default_factory=dict)

    def idle_gpus(self) -> int:
        return sum(gpu.idle() for node in self.nodes.values() for gpu in node.gpus)


def load_inventory(cluster_id: int, *, placements: bool = False) -> Inventory:
    """The cluster's nodes and GPUs with what is allocated on them, in a handful of flat queries (this
    runs inside the allocation lock for every claim). `placements` also rebuilds each claim's placement,
    which only defragmentation needs."""
    pools = list(
        NodePool.objects.filter(cluster_id=cluster_id)
        .exclude(status=NodePool.Status.DELETING)
        .select_related("gpu_model", "cluster")
        .prefetch_related("gpu_model__mig_profiles")
        .order_by("name")
    )
    inventory = Inventory(pools=pools, pool_nodes={pool.pk: [] for pool in pools})
    by_pool = {pool.pk: pool for pool in pools}
    profiles = {pool.pk: mig_profiles(pool) for pool in pools if pool.sharing_mode == SharingMode.MIG}
    node_rows = Node.objects.filter(pool__in=pools).order_by("name")
    for pk, pool_id, status, cordoned, cpu, memory, driver, facts, labels in node_rows.values_list(
        "pk",
        "pool_id",
        "status",
        "cordoned",
        "cpu_millicores",
        "memory_mib",
        "driver_version",
        "preflight",
        "labels",
    ):
        pool = by_pool[pool_id]
        unfit = preflight.failures(Node(driver_version=driver, preflight=facts), pool)
        state = core.NodeState(
            id=pk,
            gpu_model=pool.gpu_model.name,
            sharing_mode=pool.sharing_mode,
            gpus=[],
            cpu_milli_total=cpu,
            memory_mib_total=memory,
            schedulable=status == Node.Status.READY and not cordoned,
            preflight_failure="; ".join(unfit),
            mig_profiles=profiles.get(pool_id, []),
            **sharing.node_policy(pool),
        )
        inventory.nodes[pk] = state
        if found := topology_of(labels):
            inventory.topology[pk] = found
        inventory.pool_nodes[pool_id].append(state)
    gpus: dict[int, core.GpuState] = {}
    node_of: dict[int, core.NodeState] = {}
    gpu_rows = Gpu.objects.filter(node__pool__in=pools).order_by("node_id", "index")
    for pk, node_id, index, memory, nvlink, healthy in gpu_rows.values_list(
        "pk", "node_id", "index", "memory_mib", "nvlink_domain", "healthy"
    ):
        gpus[pk] = core.GpuState(index, memory, nvlink_domain=nvlink, healthy=healthy)
        node_of[pk] = inventory.nodes[node_id]
        inventory.nodes[node_id].gpus.append(gpus[pk])
        inventory.gpu_pk[node_id, index] = pk
    shares = GpuShare.objects.filter(gpu__node__pool__in=pools)
    for gpu_id, memory, ceiling, guaranteed, exclusive, profile, start, size in shares.values_list(
        "gpu_id",
        "memory_mib",
        "compute_milli",
        "guaranteed_milli",
        "exclusive",
        "mig_profile",
        "mig_start",
        "mig_size",
    ):
        gpu = gpus[gpu_id]
        gpu.memory_used_mib += memory
        gpu.compute_used += guaranteed
        if exclusive:  # as apply_to_node: a whole GPU takes all of the node's ceiling budget
            gpu.exclusive, gpu.ceiling_used = True, node_of[gpu_id].ceiling_budget
        elif start is not None:
            gpu.mig_used.append(core.MigSlice(start, size, profile))
        else:
            gpu.ceiling_used += ceiling
    host = Allocation.objects.filter(node__pool__in=pools).values("node_id")
    for row in host.annotate(cpu=Sum("cpu_milli"), memory=Sum("host_memory_mib")):
        node = inventory.nodes[row["node_id"]]
        node.cpu_milli_used, node.memory_mib_used = row["cpu"], row["memory"]
    if placements:
        inventory.placements = _placements(pools)
    return inventory


# The labels naming a node's topology domains: GFD's NVLink clique (multi-node NVLink systems such as
# GB200 NVL72), Kubernetes' well-known zone label, and a rack label the operator names (NVKE_RACK_LABEL).
CLIQUE_LABEL = "nvidia.com/gpu.clique"
ZONE_LABEL = "topology.kubernetes.io/zone"


def topology_of(labels: dict) -> dict[str, str]:
    """A node's domains by level (claims.allocation.gangs), from its labels; levels it lacks are absent."""
    names = {
        core.gangs.NVLINK: labels.get(CLIQUE_LABEL),
        core.gangs.RACK: labels.get(settings.NVKE_RACK_LABEL),
        core.gangs.ZONE: labels.get(ZONE_LABEL),
    }
    return {level: str(name) for level, name in names.items() if name}


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
            guaranteed_milli=first.guaranteed_milli if first else 0,
        )
    return result


# --- placements as the allocation log stores them ----------------------------------------------------


def placement_json(p: core.Placement) -> dict:
    r = p.request
    return {
        "node": p.node_id,
        "gpus": list(p.gpu_indexes),
        "memory_mib": p.memory_mib,
        "compute_milli": p.compute_milli,
        "guaranteed_milli": p.guaranteed_milli,
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
            "guaranteed_milli": r.guaranteed_milli,
            "cpu_milli": r.cpu_milli,
            "host_memory_mib": r.host_memory_mib,
            "allowed_models": sorted(r.allowed_models),
            "min_isolation": r.min_isolation,
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
        guaranteed_milli=data.get("guaranteed_milli", -1),  # entries logged before guarantees: the ceiling
    )


# --- one process's copy of each cluster ----------------------------------------------------------------


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
        after, rows = CACHE.log_tails.get(self.cluster_id, (None, None))
        if rows is not None and after == self.last_event:  # fetched with the lock
            # Django's PostgreSQL backend hands jsonb to raw cursors as text.
            return ((i, kind, c, json.loads(p) if p else None) for i, kind, c, p in rows)
        events = AllocationEvent.objects.filter(cluster_id=self.cluster_id, id__gt=self.last_event)
        return events.order_by("id").values_list("id", "kind", "claim_id", "placement")

    def apply(self, claim_id: int, placement: core.Placement) -> None:
        """In memory only: the caller writes the allocation and logs it (`rows.write_pass`)."""
        self.fleet_of[placement.node_id].apply(placement)
        self.inventory.placements[claim_id] = placement

    def node(self, node_id: int) -> core.NodeState:
        return self.fleet_of[node_id].node(node_id)

    def pool_holding(self, claim_id: int) -> int | None:
        """The pool the claim is placed in, if it is."""
        placement = self.inventory.placements.get(claim_id)
        return self.pool_of[placement.node_id] if placement is not None else None

    def _release(self, claim_id: int) -> None:
        placement = self.inventory.placements.pop(claim_id, None)
        if placement is not None:
            self.fleet_of[placement.node_id].release(placement)

    def remove(self, claim_id: int) -> None:
        """Take the claim's placement out, and log that (its allocation rows are the caller's)."""
        if claim_id in self.inventory.placements:
            self._release(claim_id)
            event = AllocationEvent.objects.create(
                cluster_id=self.cluster_id, kind=AllocationEvent.Kind.REMOVE, claim_id=claim_id
            )
            self.last_event = event.pk


class Cache:
    """What this process remembers between placements, per cluster: its snapshot, the log entries
    fetched with the lock, the recent mix of claim shapes; and "never fits the catalog" answers.

    Snapshots and workloads are kept for the CLUSTERS_KEPT clusters loaded last: plain dicts (request
    threads place in different clusters at once, and a dict's get and set need no lock), the one loaded
    first dropped when a new one comes in. A dropped cluster is loaded again when it is next placed in,
    as after the 300 s a snapshot lives anyway."""

    def __init__(self) -> None:
        self.snapshots: dict[int, Snapshot] = {}
        self.log_tails: dict[int, tuple[int | None, list[tuple]]] = {}  # (after id, rows), PostgreSQL
        self.workloads: dict[int, core.Workload] = {}
        self._catalog: tuple[int, core.Fleet] = (-1, core.Fleet([]))
        self._refusals: dict[core.Request, str | None] = {}

    def snapshot(self, cluster_id: int) -> Snapshot:
        """The cluster's current inventory; call with the allocation lock held."""
        snap = self.snapshots.get(cluster_id)
        if snap is None or not snap.catch_up():
            snap = _newest(self.snapshots, cluster_id, Snapshot(cluster_id))
        return snap

    def workload(self, cluster_id: int) -> core.Workload:
        """The recent mix of claim shapes in the cluster (FGD's target workload)."""
        workload = self.workloads.get(cluster_id)
        if workload is None:
            recent = Claim.objects.filter(cluster_id=cluster_id).order_by("-created_at")[:RECENT_SHAPES]
            workload = _newest(
                self.workloads,
                cluster_id,
                core.Workload(
                    [request_of(c) for c in reversed(recent)], window=RECENT_SHAPES, refresh_every=50
                ),
            )
        return workload

    def catalog_refusal(self, request: core.Request) -> str | None:
        """Why no node the catalog could give fits the request; reused for CATALOG_TTL_S, as the catalog
        changes rarely and claims arrive often."""
        period = int(time.monotonic() // CATALOG_TTL_S)
        if self._catalog[0] != period:
            self._catalog, self._refusals = (period, core.empty_fleet(catalog_shapes())), {}
        if request not in self._refusals:
            self._refusals[request] = core.fits_ever(request, self._catalog[1])
        return self._refusals[request]

    def forget(self, cluster_id: int) -> None:
        """The snapshot may hold changes a rolled-back transaction never made."""
        self.snapshots.pop(cluster_id, None)

    def clear(self) -> None:
        """Forget every cluster and the catalog's answers (`caches.clear_all`)."""
        self.snapshots.clear()
        self.log_tails.clear()
        self.workloads.clear()
        self._catalog, self._refusals = (-1, core.Fleet([])), {}


V = TypeVar("V")


def _newest(kept: dict[int, V], cluster_id: int, value: V) -> V:
    """Keep `value` as the cluster's, the newest of `kept`; past CLUSTERS_KEPT the oldest go."""
    kept.pop(cluster_id, None)  # a reload moves to the end: dicts keep the order keys came in
    kept[cluster_id] = value
    for oldest in list(kept)[: len(kept) - CLUSTERS_KEPT]:
        kept.pop(oldest, None)
    return value


CACHE = Cache()
caches.register(
    "claims.allocator.inventory",
    f"snapshots and workloads of the {CLUSTERS_KEPT} clusters loaded last (the first loaded out); a "
    f"snapshot reloaded after {Snapshot.MAX_AGE_S} s or on a log reset, dropped on a rollback; catalog "
    f"answers replaced every {CATALOG_TTL_S} s",
    CACHE.clear,
)
LOG_RETENTION_S = 2 * Snapshot.MAX_AGE_S  # a snapshot reloads before the entries it needs are pruned


def prune_log() -> int:
    cutoff = timezone.now() - datetime.timedelta(seconds=LOG_RETENTION_S)
    return AllocationEvent.objects.filter(created_at__lt=cutoff).delete()[0]
