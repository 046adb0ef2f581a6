"""nvke-agent's device plugin on one node: how long the kubelet's Allocate takes, and how many pods a
second go through NVKE's bind and the plugin's Allocate. The kubelet is tests/nvke/agent/fake_kubelet.py
(gRPC over a unix socket, stubs from NVKE's api.proto); the API server is the fake of tests/kubeapi
(HTTPS on 127.0.0.1, the official client), which the plugin lists the node's pods from on every
Allocate, as it does from a real API server.

Each round, as NVKE's scheduler does, annotates a pending pod with what it holds (merge patch) and binds
it (pods/binding); then the kubelet allocates its one share slot and reports the pod's containers
(containerStatuses), so the plugin lists all the node's pods but has one candidate, as on a node where
NVKE binds one pod at a time. The node fills up to --pods pods (110 is the kubelet's default maxPods).

    python bench/device_plugin.py [--pods 110] [--json]"""

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "nvke.settings")

GPU = "GPU-6c4a2b1e-0000-4000-8000-00000000a010"
NODE = "a10-0"


def percentile(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(p / 100 * (len(ordered) - 1)))]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--pods", type=int, default=110)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()

    import django

    django.setup()
    from kubernetes import client

    from claims.sizing import mps_environment
    from nvke.agent import allocation
    from nvke.agent.device_plugin import DevicePlugin, PluginServer
    from nvke.agent.node_side import node_pods
    from nvke.providers.base import DeviceShare, WorkloadClaim
    from nvke.providers.kubernetes import scheduler
    from tests.kubeapi import objects
    from tests.kubeapi.fixtures import client_configuration
    from tests.kubeapi.server import FakeKubeApi
    from tests.nvke.agent.fake_kubelet import FakeKubelet

    directory = tempfile.mkdtemp(prefix="dp-", dir="/tmp")
    with FakeKubeApi() as server, client.ApiClient(client_configuration(server)) as api:
        server.create(objects.namespace("ml", {"nvke.io/managed": "true"}))
        core = client.CoreV1Api(api)
        kubelet = FakeKubelet(directory)
        kubelet.start()
        plugin = DevicePlugin(
            [GPU], node_pods(api, NODE), slots=args.pods, pipe_directory=lambda u: "/p", mps_up=lambda u: True
        )
        plugin_server = PluginServer(plugin, directory)
        plugin_server.step()
        kubelet.registrations.get(timeout=10)
        try:
            allocate_ms, round_ms = [], []
            started_all = time.perf_counter()
            for i in range(args.pods):
                name = f"serve-{i}"
                claim = WorkloadClaim(
                    "ml",
                    name,
                    "pod",
                    "fraction",
                    1,
                    node=NODE,
                    shares=(DeviceShare(0, GPU, 2048, 20, 10),),
                    isolation="memory-capped",
                    environment=tuple(mps_environment(2048, 20).items()),
                )
                pod = objects.pod(name, namespace="ml")
                pod["spec"]["schedulerName"] = scheduler.SCHEDULER
                pod["spec"]["containers"][0]["resources"] = {"limits": {allocation.RESOURCE: "1"}}
                core.create_namespaced_pod("ml", pod)
                started = time.perf_counter()
                core.patch_namespaced_pod(
                    name, "ml", {"metadata": {"annotations": scheduler.annotations(claim)}}
                )
                binding = client.V1Binding(
                    metadata=client.V1ObjectMeta(name=name, namespace="ml"),
                    target=client.V1ObjectReference(api_version="v1", kind="Node", name=NODE),
                )
                core.create_namespaced_pod_binding(name, "ml", binding, _preload_content=False)
                asked = time.perf_counter()
                answer = kubelet.allocate([allocation.slot_id(GPU, i)]).container_responses[0]
                done = time.perf_counter()
                assert dict(answer.envs)["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"] == "20"
                allocate_ms.append((done - asked) * 1000)
                round_ms.append((done - started) * 1000)
                status = {"status": {"containerStatuses": [_creating()]}}
                core.patch_namespaced_pod_status(name, "ml", status)  # the kubelet admitted it
            total_s = time.perf_counter() - started_all
        finally:  # a failed round must not leave the plugin's stream threads running
            plugin_server.stop()
            kubelet.stop()
    shutil.rmtree(directory, ignore_errors=True)
    results = {
        "pods": args.pods,
        "allocate_ms": {
            "p50": round(percentile(allocate_ms, 50), 2),
            "p99": round(percentile(allocate_ms, 99), 2),
        },
        "bind_and_allocate_ms": {
            "p50": round(percentile(round_ms, 50), 2),
            "p99": round(percentile(round_ms, 99), 2),
        },
        "pods_per_s_bind_and_allocate": round(len(round_ms) / (sum(round_ms) / 1000), 1),
        "pods_per_s_with_pod_create_and_status": round(args.pods / total_s, 1),
        "allocate_mean_ms": round(statistics.mean(allocate_ms), 2),
    }
    print(json.dumps(results, indent=None if args.json else 2))


def _creating() -> dict:
    return {
        "name": "main",
        "image": "nvcr.io/nvidia/pytorch:25.01-py3",
        "imageID": "",
        "ready": False,
        "restartCount": 0,
        "state": {"waiting": {"reason": "ContainerCreating"}},
    }


if __name__ == "__main__":
    main()
