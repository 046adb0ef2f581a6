"""The Kubernetes provider's cost against the fake API server of tests/kubeapi (HTTPS on 127.0.0.1,
through the official client): how many requests each operation makes and how long it takes here. The
fake answers in well under a millisecond of its own work, so these are the client side's cost and the
request counts; a real API server's latency adds on top of every request counted.

1. attach checks (`attach.inspect`);
2. `list_nodes()` of an N-node GPU cluster with NVIDIA's ResourceSlices;
3. what one upgrade tick reads per node in flight (`driver_status` + `drain_status`);
4. a drain of a node with 10 pods (cordon, evictions);
5. a watch event's latency: a node patched → `ClusterWatch` has it.

    python bench/kubernetes_provider.py [--nodes 200] [--json]"""

import argparse
import json
import os
import statistics
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "nvke.settings")

from bench.kube_stand_in import gpu_fleet, nvke_ref  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--nodes", type=int, default=200)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()

    import django

    django.setup()
    from nvke.providers.kubernetes import attach
    from nvke.providers.kubernetes.operations import KubernetesOperations
    from nvke.providers.kubernetes.watch import ClusterWatch
    from tests.kubeapi import objects
    from tests.kubeapi.server import FakeKubeApi

    results = {"nodes": args.nodes}
    with FakeKubeApi() as server:
        objects.gpu_operator(server)
        gpu_fleet(server, args.nodes, slices=True, labels={"nvke.io/pool": "train"})
        for i in range(10):
            server.create(objects.pod(f"job-{i}", node="gpu-0001", labels={"app": "train"}))
        server.settle()
        ref = nvke_ref(server)  # every request authorized as NVKE's service account
        ops = KubernetesOperations(ref)

        def measure(name: str, function, repeat: int) -> None:
            server.clear_requests()
            function()  # warm: TLS connections, discovery
            server.clear_requests()
            times = []
            for _ in range(repeat):
                started = time.perf_counter()
                function()
                times.append((time.perf_counter() - started) * 1000)
            results[name] = {
                "median_ms": round(statistics.median(times), 2),
                "requests": len(server.requests) // repeat,
            }

        measure("attach_checks", lambda: attach.inspect(ref), 5)
        measure("list_nodes", lambda: ops.list_nodes(), 5)
        ops.install_driver("gpu-0002", "580.105.08")
        server.settle()
        measure(
            "tick_reads_per_node", lambda: (ops.driver_status("gpu-0002"), ops.drain_status("gpu-0002")), 20
        )
        server.clear_requests()
        started = time.perf_counter()
        ops.drain("gpu-0001")
        results["drain_10_pods"] = {
            "ms": round((time.perf_counter() - started) * 1000, 2),
            "requests": len(server.requests),
        }

        seen = threading.Event()
        watch = ClusterWatch(ops, changed=seen.set, failed=lambda error: None, dra=False, watch_timeout_s=30)
        watch.start()
        seen.wait(10)
        latencies = []
        for i in range(50):
            seen.clear()
            started = time.perf_counter()
            server.patch_merge("v1", "Node", "gpu-0003", {"metadata": {"labels": {"bench": str(i)}}})
            seen.wait(5)
            latencies.append((time.perf_counter() - started) * 1000)
        watch.close(5)
        latencies.sort()
        results["watch_event_ms"] = {
            "median": round(statistics.median(latencies), 2),
            "p95": round(latencies[int(len(latencies) * 0.95) - 1], 2),
        }
    if args.json:
        print(json.dumps(results))
        return
    for name, value in results.items():
        print(f"{name:22} {value}")


if __name__ == "__main__":
    main()
