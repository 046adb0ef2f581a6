"""kube_sync: keeps NVKE's view of every attached cluster true between calls. One `ClusterSync` per
cluster list-watches its GPU Nodes and ResourceSlices (nvke.providers.kubernetes.watch) and, after any
change, reconciles the cluster's pools — level-triggered, so a missed or repeated event changes nothing:
nodes that joined or left, went NotReady or were cordoned reach the Node and Gpu rows (and through them
the allocator and the websockets), and a pool short of nodes adopts a new matching one. It records the
cluster's Reachable condition and the GPU nodes outside every pool. A driver or validator pod or an
NVIDIADriver that changed ticks the cluster's upgrade runs at once (upgrades.tasks.kick_cluster_runs).

With NVKE_PROVIDER=clusterapi the clusters NVKE provisioned are watched the same way, and a
`ManagementSync` follows their Cluster API objects in the management cluster: a Cluster that changed
takes its cluster's next provisioning step at once (it runs once its control plane is available) or,
running, records its control plane's availability; a MachineDeployment its pool's reconcile (the pool is
ready once its machines are).

Clusters are sharded over processes by a stable hash of their id (`--shard 2/4`), so more clusters are
served by more processes. A process watches its oldest NVKE_KUBE_SYNC_WATCHED_CLUSTERS clusters (one
HTTP/2 connection each) and polls the rest of its shard every POLL_CLUSTER_S, so its connections stay
bounded however many clusters it is given. A process's threads do not grow with its clusters: every
watch is a task of one event loop (nvke/providers/kubernetes/streams.py) and every pass a job for
PASS_WORKERS threads (`Passes`);
a failing cluster's watches back off on their own. Bulkheads keep a tenant's stalled clusters from delaying
everyone else's passes: a whole pass runs within PASS_DEADLINE_S (every call to the cluster in it); one
tenant's passes hold at most TENANT_SHARE of the threads at once (the others' due passes run meanwhile);
and a cluster whose last pass took over SLOW_PASS_S or could not reach it (SLOW_REASONS) has its next
passes run on SLOW_WORKERS threads of their own until one is quick again, so known-bad clusters, of any
number of tenants, hold the main threads for one pass deadline at most, once."""

import heapq
import itertools
import logging
import re
import threading
import time
import zlib
from collections import Counter
from collections.abc import Callable

from django.conf import settings
from django.db import close_old_connections, connection
from django.db.models import OuterRef, Q, Subquery

from claims import workloads
from claims.models import AllocationEvent
from clusters.models import Cluster
from clusters.services import (
    cluster_operations,
    provision,
    record_control_plane,
    record_observation,
    refresh_addons,
)
from nodepools.models import NodePool
from nodepools.services import reconcile
from nvke import jobs
from nvke.providers.base import ProviderError
from nvke.providers.clusterapi import management, manifests
from nvke.providers.clusterapi import status as capi_status
from nvke.providers.clusterapi.watch import ManagementWatch
from nvke.providers.kubernetes import gpus
from nvke.providers.kubernetes.client import deadline
from nvke.providers.kubernetes.watch import ClusterWatch

log = logging.getLogger(__name__)
# How long the supervisor waits for a cluster's streams to let go of their connections.
CLOSE_S = 5.0
# The threads that run every cluster's passes: a pass is database work and calls to one cluster, so a few
# threads serve hundreds of clusters. Bulkheads keep a tenant's stalled clusters from holding them all:
PASS_WORKERS = 4
PASS_DEADLINE_S = 60.0  # a whole pass, every call to the cluster in it (client.deadline)
TENANT_SHARE = 0.5  # of a lane's threads, the most one tenant's clusters hold at once
SLOW_WORKERS = 2  # the slow lane: the threads that run known-bad clusters' passes
SLOW_PASS_S = 10.0  # a pass longer than this sends its cluster's next passes to the slow lane
# Failures that say the cluster is slow or gone (client.py's transport errors and the deadline), not that
# it answered: its next passes go to the slow lane, as after a slow pass.
SLOW_REASONS = frozenset({"Timeout", "Unreachable", "TLSError", "AddressRefused"})
LOG_POLL_S = 0.5  # how often the allocation logs of every cluster served are looked at, in one query
# A cluster past the process's watch budget (settings.NVKE_KUBE_SYNC_WATCHED_CLUSTERS) is polled: a full
# pass this often, its calls on connections that close with the pass.
POLL_CLUSTER_S = 30.0


