"""NVKE placing a user's GPU pods on a real-sized cluster of the strict Kubernetes stand-in (tests/kubeapi:
RBAC on every request, NVKE's admission policies, kube-scheduler, kubelet and DRA plugin actors), through
the official client over HTTPS, attached with NVKE's own service-account token.

Per Kubernetes minor, two paths on `--nodes` one-A10 nodes in a time-slicing pool:
- dra: a user creates a ResourceClaim (4Gi of GPU memory) and a pod using it, in a managed namespace, with
  what NVKE's admission sets (gate, pool toleration); placed = NVKE has written the claim's allocation;
- scheduler: a user creates a `schedulerName: nvke` pod asking 4Gi / 20%; placed = NVKE has bound it.
A user thread creates the `--pods` pods as fast as the client goes while NVKE's workloads pass
(claims.workloads.sync_workloads) runs back to back, as kube_sync runs it on watch events. Prints pods/s
from the first creation to the last placement, p50/p99 of creation → placement, NVKE's passes and the
API requests NVKE made per placed pod (by verb and resource). Then a 100-node driver upgrade
(maxUnavailable 10%, one pod per node) ticked to the end: NVKE's requests per tick and per node in flight.

    DATABASE_URL=postgres://…/nvke_kbench python bench/kube_workloads.py --nodes 1000 --pods 2000 --json
    #   --minors 1.34.2,1.36.0  --paths dra,scheduler  --upgrade-nodes 100 (0: none)  --profile FILE

The database at DATABASE_URL is emptied."""

import argparse
import contextlib
import json
import os
import statistics
import sys
import threading
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "nvke.settings")

from bench.bench_db import ensure_database, fresh_catalog  # noqa: E402
from bench.kube_stand_in import (  # noqa: E402
    components_in_own_loop,
    components_paused,
    first_reached,
    gpu_fleet,
    nvke_ref,
    user_token,
)

NAMESPACE = "ml"
A10 = {"product": "NVIDIA-A10", "count": 1, "memory_mib": 23028}


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(len(ordered) * q))]


def request_kind(method: str, path: str) -> str:
    """ "GET pods", "POST pods/binding", "PATCH resourceclaims/status": what a request did to what."""
    parts = path.strip("/").split("/")
    rest = parts[2:] if parts[0] == "api" else parts[3:]
    if rest[:1] == ["namespaces"] and len(rest) > 2:
        rest = rest[2:]
    verb = {"GET": "LIST" if len(rest) == 1 else "GET"}.get(method, method)
    return f"{verb} {'/'.join(rest[0:3:2])}"


def attached_cluster(server, context, path: str, nodes: int):
    """The stand-in as an attached cluster with a time-slicing A10 pool of `nodes` nodes."""
    from catalog.models import DriverRelease, GpuModel
    from clusters.services import attach_cluster
    from nodepools.services import create_pool, reconcile
    from nvke.providers.kubernetes import dra, records
    from tests.kubeapi import objects

    dra_path = path == "dra"
    if dra_path:  # the driver's consumable shares: KEP-5075's gate, alpha (off) on 1.34, beta on 1.36
        server.features.set("DRAConsumableCapacity", True)
    objects.gpu_operator(server)
    server.create(records.crd())
    if dra_path:
        server.create(objects.device_class())
    server.create(objects.cpu_node("cpu-0"))
    gpu_fleet(
        server,
        nodes,
        slices=dra_path,
        prefix=f"{path}{server.version.replace('.', '')}",
        consumable=True,
        **A10,
    )
    server.create(objects.namespace(NAMESPACE, {dra.MANAGED: "true"}))
    server.settle()
    ref = nvke_ref(server)
    with components_in_own_loop(server):  # NVKE labels and taints every node: not a full run a write
        cluster = attach_cluster(
            context=context,
            name=f"{path}-{server.version.replace('.', '-')}",
            endpoint=ref.endpoint,
            token=ref.token,
            ca_bundle=ref.ca_bundle,
        )
        pool = create_pool(
            context=context,
            cluster=cluster,
            name="infer",
            gpu_model=GpuModel.objects.get(name="a10"),
            gpus_per_node=1,
            node_count=nodes,
            min_nodes=0,
            max_nodes=nodes,
            driver_release=DriverRelease.objects.get(version="580.126.09"),
            sharing_mode="time-slicing",
        )
        reconcile(pool.pk)
    return cluster


