"""kube_sync against the fake API server: real watches over HTTPS in their own threads, with their own
database connections, keep the pools of attached clusters current."""

import contextlib
import socket
import threading
from collections.abc import Iterator

import kubernetes
import pytest
from django.core.management import CommandError, call_command

from catalog.models import DriverRelease
from claims.allocator.service import create_claim
from claims.models import Claim
from clusters.models import Cluster
from clusters.services import cluster_ref
from nodepools import kube_sync
from nodepools.models import Node, NodePool
from nvke.providers.kubernetes import dra, streams
from nvke.providers.kubernetes.operations import KubernetesOperations
from nvke.providers.kubernetes.watch import Backoff, ListWatch
from nvke.tenancy.context import TenantContext
from tests.conftest import install_nvke_policies
from tests.kubeapi import http2, objects
from tests.kubeapi.fixtures import client_configuration, wait_until
from tests.kubeapi.server import FakeKubeApi
from tests.nvke.providers.kubernetes.access import ungranted

pytestmark = pytest.mark.django_db(transaction=True)
FAST = {"debounce_s": 0.05, "watch_timeout_s": 2}


@pytest.fixture
def make_pool(make_attached_pool):
    return lambda cluster, nodes: make_attached_pool(cluster, nodes, max_nodes=8)


@pytest.fixture
def syncing():
    """syncing(cluster) -> a started ClusterSync, closed after the test."""
    started = []

    def start(cluster):
        started.append(kube_sync.ClusterSync(cluster, **FAST).start())
        return started[-1]

    yield start
    for sync in started:
        sync.close(timeout=10)


def pool_status(pool) -> str:
    pool.refresh_from_db()
    return pool.status


def test_a_new_matching_node_joins_the_pool_that_waited_for_it(attach, gpu_cluster, syncing, make_pool):
    cluster = attach(gpu_cluster)
    pool = make_pool(cluster, 4)
    assert pool.status == "pending" and pool.status_reason == "InsufficientCapacity"
    syncing(cluster)
    gpu_cluster.create(objects.gpu_node("gpu-d", count=8))
    wait_until(lambda: pool_status(pool) == "ready", timeout=15)
    assert Node.objects.filter(pool=pool).count() == 4
    assert gpu_cluster.get("v1", "Node", "gpu-d")["metadata"]["labels"]["nvke.io/pool"] == "train"


def test_a_node_going_not_ready_or_cordoned_reaches_its_row(attach, gpu_cluster, syncing, make_pool):
    cluster = attach(gpu_cluster)
    pool = make_pool(cluster, 3)
    syncing(cluster)
    node = gpu_cluster.get("v1", "Node", "gpu-b")
    node["status"]["conditions"] = [
        {**c, "status": "False"} if c["type"] == "Ready" else c for c in node["status"]["conditions"]
    ]
    gpu_cluster.update(node)
    gpu_cluster.patch_merge("v1", "Node", "gpu-c", {"spec": {"unschedulable": True}})
    wait_until(lambda: Node.objects.get(pool=pool, name="gpu-b").status == Node.Status.NOT_READY, timeout=15)
    wait_until(lambda: Node.objects.get(pool=pool, name="gpu-c").cordoned, timeout=15)


def test_the_cluster_records_reachability_and_nodes_outside_every_pool(
    attach, gpu_cluster, syncing, make_pool
):
    cluster = attach(gpu_cluster)
    make_pool(cluster, 2)
    syncing(cluster)

    def observed():
        cluster.refresh_from_db()
        return cluster.observed.get("unpooled_nodes") == ["gpu-c"] and cluster.observed.get("gpu_nodes") == 3

    wait_until(observed, timeout=15)
    reachable = next(c for c in cluster.conditions if c["type"] == "Reachable")
    assert reachable["status"] == "True"


def test_one_unreachable_cluster_does_not_stall_another(attach, gpu_cluster, syncing, make_pool):
    with FakeKubeApi() as other:
        objects.gpu_operator(other)
        other.create(objects.gpu_node("gpu-x"))
        broken = attach(other, "broken")
    # `other` is stopped now: its watches fail and back off
    healthy = attach(gpu_cluster, "healthy")
    pool = make_pool(healthy, 4)
    syncing(broken)
    syncing(healthy)
    gpu_cluster.create(objects.gpu_node("gpu-d", count=8))
    wait_until(lambda: pool_status(pool) == "ready", timeout=15)

    def unreachable():
        broken.refresh_from_db()
        return any(c["type"] == "Reachable" and c["status"] == "False" for c in broken.conditions)

    wait_until(unreachable, timeout=15)