def shard_of(cluster_id: int, shards: int) -> int:
    """The shard that serves a cluster: the same in every process and on every restart."""
    return zlib.crc32(str(cluster_id).encode()) % shards


class Lane:
    """Threads and their jobs, each run when it comes due, earliest first, except that a tenant's jobs hold
    at most `cap` of the threads at once: a tenant at its cap waits while other tenants' due jobs run.
    A job of no tenant (NVKE's own) is never capped."""

    def __init__(self, name: str, workers: int):
        self.cap = max(1, int(workers * TENANT_SHARE))
        self._due: list[tuple[float, int, int | None, Callable[[], None]]] = []
        self._running: Counter[int] = Counter()  # by tenant
        self._changed = threading.Condition()
        self._order = itertools.count()  # ties run in the order they were put
        self.threads = [
            threading.Thread(target=self._work, daemon=True, name=f"{name}-{i}") for i in range(workers)
        ]
        for thread in self.threads:
            thread.start()

    def put(self, job: Callable[[], None], at: float = 0.0, tenant: int | None = None) -> None:
        with self._changed:
            heapq.heappush(self._due, (at, next(self._order), tenant, job))
            self._changed.notify()

    def running(self, tenant: int) -> int:
        """How many of the tenant's jobs run now."""
        with self._changed:
            return self._running[tenant]

    def _work(self) -> None:
        tenant = None
        while True:
            with self._changed:
                if tenant is not None:
                    self._running[tenant] -= 1  # the thread that frees a slot looks for a job next
                tenant, job = self._take()
            try:
                job()
            except Exception:  # a job's bug must not cost the process one of its few workers
                log.exception("kube_sync: a pass failed")

    def _take(self) -> tuple[int | None, Callable[[], None]]:
        """The earliest due job whose tenant is under its cap, counted as running; waits for one. A slot
        is freed only by the thread that goes on to take the next job: no other needs waking."""
        while True:
            capped = []  # jobs of tenants at their cap: set aside while the others' are looked at
            while self._due and self._due[0][2] is not None and self._running[self._due[0][2]] >= self.cap:
                capped.append(heapq.heappop(self._due))
            now = time.monotonic()
            taken = heapq.heappop(self._due) if self._due and self._due[0][0] <= now else None
            wait = self._due[0][0] - now if self._due and not taken else None
            for entry in capped:
                heapq.heappush(self._due, entry)
            if taken:
                _, _, tenant, job = taken
                if tenant is not None:
                    self._running[tenant] += 1
                return tenant, job
            self._changed.wait(wait)