def user_objects(path: str, i: int) -> list[tuple[str, dict]]:
    """What the user creates for pod i: ("claim", ResourceClaim) and ("pod", Pod)."""
    from nvke.providers.kubernetes import admission, dra, scheduler
    from tests.kubeapi import objects

    pod = objects.pod(f"job-{i:05d}", namespace=NAMESPACE)
    if path == "scheduler":
        pod["spec"]["schedulerName"] = scheduler.SCHEDULER
        # What NVKE's ValidatingAdmissionPolicy asks for where no MutatingAdmissionPolicy adds it (1.34):
        # the pool toleration and one slot of NVKE's device plugin
        pod["spec"]["tolerations"] = [dict(dra.POOL_TOLERATION)]
        limits = {"nvidia.com/gpu-memory": "4Gi", "nvidia.com/gpu-utilization": "20", admission.SLOT: "1"}
        pod["spec"]["containers"][0]["resources"] = {"limits": limits}
        return [("pod", pod)]
    name = f"job-{i:05d}"
    request = {
        "name": "gpu",
        "exactly": {"deviceClassName": dra.DEVICE_CLASS, "capacity": {"requests": {"memory": "4Gi"}}},
    }
    claim = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": name},
        "spec": {"devices": {"requests": [request]}},
    }
    pod["spec"].update(dra.admitted_pod_fields())
    pod["spec"]["resourceClaims"] = [{"name": "gpu", "resourceClaimName": name}]
    pod["spec"]["containers"][0]["resources"] = {"claims": [{"name": "gpu"}]}
    return [("claim", claim), ("pod", pod)]