def test_a_watch_from_a_forgotten_resource_version_lists_again(attach, gpu_cluster):
    cluster = attach(gpu_cluster)
    ops = KubernetesOperations(cluster_ref(cluster))
    listed, stop = [], threading.Event()
    watch = ListWatch(
        ops.core.list_node,
        on_list=lambda items: listed.append(sorted(n["metadata"]["name"] for n in items)),
        on_event=lambda kind, obj: None,
        on_error=lambda error: None,
        stop=stop,
        watch_timeout_s=2,
    )
    streams.hub().call(watch.list())
    gpu_cluster.create(objects.gpu_node("gpu-d"))
    gpu_cluster.compact()  # the list's resourceVersion is forgotten: the watch gets 410 Gone
    thread = threading.Thread(target=watch.run, daemon=True)
    thread.start()
    try:
        wait_until(lambda: len(listed) >= 2, timeout=10)
    finally:
        stop.set()
        thread.join(10)
    assert listed[0] == ["gpu-a", "gpu-b", "gpu-c"]
    assert listed[1] == ["gpu-a", "gpu-b", "gpu-c", "gpu-d"]


def test_backoff_grows_with_jitter_and_resets():
    backoff = Backoff(first=1, most=8)
    waits = [backoff.next() for _ in range(6)]
    assert 0.5 <= waits[0] <= 1 and 1 <= waits[1] <= 2 and 2 <= waits[2] <= 4
    assert all(4 <= w <= 8 for w in waits[3:]), "capped at `most`"
    backoff.reset()
    assert backoff.next() <= 1


def test_shards_split_the_clusters_stably(make_cluster, owner):
    tenant = owner.memberships.get().tenant
    clusters = [make_cluster(tenant, f"c{i}") for i in range(12)]
    Cluster.objects.filter(pk__in=[c.pk for c in clusters]).update(attached=True)
    shards = [set(kube_sync.attached_clusters(i, 3)) for i in range(3)]
    assert set().union(*shards) == {c.pk for c in clusters}
    assert sum(len(s) for s in shards) == 12, "every cluster in exactly one shard"
    assert all(kube_sync.shard_of(c.pk, 3) == kube_sync.shard_of(c.pk, 3) for c in clusters)


@pytest.mark.parametrize("value", ["2", "3/2", "a/b", "-1/2"])
def test_a_bad_shard_is_refused(value):
    with pytest.raises(CommandError):
        call_command("kube_sync", shard=value)


def test_a_driver_change_ticks_the_clusters_upgrade_runs_at_once(
    attach, gpu_cluster, syncing, settings, owner, make_pool
):
    from nvke.tenancy.context import TenantContext
    from upgrades.models import UpgradeRun
    from upgrades.services import create_run

    settings.NVKE_UPGRADE_TICK_S = 3600  # no tick comes on its own: only a kick moves the run
    cluster = attach(gpu_cluster)
    pool = make_pool(cluster, 3)
    membership = owner.memberships.get()
    run = create_run(
        context=TenantContext(membership.tenant, membership.role),
        pool=pool,
        target_release=DriverRelease.objects.get(version="580.105.08"),
        max_unavailable="1",
    )
    wait_until(
        lambda: UpgradeRun.objects.get(pk=run.pk).ticked_at is not None
    )  # its first tick; the next in an hour
    syncing(cluster)
    # kube_sync's first pass (after its first lists) records the nodes outside every pool: the watches are up.
    wait_until(lambda: "unpooled_nodes" in Cluster.objects.get(pk=cluster.pk).observed)
    before = UpgradeRun.objects.get(pk=run.pk).tick_seq
    try:
        gpu_cluster.create(
            objects.nvidia_driver("someone-elses", version="575.57.08", node_selector={"x": "y"})
        )
        wait_until(lambda: UpgradeRun.objects.get(pk=run.pk).tick_seq > before, timeout=15)
    finally:  # the run's next tick waits an hour on a timer thread: later tests must not see it
        wait_until(lambda: not cancel_timers(f"nvke-upgrade-{run.pk}"), timeout=15)


def cancel_timers(name: str) -> bool:
    """Cancel the timer threads of that name; whether any is still alive. A tick running on one
    schedules the next timer when it ends, so callers repeat until none is left."""
    alive = [t for t in threading.enumerate() if t.name == name]
    for timer in alive:
        timer.cancel()
    return bool(alive)