class Passes:
    """The process's pass threads, in two lanes (`Lane`): PASS_WORKERS for clusters' passes (a cluster's
    next one waits out its debounce) and the allocation logs' look, and SLOW_WORKERS for the passes of
    clusters whose last pass was slow or could not reach them, so that known-bad clusters, of any number
    of tenants, never occupy the main threads."""

    def __init__(self, workers: int = PASS_WORKERS, slow_workers: int = SLOW_WORKERS):
        self.main = Lane("kube-sync", workers)
        self.slow = Lane("kube-sync-slow", slow_workers)
        self.following: set[ClusterSync] = set()
        self.put(self._follow_allocations)

    def put(
        self, job: Callable[[], None], at: float = 0.0, *, tenant: int | None = None, slow: bool = False
    ) -> None:
        """Run `job` on a thread of its lane once time.monotonic() reaches `at` and its tenant is under
        its cap; the job handles its own errors."""
        (self.slow if slow else self.main).put(job, at, tenant)

    def _follow_allocations(self) -> None:
        """A workloads pass for every cluster whose allocation log moved (a claim placed, moved or
        released needs its workload) since its last pass: one query for all of them."""
        syncs = {sync.cluster_id: sync for sync in list(self.following)}
        try:
            if syncs:
                in_own_connection(self._poke_moved, syncs)
        finally:
            self.put(self._follow_allocations, time.monotonic() + LOG_POLL_S)

    @staticmethod
    def _poke_moved(syncs: dict[int, "ClusterSync"]) -> None:
        newest = AllocationEvent.objects.filter(cluster_id=OuterRef("pk")).order_by("-id").values("id")[:1]
        clusters = Cluster.objects.filter(pk__in=syncs).annotate(newest=Subquery(newest))
        for pk, position in clusters.values_list("pk", "newest"):
            if position != syncs[pk].seen_log:
                syncs[pk].poke(allocations=True)


_passes: Passes | None = None
_passes_lock = threading.Lock()


def passes() -> Passes:
    """The process's pass workers, started on first use."""
    global _passes
    with _passes_lock:
        if _passes is None:
            _passes = Passes()
        return _passes


