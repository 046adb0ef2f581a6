"""What the benchmarks against the Kubernetes stand-in (tests/kubeapi) share: a GPU fleet seeded into a
FakeKubeApi, NVKE's own access to it (its service account's token, every request authorized by the
ClusterRole of NVKE's access manifest), a user's token, and the time each object first reached a state."""

import contextlib
import os
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

# Settings for the benchmarks' processes, before django.setup(): a development setup on local services,
# and the stand-in on loopback allowed, as an operator's allowance for a local demo sets it.
os.environ.setdefault("NVKE_DEV", "1")
os.environ.setdefault("NVKE_OUTBOUND_ALLOWED_NETWORKS", "127.0.0.0/8")


def gpu_fleet(
    server, nodes: int, *, slices: bool, prefix: str = "gpu", consumable: bool = False, **node
) -> list[str]:
    """`nodes` GPU nodes named <prefix>-0000… (node names are unique across one NVKE database's clusters),
    as gpu_node(**node) builds them, each with the NVIDIA DRA driver's ResourceSlice when `slices`; returns
    their names."""
    from tests.kubeapi import objects

    names = []
    with components_paused(server):
        for i in range(nodes):
            made = server.create(objects.gpu_node(f"{prefix}-{i:04d}", **node))
            if slices:
                server.create(objects.resource_slice(made, int(node.get("count", 8)), consumable=consumable))
            names.append(made["metadata"]["name"])
    return names


def nvke_ref(server, name: str = "bench"):
    """A ClusterRef with NVKE's service-account token, NVKE's admission policies applied first."""
    from nvke.providers.base import ClusterRef
    from tests.conftest import install_nvke_policies
    from tests.nvke.providers.kubernetes.access import nvke_token

    install_nvke_policies(server)
    return ClusterRef(name=name, endpoint=server.url, token=nvke_token(server), ca_bundle=server.ca_bundle)


def user_token(server, namespace: str, resources: list[str]) -> str:
    """A user's service account that may create and read `resources` (core or resource.k8s.io)."""
    from tests.kubeapi import accounts

    rules = [
        {"apiGroups": ["", "resource.k8s.io"], "resources": resources, "verbs": ["create", "get", "list"]}
    ]
    return accounts.grant(server, rules, name="bench-user", namespace=namespace)


def first_reached(server, api_version: str, kind: str, reached: Callable[[dict[str, Any]], bool]) -> dict:
    """{name: perf_counter()} of the first write that left each object of a kind in the `reached` state,
    filled as the stand-in commits writes (wraps its store's commit; the benchmark's own instrument)."""
    store = server.store
    key = server._type(api_version, kind).key
    seen: dict[str, float] = {}
    commit = store._commit

    def timed(rt, event, obj, previous):
        committed = commit(rt, event, obj, previous)
        name = obj["metadata"]["name"]
        if rt.key == key and event != "DELETED" and name not in seen and reached(obj):
            seen[name] = time.perf_counter()
        return committed

    store._commit = timed
    return seen


@contextlib.contextmanager
def components_paused(server) -> Iterator[None]:
    """Write without the stand-in's cluster components (kube-scheduler, kubelet, claim controller, …), then
    run them until quiet: seeding a thousand nodes with them after every write would cost nodes × objects."""
    store = server.store
    reconcile, store.on_write = store.on_write, None
    try:
        yield
    finally:
        store.on_write = reconcile
        server.settle()


@contextlib.contextmanager
def components_in_own_loop(server, interval_s: float = 0.05) -> Iterator[None]:
    """Run the stand-in's cluster components from a loop of their own, pausing `interval_s` or as long as
    their last run took, instead of after every write. After every write is what makes the tests
    deterministic, but each run reads every object, so N writes on a cluster of M objects cost N × M: at a
    thousand nodes the stand-in, not NVKE, would be all the benchmark measured. A real cluster's
    controllers work from their informers' queues, apart from the API server's writes, as this loop does."""
    stop = threading.Event()

    def loop(reconcile: Callable[[], None]) -> None:
        pause = interval_s
        while not stop.wait(pause):
            begun = time.perf_counter()
            with server.store.lock:  # the lock every request takes: the requests wait while they run
                reconcile()
            pause = max(interval_s, time.perf_counter() - begun)  # at most half the time the lock's

    with components_paused(server):
        thread = threading.Thread(target=loop, args=(server.actors.reconcile,), daemon=True)
        thread.start()
        try:
            yield
        finally:
            stop.set()
            thread.join()