def test_the_supervisor_serves_its_shards_clusters_and_drops_detached_ones(attach, gpu_cluster, make_pool):
    cluster = attach(gpu_cluster)
    pool = make_pool(cluster, 4)
    stop = threading.Event()
    supervisor = kube_sync.Supervisor(poll_s=0.2, **FAST)
    thread = threading.Thread(target=supervisor.run, args=(stop,), daemon=True)
    thread.start()
    try:
        gpu_cluster.create(objects.gpu_node("gpu-d", count=8))
        wait_until(lambda: pool_status(pool) == "ready", timeout=15)
        sync = supervisor.syncs[cluster.pk][1]
        Cluster.objects.filter(pk=cluster.pk).update(status=Cluster.Status.DELETING)
        wait_until(lambda: cluster.pk not in supervisor.syncs, timeout=15)
        assert sync.closed and all(task.done() for task in sync.watch.tasks), "its streams are closed"
    finally:
        stop.set()
        thread.join(15)
    assert not thread.is_alive()


def test_clusters_past_the_watch_budget_are_polled_and_take_a_watch_when_one_frees(
    attach, gpu_cluster, make_pool, settings, monkeypatch
):
    """A process watches its oldest NVKE_KUBE_SYNC_WATCHED_CLUSTERS clusters (a connection each) and polls
    the rest, whose pools still follow their nodes; a watched cluster detached lets the next one in."""
    settings.NVKE_KUBE_SYNC_WATCHED_CLUSTERS = 1
    monkeypatch.setattr(kube_sync, "POLL_CLUSTER_S", 0.5)
    first = attach(gpu_cluster)
    with FakeKubeApi() as other:
        objects.gpu_operator(other)
        install_nvke_policies(other)
        for name in ("gpu-a", "gpu-b", "gpu-c"):
            other.create(objects.gpu_node(name, count=8))
        second = attach(other, "second")
        pool = make_pool(second, 4)
        stop = threading.Event()
        supervisor = kube_sync.Supervisor(poll_s=0.2, **FAST)
        thread = threading.Thread(target=supervisor.run, args=(stop,), daemon=True)
        thread.start()
        try:
            wait_until(lambda: second.pk in supervisor.syncs, timeout=15)
            assert supervisor.syncs[first.pk][1].watch is not None
            assert supervisor.syncs[second.pk][1].watch is None
            other.create(objects.gpu_node("gpu-p", count=8))  # seen by a poll: no watch is open on it
            wait_until(lambda: pool_status(pool) == "ready", timeout=15)
            wait_until(lambda: reachable(second) == ("True", "Polling"), timeout=5)
            assert not other.open_connections().get("h2")
            wait_until(lambda: gpu_cluster.open_connections().get("h2") == 1, timeout=5)

            Cluster.objects.filter(pk=first.pk).update(status=Cluster.Status.DELETING)
            wait_until(lambda: other.open_connections().get("h2") == 1, timeout=15)
            wait_until(lambda: reachable(second) == ("True", "Watching"), timeout=15)
        finally:
            stop.set()
            thread.join(15)


def test_claims_reach_their_resource_claims_while_kube_sync_runs(attach, gpu_cluster, syncing, make_pool):
    gpu_cluster.create(objects.namespace("ml", {dra.MANAGED: "true"}))
    cluster = attach(gpu_cluster)
    make_pool(cluster, 3)
    syncing(cluster)

    def allocated(name):
        found = gpu_cluster.get("resource.k8s.io/v1", "ResourceClaim", name, "ml")
        return found and (found.get("status") or {}).get("allocation")

    user_claim = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": "from-kubectl"},
        "spec": {
            "devices": {
                "requests": [{"name": "gpu", "exactly": {"deviceClassName": "gpu.nvidia.com", "count": 2}}]
            }
        },
    }
    with kubernetes.client.ApiClient(client_configuration(gpu_cluster)) as api:  # a user, with kubectl
        kubernetes.client.ResourceV1Api(api).create_namespaced_resource_claim("ml", user_claim)
    wait_until(lambda: allocated("from-kubectl"), timeout=15)
    adopted = Claim.objects.get(name="from-kubectl")
    assert (adopted.source, adopted.gpus, adopted.status) == ("resourceclaim", 2, "allocated")

    # A claim through NVKE's own service: the allocation log moves, and the pass follows it.
    create_claim(
        context=TenantContext(cluster.tenant, "owner"),
        cluster=cluster,
        name="from-api",
        namespace="ml",
        kind="whole",
    )
    results = wait_until(lambda: allocated("from-api"), timeout=15)["devices"]["results"]
    assert len(results) == 1 and results[0]["pool"] in ("gpu-a", "gpu-b", "gpu-c")