class ClusterSync:
    """One cluster's watches (on the shared loop) and its passes (on the shared workers): a change marks
    it dirty and queues one pass, which events meanwhile join; the next waits `debounce_s` after it. A
    pass runs within PASS_DEADLINE_S, under its tenant's cap, and in the slow lane while `slow`."""

    def __init__(
        self,
        cluster: Cluster,
        *,
        debounce_s: float = 1.0,
        resync_s: float = 300.0,
        watch_timeout_s: int = 60,
        watched: bool = True,
    ):
        self.cluster_id, self.tenant_id, self.debounce_s = cluster.pk, cluster.tenant_id, debounce_s
        self.passes = passes()
        self._lock = threading.Lock()
        # What the next pass has to do, and where this cluster's pass stands.
        self._dirty = self._drivers = self._allocations = False
        self._queued = self._running = self.closed = False
        self._next_at = 0.0
        # Whether the last pass ran past SLOW_PASS_S or could not reach the cluster (SLOW_REASONS): the
        # next passes run in the slow lane until one is quick again.
        self.slow = False
        self._unreached = False  # whether the pass running failed for one of SLOW_REASONS
        self._idle = threading.Event()  # clear while a pass runs: `close` waits for it
        self._idle.set()
        self.seen_log: int | None = -1  # the allocation log's position the last workloads pass saw
        self.watch: ClusterWatch | None = None  # None: polled, every POLL_CLUSTER_S
        if watched:
            self.watch = self._watch(cluster, resync_s, watch_timeout_s)

    def _watch(self, cluster: Cluster, resync_s: float, watch_timeout_s: int) -> ClusterWatch:
        return ClusterWatch(
            cluster_operations(cluster),
            changed=self.poke,
            drivers_changed=lambda: self.poke(drivers=True),
            workloads_changed=self.poke,
            failed=lambda error: self._put(lambda: self._failed(error)),  # off the loop's thread
            dra=bool(cluster.observed.get("features", {}).get("dra")),
            resync_s=resync_s,
            watch_timeout_s=watch_timeout_s,
        )

    def start(self) -> "ClusterSync":
        if self.watch is not None:
            self.watch.start()
        else:
            self._poll()
        self.passes.following.add(self)
        return self

    def _poll(self) -> None:
        """A polled cluster's full pass now, and the next look in POLL_CLUSTER_S."""
        if not self.closed:
            self.poke()
            self._put(self._poll, time.monotonic() + POLL_CLUSTER_S)

    def close(self, timeout: float | None = None) -> None:
        self.closed = True
        self.passes.following.discard(self)
        if self.watch is not None:
            self.watch.close(timeout)
        self._idle.wait(timeout)

    def poke(self, *, drivers: bool = False, allocations: bool = False) -> None:
        """A change seen: a full pass (and with `drivers` an upgrade tick) or, for `allocations` alone,
        a workloads pass."""
        with self._lock:
            self._drivers |= drivers
            self._allocations |= allocations
            self._dirty |= not allocations
            self._queue()

    def _put(self, job: Callable[[], None], at: float = 0.0) -> None:
        self.passes.put(job, at, tenant=self.tenant_id, slow=self.slow)

    def _queue(self) -> None:  # with self._lock held
        if not (self._queued or self._running or self.closed):
            self._queued = True
            self._put(self._pass, self._next_at)

    def _pass(self) -> None:
        with self._lock:
            self._queued, self._running = False, True
            self._idle.clear()
            dirty, drivers, allocations = self._dirty, self._drivers, self._allocations
            self._dirty = self._drivers = self._allocations = False
        started, self._unreached = time.monotonic(), False
        try:
            if self.closed:
                return
            if drivers:
                in_own_connection(jobs.enqueue, "upgrades.tasks.kick_cluster_runs", self.cluster_id)
            with deadline(PASS_DEADLINE_S):  # every call of the pass: no pass holds a thread longer
                if dirty:
                    in_own_connection(self.refresh)
                elif allocations:
                    in_own_connection(self.follow_allocations)
        finally:
            with self._lock:
                self._running = False
                self.slow = self._unreached or time.monotonic() - started > SLOW_PASS_S
                self._idle.set()
                if dirty:  # events meanwhile coalesce into one more pass, after the debounce
                    self._next_at = time.monotonic() + self.debounce_s
                if self._dirty or self._drivers or self._allocations:
                    self._queue()

    def _failed(self, error: ProviderError) -> None:
        in_own_connection(
            record_observation, self.cluster_id, reachable=False, reason=error.reason, message=error.message
        )

    def _pass_failed(self, error: ProviderError) -> None:
        self._unreached |= error.reason in SLOW_REASONS
        self._failed(error)

    def settled(self) -> bool:
        """Whether every change seen so far has had its pass: none running, none pending."""
        with self._lock:
            return not (self._dirty or self._drivers or self._allocations or self._queued or self._running)

    def follow_allocations(self) -> None:
        if workloads.log_position(self.cluster_id) != self.seen_log:
            self.sync_workloads()

    def sync_workloads(self) -> None:
        """The cluster's workloads pass (claims.workloads), from the allocation log's position now."""
        self.seen_log = workloads.log_position(self.cluster_id)
        try:
            workloads.sync_workloads(self.cluster_id)
        except ProviderError as error:  # the next change (or resync) tries again
            self.seen_log = -1
            self._pass_failed(error)

    def refresh(self) -> None:
        """Reconcile every pool of the cluster, record what the watch sees, and run a workloads pass."""
        for pool_id in (
            NodePool.objects.filter(cluster_id=self.cluster_id)
            .exclude(status="deleting")
            .values_list("pk", flat=True)
        ):
            try:
                reconcile(pool_id)
            except ProviderError as error:  # the next change (or resync) tries again
                self._pass_failed(error)
                return
        if self.watch is not None:
            nodes, how = self.watch.nodes, ("Watching", "Watching")
        else:
            try:
                listed = cluster_operations(Cluster.objects.get(pk=self.cluster_id)).nodes(gpus.PRODUCT)
            except ProviderError as error:
                self._pass_failed(error)
                return
            nodes = {node["metadata"]["name"]: node for node in listed}
            how = ("Polling", f"Every {POLL_CLUSTER_S:g} s (past this kube_sync's watch budget), polling")
        outside = sorted(
            name
            for name, node in nodes.items()
            if gpus.POOL_LABEL not in (node["metadata"].get("labels") or {})
        )
        record_observation(
            self.cluster_id,
            reachable=True,
            reason=how[0],
            message=f"{how[1]} {len(nodes)} GPU nodes.",
            gpu_nodes=len(nodes),
            unpooled_nodes=outside,
        )
        self.sync_workloads()