def placement(
    server, context, path: str, nodes: int, pods: int, components: str, profile: str | None
) -> dict:
    import kubernetes

    from claims.workloads import sync_workloads
    from tests.kubeapi.fixtures import client_configuration

    started = time.perf_counter()
    cluster = attached_cluster(server, context, path, nodes)
    setup_s = time.perf_counter() - started
    if path == "dra":
        placed = first_reached(
            server,
            "resource.k8s.io/v1",
            "ResourceClaim",
            lambda o: bool(o.get("status", {}).get("allocation")),
        )
    else:
        placed = first_reached(server, "v1", "Pod", lambda o: bool(o["spec"].get("nodeName")))
    token = user_token(server, NAMESPACE, ["pods", "resourceclaims"])
    created: dict[str, float] = {}
    user_requests = 0

    failed: list[Exception] = []

    def user() -> None:
        try:
            create()
        except Exception as error:  # the run's figures would be wrong: raised after the passes
            failed.append(error)

    def create() -> None:
        nonlocal user_requests
        with kubernetes.client.ApiClient(client_configuration(server, token=token)) as api:
            core, resource = kubernetes.client.CoreV1Api(api), kubernetes.client.ResourceV1Api(api)
            for i in range(pods):
                for kind, obj in user_objects(path, i):
                    if kind == "pod":
                        created[obj["metadata"]["name"]] = time.perf_counter()
                        core.create_namespaced_pod(NAMESPACE, obj)
                    else:
                        resource.create_namespaced_resource_claim(NAMESPACE, obj)
                    user_requests += 1

    sync_workloads(cluster.pk)  # warm: the client's connections, the cluster's caches
    server.clear_requests()
    creator = threading.Thread(target=user)
    passes = []
    profiler = None
    if profile:
        import cProfile

        profiler = cProfile.Profile()
        profiler.enable()
    cpu_s = 0.0  # NVKE's own CPU: the passes' thread, the stand-in's threads apart
    with components_in_own_loop(server) if components == "loop" else contextlib.nullcontext():
        creator.start()
        while True:
            creating, before = creator.is_alive(), len(placed)
            begun, cpu = time.perf_counter(), time.thread_time()
            sync_workloads(cluster.pk)
            passes.append(time.perf_counter() - begun)
            cpu_s += time.thread_time() - cpu
            if not creating and (len(placed) >= pods or len(placed) == before):
                break  # every pod created and placed, or a pass over all of them placed nothing more
        creator.join()
    if failed:
        raise failed[0]
    if profiler:
        profiler.disable()
        profiler.dump_stats(f"{profile}.{path}-{server.version}")
    requests = [request_kind(m, p) for m, p, *_ in server.requests]
    nvke = Counter(requests)
    nvke.subtract({"POST pods": pods, **({"POST resourceclaims": pods} if path == "dra" else {})})
    nvke = +nvke  # the user's creates taken out
    latencies = [placed[n] - created[n] for n in created if n in placed]
    done = len(latencies)
    span = (max(placed.values()) - min(created.values())) if done else float("nan")
    total = sum(nvke.values())
    return {
        "nodes": nodes,
        "pods": pods,
        "placed": done,
        "setup_s": round(setup_s, 1),
        "pods_per_s": round(done / span, 1) if done else 0,
        "user_pods_per_s": round(pods / (max(created.values()) - min(created.values())), 1),
        "p50_s": round(percentile(latencies, 0.5), 3) if done else None,
        "p99_s": round(percentile(latencies, 0.99), 3) if done else None,
        "passes": len(passes),
        "pass_s_median": round(statistics.median(passes), 3),
        "pass_s_max": round(max(passes), 3),
        "nvke_cpu_ms_per_pod": round(cpu_s * 1000 / done, 2) if done else None,
        "nvke_requests": total,
        "nvke_requests_per_pod": round(total / done, 2) if done else None,
        "nvke_requests_by_kind": dict(nvke.most_common(8)),
        "user_requests": user_requests,
    }