def test_a_namespace_labelled_managed_has_its_waiting_pods_placed(attach, gpu_cluster, syncing, make_pool):
    gpu_cluster.create(objects.namespace("late"))
    pod = objects.pod("train", namespace="late")
    pod["spec"].update(schedulerName="nvke", tolerations=[dict(dra.POOL_TOLERATION)])  # NVKE's pool taint
    pod["spec"]["containers"][0]["resources"] = {"limits": {"nvidia.com/gpu": "1"}}
    gpu_cluster.create(pod)
    cluster = attach(gpu_cluster)
    make_pool(cluster, 3)
    sync = syncing(cluster)
    wait_until(lambda: Node.objects.filter(pool__cluster=cluster).count() == 3, timeout=15)
    # The passes the pool's adoption set off are done: only the label is left to wake one.
    wait_until(sync.settled, timeout=15)
    assert not Claim.objects.filter(name="train").exists()  # not NVKE's namespace: left alone

    gpu_cluster.patch_merge("v1", "Namespace", "late", {"metadata": {"labels": {dra.MANAGED: "true"}}})

    wait_until(lambda: gpu_cluster.get("v1", "Pod", "train", "late")["spec"].get("nodeName"), timeout=15)
    assert Claim.objects.get(name="train").status == "allocated"
    assert ungranted(gpu_cluster.requests) == set()  # every list, watch and write is in NVKE's manifest


RESOURCE_CLAIM = {
    "apiVersion": "resource.k8s.io/v1",
    "kind": "ResourceClaim",
    "metadata": {"name": "watched", "namespace": "default"},
    "spec": {"devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": "gpu.nvidia.com"}}]}},
}


def test_the_resource_claim_watch_sees_events_and_the_cluster_stays_reachable(
    attach, gpu_cluster, syncing, make_pool
):
    """The client names no model for a ResourceClaim list's items (37.x has ResourceV1ResourceClaim): a
    watch that asked it for one failed on every event and left the cluster Reachable: False."""
    cluster = attach(gpu_cluster)
    assert cluster.observed["features"]["dra"]
    ops = KubernetesOperations(cluster_ref(cluster))
    events, errors, stop = [], [], threading.Event()
    watch = ListWatch(
        ops.resource.list_resource_claim_for_all_namespaces,
        on_list=lambda items: None,
        on_event=lambda kind, obj: events.append((kind, obj["metadata"]["name"])),
        on_error=errors.append,
        stop=stop,
        watch_timeout_s=2,
    )
    thread = threading.Thread(target=watch.run, daemon=True)
    thread.start()
    try:
        wait_until(lambda: watch.resource_version is not None, timeout=10)
        gpu_cluster.create(RESOURCE_CLAIM)
        wait_until(lambda: ("ADDED", "watched") in events or errors, timeout=10)
    finally:
        stop.set()
        thread.join(10)
    assert errors == [] and ("ADDED", "watched") in events

    make_pool(cluster, 3)
    sync = syncing(cluster)
    gpu_cluster.create({**RESOURCE_CLAIM, "metadata": {"name": "second", "namespace": "default"}})
    wait_until(lambda: "unpooled_nodes" in Cluster.objects.get(pk=cluster.pk).observed, timeout=15)
    wait_until(sync.settled, timeout=15)
    reachable = next(c for c in Cluster.objects.get(pk=cluster.pk).conditions if c["type"] == "Reachable")
    assert (reachable["status"], reachable["reason"]) == ("True", "Watching")


def nvke_threads() -> list[str]:
    """This process's threads but the stand-ins' (each server's loop, one per open connection and one per
    HTTP/2 stream)."""
    stand_in = ("(serve_forever)", "(process_request_thread)")
    return sorted(
        t.name
        for t in threading.enumerate()
        if not (t.name.endswith(stand_in) or t.name.startswith(http2.THREAD_PREFIX))
    )