def in_own_connection(function, *args, **kwargs) -> None:
    """Run with a fresh database connection of this thread, closed afterwards; a failure is logged,
    never the end of the thread."""
    close_old_connections()
    try:
        function(*args, **kwargs)
    except Exception:
        log.exception("kube_sync: %s failed", getattr(function, "__name__", function))
    finally:
        connection.close()


class ManagementSync:
    """Follows the Cluster API objects of this shard's clusters (see the module's docstring)."""

    def __init__(self, *, shard: int = 0, shards: int = 1, debounce_s: float = 1.0, **watch_options):
        self.shard, self.shards, self.debounce_s = shard, shards, debounce_s
        self.stop, self.dirty, self._lock = threading.Event(), threading.Event(), threading.Lock()
        self._changed: set[tuple[int, str]] = set()
        self.management = management.load()
        self.watch = ManagementWatch(
            self.management, changed=self._seen, failed=self._failed, **watch_options
        )
        self.refresher = threading.Thread(target=self._refresh_loop, daemon=True, name="capi-sync")

    def start(self) -> "ManagementSync":
        self.watch.start()
        self.refresher.start()
        return self

    def close(self, timeout: float | None = None) -> None:
        self.stop.set()
        self.dirty.set()
        self.watch.close(timeout)
        self.refresher.join(timeout)

    def _seen(self, cluster_key: str, pool: str) -> None:
        if not (match := re.fullmatch(r"c(\d+)", cluster_key)):
            return  # not a name NVKE gives (clusters.services.cluster_key)
        cluster_id = int(match[1])
        if shard_of(cluster_id, self.shards) == self.shard:
            with self._lock:
                self._changed.add((cluster_id, pool))
            self.dirty.set()

    @staticmethod
    def _failed(error: ProviderError) -> None:
        log.warning("kube_sync: the management cluster: %s: %s", error.reason, error.message)

    def _refresh_loop(self) -> None:
        while not self.stop.is_set():
            self.dirty.wait()
            self.dirty.clear()
            with self._lock:
                changed, self._changed = self._changed, set()
            for cluster_id, pool in sorted(changed):
                if self.stop.is_set():
                    return
                in_own_connection(self.step, cluster_id, pool)
            self.stop.wait(self.debounce_s)  # events meanwhile coalesce into one more pass

    def step(self, cluster_id: int, pool: str) -> None:
        """A provisioning cluster's next step, a running one's ControlPlaneAvailable condition and
        add-ons as Cluster API reports them, or the pool's reconcile."""
        if not pool:
            state = Cluster.objects.filter(pk=cluster_id).values_list("status", flat=True).first()
            if state == Cluster.Status.PROVISIONING:
                provision(cluster_id)
            elif state == Cluster.Status.RUNNING:
                found = self.management.get(manifests.CORE, "Cluster", f"c{cluster_id}")
                record_control_plane(cluster_id, *capi_status.control_plane_available(found))
                refresh_addons(cluster_id)
            return
        pools = NodePool.objects.filter(cluster_id=cluster_id, name=pool).exclude(status="deleting")
        if pool_id := pools.values_list("pk", flat=True).first():
            reconcile(pool_id)


def attached_clusters(shard: int, shards: int) -> dict[int, Cluster]:
    """The running clusters of this shard on a real Kubernetes: attached ones, and the ones Cluster API
    provisioned."""
    # A cluster of no recorded provider is NVKE_PROVIDER's.
    providers = ["clusterapi", ""] if settings.NVKE_PROVIDER == "clusterapi" else ["clusterapi"]
    clusters = Cluster.objects.filter(status=Cluster.Status.RUNNING)
    clusters = clusters.filter(Q(attached=True) | Q(provider__in=providers))
    return {c.pk: c for c in clusters if shard_of(c.pk, shards) == shard}