def upgrade(server, context, nodes: int) -> dict:
    """A driver upgrade of an attached `nodes`-node H100 pool ticked to the end; NVKE's requests per tick."""
    from catalog.models import DriverRelease, GpuModel
    from clusters.services import attach_cluster
    from nodepools.models import NodePool
    from nodepools.services import reconcile
    from tests.kubeapi import objects
    from upgrades.controller import tick
    from upgrades.node_machine import ACTIVE
    from upgrades.services import create_run

    objects.gpu_operator(server)
    with components_paused(server):
        for name in gpu_fleet(server, nodes, slices=False, prefix=f"up{server.version.replace('.', '')}"):
            server.create(objects.pod(f"job-{name}", node=name, labels={"app": "train"}))
    ref = nvke_ref(server)
    cluster = attach_cluster(
        context=context,
        name=f"upgrade-{server.version.replace('.', '-')}",
        endpoint=ref.endpoint,
        token=ref.token,
        ca_bundle=ref.ca_bundle,
    )
    pool = NodePool.objects.create(
        tenant=cluster.tenant,
        cluster=cluster,
        name="train",
        gpu_model=GpuModel.objects.get(name="h100-sxm5-80gb"),
        gpus_per_node=8,
        node_count=nodes,
        min_nodes=0,
        max_nodes=nodes,
        driver_release=DriverRelease.objects.get(version="570.133.20"),
        status=NodePool.Status.PROVISIONING,
    )
    reconcile(pool.pk)
    run = create_run(
        context=context,
        pool=pool,
        target_release=DriverRelease.objects.get(version="580.105.08"),
        max_unavailable="10%",
    )
    ticks = []  # (nodes in flight before the tick, reads, writes, seconds)
    # The components run once between ticks, as time passing would let them, not after every write
    # (see components_in_own_loop: after every write they cost writes × objects).
    components, server.store.on_write = server.store.on_write, None
    for _ in range(2000):
        with server.store.lock:
            components()
        run.refresh_from_db()
        in_flight = run.nodes.filter(state__in=list(ACTIVE)).count()
        server.clear_requests()
        begun = time.perf_counter()
        more = tick(run.pk, run.tick_seq)
        seconds = time.perf_counter() - begun
        reads = sum(m == "GET" for m, *_ in server.requests)
        ticks.append((in_flight, reads, len(server.requests) - reads, seconds))
        if len(ticks) % 20 == 0:
            print(f"upgrade tick {len(ticks)}: {ticks[-20:]}", file=sys.stderr, flush=True)
        if more is None:
            break
    run.refresh_from_db()
    busy = [t for t in ticks if t[0]]
    return {
        "nodes": nodes,
        "status": run.status,
        "ticks": len(ticks),
        "requests_per_tick_mean": round(statistics.mean(t[1] + t[2] for t in ticks), 1),
        "requests_per_tick_max": max(t[1] + t[2] for t in ticks),
        "reads_per_tick_mean": round(statistics.mean(t[1] for t in ticks), 1),
        "nodes_in_flight_mean": round(statistics.mean(t[0] for t in busy), 1) if busy else 0,
        "reads_per_node_in_flight": round(sum(t[1] for t in busy) / sum(t[0] for t in busy), 2)
        if busy
        else None,
        "tick_s_median": round(statistics.median(t[3] for t in ticks), 3),
        "tick_s_max": round(max(t[3] for t in ticks), 3),
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--nodes", type=int, default=100)
    parser.add_argument("--pods", type=int, default=200)
    parser.add_argument("--minors", default="1.34.2,1.36.0")
    parser.add_argument("--paths", default="dra,scheduler")
    parser.add_argument("--upgrade-nodes", type=int, default=100)
    parser.add_argument(
        "--profile", help="cProfile NVKE's side of each placement run into FILE.<path>-<minor>"
    )
    parser.add_argument(
        "--components",
        choices=["loop", "per-write"],
        default="loop",
        help="the stand-in's components: from a loop of their own (default) or after every write (tests')",
    )
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()

    # One pool of every node: an operator's limit (100 by default), raised as the operator would
    os.environ.setdefault("NVKE_MAX_POOL_NODES", str(max(100, args.nodes, args.upgrade_nodes)))
    ensure_database(os.environ["DATABASE_URL"])
    import django

    django.setup()
    from django.contrib.auth import get_user_model

    from catalog.models import GpuModel
    from nvke.tenancy.context import TenantContext
    from nvke.tenancy.models import GpuQuota, Membership, Tenant
    from tests.kubeapi.server import FakeKubeApi

    fresh_catalog()
    tenant = Tenant.objects.create(name="Bench", slug="bench")
    Membership.objects.create(tenant=tenant, user=get_user_model().objects.create_user("bench"), role="owner")
    for model in GpuModel.objects.filter(name__in=["a10", "h100-sxm5-80gb"]):  # software, not quotas
        GpuQuota.objects.create(tenant=tenant, gpu_model=model, max_gpus=100_000)
    context = TenantContext(tenant, "owner")
    results: dict = {}
    for minor in args.minors.split(","):
        for path in filter(None, args.paths.split(",")):
            with FakeKubeApi(minor) as server:
                results[f"{path}@{minor}"] = placement(
                    server, context, path, args.nodes, args.pods, args.components, args.profile
                )
            print(f"{path}@{minor}: {results[f'{path}@{minor}']}", file=sys.stderr, flush=True)
        if args.upgrade_nodes:
            with FakeKubeApi(minor) as server:
                results[f"upgrade@{minor}"] = upgrade(server, context, args.upgrade_nodes)
            print(f"upgrade@{minor}: {results[f'upgrade@{minor}']}", file=sys.stderr, flush=True)
    if args.json:
        print(json.dumps(results))
        return
    for name, value in results.items():
        print(f"{name:18} {value}")


if __name__ == "__main__":
    main()