def test_threads_stay_the_same_as_clusters_are_attached(attach, gpu_cluster, syncing):
    """A cluster watched costs streams on the shared loop, not threads: 20 clusters take the threads 1
    took (it was 9 more per cluster); and its streams share one HTTP/2 connection (it was one each)."""
    first = attach(gpu_cluster)
    watching = lambda sync: all(w.resource_version for w in sync.watch.watches)  # noqa: E731
    syncs = [syncing(first)]
    wait_until(lambda: watching(syncs[0]), timeout=15)
    one = nvke_threads()
    stand_ins = [gpu_cluster]
    with contextlib.ExitStack() as servers:
        for i in range(19):
            server = servers.enter_context(FakeKubeApi())
            stand_ins.append(server)
            objects.gpu_operator(server)
            server.create(objects.gpu_node(f"gpu-{i}"))
            # A row as attach leaves it (the same tenant and features), on its own stand-in.
            cluster = Cluster.objects.get(pk=first.pk)
            cluster.pk, cluster.name, cluster.endpoint = None, f"more-{i}", server.url
            cluster.admin_token, cluster.ca_bundle = server.token, server.ca_bundle
            cluster.save()
            syncs.append(syncing(cluster))
        wait_until(lambda: all(watching(sync) for sync in syncs), timeout=30)
        assert nvke_threads() == one
        assert all(len(sync.watch.watches) <= 6 for sync in syncs), "six streams per cluster at most"
        # Every cluster's lists and watches on one HTTP/2 connection (the passes' calls are the
        # blocking client's, on HTTP/1.1).
        assert [server.open_connections().get("h2") for server in stand_ins] == [1] * 20
        # and, once the passes are done, at most the one their shared client keeps alive (operations.py)
        wait_until(lambda: all(sync.settled() for sync in syncs), timeout=30)
        assert all(server.open_connections().get("http/1.1", 0) <= 1 for server in stand_ins)
        for sync in syncs:
            sync.close(timeout=10)
        # A cluster no longer watched lets go of its connection at once.
        wait_until(lambda: not any(server.open_connections().get("h2") for server in stand_ins), timeout=5)


def reachable(cluster) -> tuple[str, str]:
    cluster.refresh_from_db()
    condition = next(c for c in cluster.conditions if c["type"] == "Reachable")
    return condition["status"], condition["reason"]


def test_a_cluster_whose_token_does_not_decrypt_stops_only_itself(attach, gpu_cluster, make_pool):
    from nvke.encryption import MARK, Undecryptable

    cluster = attach(gpu_cluster)
    pool = make_pool(cluster, 4)
    broken = Cluster.objects.get(pk=cluster.pk)  # a second attached cluster, saved under a lost key
    broken.pk, broken.name, broken.endpoint = None, "broken", "https://broken.example:6443"
    broken.admin_token = Undecryptable(MARK + "not-a-fernet-token")
    broken.save()
    stop = threading.Event()
    supervisor = kube_sync.Supervisor(poll_s=0.2, **FAST)
    thread = threading.Thread(target=supervisor.run, args=(stop,), daemon=True)
    thread.start()
    try:
        gpu_cluster.create(objects.gpu_node("gpu-d", count=8))
        wait_until(lambda: pool_status(pool) == "ready", timeout=15)  # the readable cluster is served
        wait_until(lambda: reachable(broken) == ("False", "SecretUndecryptable"), timeout=15)
        assert broken.pk not in supervisor.syncs and thread.is_alive()
    finally:
        stop.set()
        thread.join(15)
    assert not thread.is_alive()


def test_a_tenant_at_its_cap_waits_while_other_tenants_jobs_run():
    lane = kube_sync.Lane("capped", 4)
    release, ran = threading.Event(), []

    def job(name: str):
        return lambda: (ran.append(name), release.wait(10))

    for name in ("a1", "a2", "a3"):
        lane.put(job(name), tenant=1)
    lane.put(job("b1"), tenant=2)
    lane.put(job("nvke"))  # no tenant: never capped
    try:
        wait_until(lambda: len(ran) == 4)
        assert sorted(ran) == ["a1", "a2", "b1", "nvke"] and lane.running(1) == lane.cap == 2
    finally:
        release.set()
    wait_until(lambda: "a3" in ran)  # a slot freed, the tenant's next job runs


@contextlib.contextmanager
def silent_listener() -> Iterator[str]:
    """An endpoint that accepts connections and never answers; leaving closes them, so that what waited
    on them fails at once."""
    listener = socket.create_server(("127.0.0.1", 0))
    held: list[socket.socket] = []

    def accept() -> None:
        while True:
            try:
                held.append(listener.accept()[0])
            except OSError:  # closed
                return

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{listener.getsockname()[1]}"
    finally:
        listener.shutdown(socket.SHUT_RDWR)  # wakes accept()
        listener.close()
        thread.join(5)
        for peer in held:
            peer.close()