def follows_cluster_api() -> bool:
    """Whether Cluster API made any cluster, or makes the next one."""
    return settings.NVKE_PROVIDER == "clusterapi" or Cluster.objects.filter(provider="clusterapi").exists()


def _management_sync(shard: int, shards: int, options: dict) -> ManagementSync | None:
    """The management cluster's watches, or None (said in the log) until it is configured."""
    watch_options = {k: v for k, v in options.items() if k in ("resync_s", "watch_timeout_s")}
    try:
        return ManagementSync(shard=shard, shards=shards, **watch_options).start()
    except ProviderError as error:
        log.warning("kube_sync: not following Cluster API: %s", error.message)
        return None


class Supervisor:
    """Serves this shard's attached clusters (`syncs`, by cluster id) until `stop`: a cluster attached or
    detached is picked up within `poll_s`; a cluster whose endpoint or token changed gets fresh watches.
    The oldest NVKE_KUBE_SYNC_WATCHED_CLUSTERS are watched (a connection each), the rest polled (passes'
    connections only), so a process's connections stay bounded however many clusters its shard has."""

    def __init__(self, *, shard: int = 0, shards: int = 1, poll_s: float = 30.0, **options):
        self.shard, self.shards, self.poll_s, self.options = shard, shards, poll_s, options
        self.syncs: dict[int, tuple[tuple, ClusterSync]] = {}
        self.polled = 0  # clusters past the watch budget

    def run(self, stop: threading.Event) -> None:
        capi = None
        try:
            while not stop.is_set():
                close_old_connections()
                if capi is None and follows_cluster_api():
                    capi = _management_sync(self.shard, self.shards, self.options)
                wanted = attached_clusters(self.shard, self.shards)
                connection.close()
                self._serve(wanted)
                stop.wait(self.poll_s)
        finally:
            for _, sync in self.syncs.values():
                sync.close(CLOSE_S)
            self.syncs.clear()
            if capi is not None:
                capi.close(CLOSE_S)

    def _serve(self, wanted: dict[int, Cluster]) -> None:
        budget = settings.NVKE_KUBE_SYNC_WATCHED_CLUSTERS
        watched = set(sorted(wanted)[:budget])  # the oldest clusters: a new one never unseats a watch
        if len(wanted) > budget and len(wanted) - budget != self.polled:
            log.warning(
                "kube_sync: %d clusters past the watch budget of %d are polled every %g s; add a shard",
                len(wanted) - budget,
                budget,
                POLL_CLUSTER_S,
            )
        self.polled = max(0, len(wanted) - budget)
        for pk, cluster in sorted(wanted.items()):
            key = (cluster.endpoint, cluster.admin_token, cluster.ca_bundle, pk in watched)
            if pk in self.syncs and self.syncs[pk][0] == key:
                continue
            if pk in self.syncs:
                self._drop(pk)
            try:
                sync = ClusterSync(cluster, watched=pk in watched, **self.options)
            except (
                ProviderError
            ) as error:  # this cluster only (a token that no longer decrypts): try next poll
                in_own_connection(
                    record_observation, pk, reachable=False, reason=error.reason, message=error.message
                )
                continue
            self.syncs[pk] = (key, sync.start())
            log.info(
                "kube_sync: %s cluster %s (%s)", "watching" if pk in watched else "polling", cluster.name, pk
            )
        for pk in set(self.syncs) - set(wanted):
            self._drop(pk)

    def _drop(self, pk: int) -> None:
        self.syncs[pk][1].close(CLOSE_S)
        del self.syncs[pk]  # once closed: a cluster not in `syncs` has no stream left


def run(stop: threading.Event, *, shard: int = 0, shards: int = 1, poll_s: float = 30.0, **options) -> None:
    """Serve this shard's attached clusters until `stop` (see Supervisor)."""
    Supervisor(shard=shard, shards=shards, poll_s=poll_s, **options).run(stop)