def stalled_copies(cluster: Cluster, tenants: list, url: str) -> list[Cluster]:
    """Rows as attach leaves them, one per tenant given, whose endpoint is `url`, each with a pool (whose
    reconcile calls the cluster)."""
    copies = []
    for i, tenant in enumerate(tenants):
        copy = Cluster.objects.get(pk=cluster.pk)
        copy.pk, copy.name, copy.tenant, copy.endpoint = None, f"stalled-{i}", tenant, url
        copy.save()
        pool = NodePool.objects.get(cluster=cluster)
        pool.pk, pool.tenant, pool.cluster = None, tenant, copy
        pool.save()
        copies.append(copy)
    return copies


def watching(cluster) -> bool:
    """Whether the cluster's pass has recorded what its watch sees (Reachable: True)."""
    cluster.refresh_from_db()
    return "unpooled_nodes" in cluster.observed and reachable(cluster) == ("True", "Watching")


def running(syncs) -> int:
    return sum(not sync.settled() for sync in syncs)


def test_one_tenants_stalled_clusters_hold_at_most_its_share_of_the_pass_threads(
    attach, gpu_cluster, syncing, make_pool, make_member, monkeypatch
):
    monkeypatch.setattr(kube_sync, "PASS_DEADLINE_S", 20.0)  # the stall outlasts the test
    healthy = attach(gpu_cluster, "healthy")
    make_pool(healthy, 3)
    other = make_member("other").memberships.get().tenant
    with silent_listener() as url:
        # PASS_WORKERS of them: with more, their lists would take all of streams.LISTS_AT_ONCE.
        stalled = [syncing(c) for c in stalled_copies(healthy, [other] * kube_sync.PASS_WORKERS, url)]
        for sync in stalled:  # due at once: they take the threads before the healthy cluster's first pass
            sync.poke()
        syncing(healthy)
        wait_until(lambda: watching(healthy), timeout=5)  # it was 60 s: 4 threads held, 2 calls of 30 s
        # Still stalled, all of them: the healthy cluster's pass did not wait for any to give up.
        lane = kube_sync.passes().main
        assert (
            running(stalled) == len(stalled)
            and lane.running(other.pk) == lane.cap == kube_sync.PASS_WORKERS // 2
        )
    # The listener gone, the passes fail at once: the syncs close without waiting out the deadline.


def test_stalled_clusters_of_many_tenants_end_within_the_pass_deadline_then_run_in_the_slow_lane(
    attach, gpu_cluster, syncing, make_pool, make_member, monkeypatch
):
    monkeypatch.setattr(kube_sync, "PASS_DEADLINE_S", 2.0)
    healthy = attach(gpu_cluster, "healthy")
    pool = make_pool(healthy, 4)
    tenants = [make_member(f"t{i}").memberships.get().tenant for i in range(kube_sync.PASS_WORKERS)]
    with silent_listener() as url:
        stalled = [syncing(c) for c in stalled_copies(healthy, tenants, url)]
        for sync in stalled:
            sync.poke()
        syncing(healthy)  # every thread is held: its pass waits, for the pass deadline at most
        wait_until(lambda: watching(healthy), timeout=kube_sync.PASS_DEADLINE_S + 3)
        wait_until(lambda: all(sync.slow for sync in stalled), timeout=5)
        for cluster in Cluster.objects.filter(tenant__in=tenants):
            status, reason = reachable(cluster)
            assert status == "False" and reason in kube_sync.SLOW_REASONS

        # Known bad now: their next passes stall the slow lane's threads, never the main ones.
        monkeypatch.setattr(kube_sync, "PASS_DEADLINE_S", 20.0)
        passes = kube_sync.passes()
        for sync in stalled:
            sync.poke()
        wait_until(lambda: sum(passes.slow.running(t.pk) for t in tenants) == kube_sync.SLOW_WORKERS)
        gpu_cluster.create(objects.gpu_node("gpu-d", count=8))
        wait_until(lambda: pool_status(pool) == "ready", timeout=5)
        assert running(stalled) == len(stalled), "still stalled: the healthy pass did not wait for them"
        assert sum(passes.main.running(t.pk) for t in tenants) == 0
