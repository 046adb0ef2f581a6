"""NVKE's device plugin against a fake kubelet speaking the device-plugin gRPC API over unix sockets
(fake_kubelet.py, stubs generated from NVKE's api.proto), with pods read through the official client
from the strict Kubernetes stand-in: registration, ListAndWatch and GPU health, Allocate for pods NVKE
placed, concurrent Allocates on one node, and registering again when the kubelet restarts."""

import os
import shutil
import sys
import tempfile
import threading

import grpc
import pytest
from kubernetes import client

from claims.sizing import mps_environment
from nvke.agent import allocation, mps, nvml
from nvke.agent.device_plugin import DevicePlugin, PluginServer
from nvke.agent.kubelet import HEALTHY, UNHEALTHY, VERSION
from nvke.agent.node_side import node_pods
from nvke.providers.base import DeviceShare, WorkloadClaim
from nvke.providers.kubernetes import scheduler
from tests.kubeapi import objects

from . import fake_pynvml
from .test_agent import fake_gpus

NODE = "a10-node-1"
GPU = "GPU-6c4a2b1e-0000-4000-8000-00000000a010"
OTHER_GPU = "GPU-6c4a2b1e-0000-4000-8000-00000000a011"
SLOTS = 4


@pytest.fixture
def directory():
    """A short path: a unix socket's path may not pass 107 bytes."""
    path = tempfile.mkdtemp(prefix="dp-", dir="/tmp")
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def cluster(kubeapi, kube_client):
    kubeapi.create(objects.namespace("team", {"nvke.io/managed": "true"}))
    return client.CoreV1Api(kube_client)


@pytest.fixture
def kubelet(directory):
    from .fake_kubelet import FakeKubelet

    fake = FakeKubelet(directory)
    fake.start()
    yield fake
    fake.stop()


@pytest.fixture
def served(directory, kubelet, cluster, kube_client):
    plugin = DevicePlugin(
        [GPU, OTHER_GPU],
        node_pods(kube_client, NODE),
        SLOTS,
        pipe_directory=lambda uuid: f"/run/nvke/mps/{uuid}/pipe",
        mps_up=lambda uuid: True,
    )
    server = PluginServer(plugin, directory)
    server.step()
    yield server
    server.stop()


def placed(name: str, memory_mib: int, ceiling: int, *, mps: bool = True, gpu: str = GPU) -> WorkloadClaim:
    """A fraction as NVKE's allocator placed it on the A10 node (an MPS pool unless `mps` is False)."""
    share = DeviceShare(
        index=0, uuid=gpu, memory_mib=memory_mib, ceiling_percent=ceiling, guaranteed_percent=10
    )
    env = tuple(mps_environment(memory_mib, ceiling).items()) if mps else ()
    return WorkloadClaim(
        "team",
        name,
        "pod",
        "fraction",
        1,
        node=NODE,
        shares=(share,),
        isolation="memory-capped",
        environment=env,
    )


def bind(core, claim: WorkloadClaim, slots: int = 1) -> dict:
    """The pod as NVKE's scheduler leaves it: annotated with what it holds, bound to the node."""
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": claim.name, "namespace": "team", "annotations": scheduler.annotations(claim)},
        "spec": {
            "schedulerName": "nvke",
            "nodeName": NODE,
            "containers": [
                {
                    "name": "main",
                    "image": "vllm/vllm-openai:v0.11.0",
                    "resources": {"limits": {allocation.RESOURCE: str(slots)}},
                }
            ],
        },
    }
    return core.create_namespaced_pod("team", pod).to_dict()


def slots(n: int, gpu: str = GPU) -> list[str]:
    return [allocation.slot_id(gpu, i) for i in range(n)]


def test_the_plugin_registers_and_lists_its_share_slots(served, kubelet):
    request, options = kubelet.registrations.get(timeout=10)
    assert (request.version, request.resource_name, request.endpoint) == (
        VERSION,
        "nvke.io/gpu-share",
        "nvke-gpu-share.sock",
    )
    assert options.pre_start_required and options.get_preferred_allocation_available
    listed = kubelet.lists.get(timeout=10)
    assert len(listed) == 2 * SLOTS and set(listed.values()) == {HEALTHY}
    assert allocation.slot_id(OTHER_GPU, SLOTS - 1) in listed


def test_gpu_health_from_nvml_reaches_list_and_watch(served, kubelet, monkeypatch):
    gpus = fake_gpus([GPU.removeprefix("GPU-"), OTHER_GPU.removeprefix("GPU-")])
    monkeypatch.setitem(sys.modules, "pynvml", fake_pynvml.make(gpus))
    collector = nvml.NvmlCollector(nvml.load())
    health = lambda: {f"GPU-{u}": ok for u, ok in collector.health().items()}  # noqa: E731
    kubelet.lists.get(timeout=10)
    assert served.plugin.set_health(health()) is False  # nothing changed: no new list
    gpus[1]["lost"] = True  # fallen off the bus: NVML answers with an error
    assert served.plugin.set_health(health()) is True
    listed = kubelet.lists.get(timeout=10)
    assert {listed[i] for i in slots(SLOTS, OTHER_GPU)} == {UNHEALTHY}
    assert {listed[i] for i in slots(SLOTS)} == {HEALTHY}
    gpus[1]["lost"] = False
    served.plugin.set_health(health())
    assert set(kubelet.lists.get(timeout=10).values()) == {HEALTHY}


def test_a_fatal_xid_makes_its_gpu_unhealthy_an_application_xid_does_not(monkeypatch):
    gpus = fake_gpus(["aaaa-1", "bbbb-2"])
    monkeypatch.setitem(sys.modules, "pynvml", fake_pynvml.make(gpus, xids=[(0, 43), (1, 79)]))
    collector = nvml.NvmlCollector(nvml.load())
    collector.sample(0.0)
    assert collector.health() == {"aaaa-1": True, "bbbb-2": False}  # 43: a kernel killed; 79: off the bus


def test_allocate_gives_the_pod_nvke_placed_its_gpu_limits_and_mps_pipes(served, kubelet, cluster):
    kubelet.registrations.get(timeout=10)
    bind(cluster, placed("big", 8192, 70))
    (answer,) = kubelet.allocate(slots(1)).container_responses
    pipes = f"/run/nvke/mps/{GPU}/pipe"
    assert dict(answer.envs) == {
        "NVIDIA_VISIBLE_DEVICES": GPU,
        "CUDA_DEVICE_MEMORY_LIMIT": "8192m",
        "CUDA_DEVICE_SM_LIMIT": "70",
        "NVKE_GPU_MEMORY_LIMIT_MIB": "8192",
        "NVKE_GPU_COMPUTE_PERCENT": "70",
        "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE": "70",
        "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT": "0=8192M",
        "CUDA_MPS_PIPE_DIRECTORY": pipes,
    }
    assert [(m.host_path, m.container_path) for m in answer.mounts] == [(pipes, pipes), (mps.SHM, "/dev/shm")]
    with pytest.raises(grpc.RpcError) as refused:  # answered once: no second container gets it
        kubelet.allocate(slots(1))
    assert refused.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    assert "No pod bound to this node by NVKE waits for 1 nvke.io/gpu-share" in refused.value.details()


def test_a_fraction_outside_mps_gets_limits_and_no_mps_pipes(served, kubelet, cluster):
    kubelet.registrations.get(timeout=10)
    bind(cluster, placed("ts", 2048, 20, mps=False))
    (answer,) = kubelet.allocate(slots(1)).container_responses
    assert dict(answer.envs)["CUDA_DEVICE_MEMORY_LIMIT"] == "2048m"
    assert not any(name.startswith("CUDA_MPS_") for name in answer.envs) and not answer.mounts


def allocate_at_once(kubelet, *asks: list[str]) -> list:
    """Allocates sent together from threads released at one barrier, as two pods admitted at once."""
    barrier, results = threading.Barrier(len(asks)), [None] * len(asks)

    def send(i: int) -> None:
        barrier.wait()
        try:
            results[i] = kubelet.allocate(asks[i]).container_responses[0]
        except grpc.RpcError as error:
            results[i] = error

    threads = [threading.Thread(target=send, args=(i,)) for i in range(len(asks))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=20)
    return results


def test_two_concurrent_allocates_on_one_node_each_get_their_own_pod(served, kubelet, cluster):
    """The A10 scenario: three 2Gi+20% pods bound at once are interchangeable; two Allocates at once
    take two different pods (the lock), the third the last one, a fourth finds none."""
    kubelet.registrations.get(timeout=10)
    for name in ("small-1", "small-2", "small-3"):
        bind(cluster, placed(name, 2048, 20))
    first, second = allocate_at_once(kubelet, slots(1), slots(2)[1:])
    assert dict(first.envs)["CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"] == "0=2048M"
    assert dict(first.envs) == dict(second.envs)
    assert len(served.plugin.answered) == 2
    kubelet.allocate(slots(3)[2:])
    assert sorted(g.pod for g in served.plugin.answered.values()) == [
        "team/small-1",
        "team/small-2",
        "team/small-3",
    ]
    with pytest.raises(grpc.RpcError):
        kubelet.allocate(slots(4)[3:])


def test_two_concurrent_allocates_of_different_pods_told_apart_by_their_slots(served, kubelet, cluster):
    kubelet.registrations.get(timeout=10)
    bind(cluster, placed("big", 8192, 70), slots=2)
    bind(cluster, placed("small", 2048, 20))
    big, small = allocate_at_once(kubelet, slots(2), slots(3)[2:])
    assert dict(big.envs)["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"] == "70"
    assert dict(small.envs)["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"] == "20"


def test_pods_it_cannot_tell_apart_are_refused_never_guessed(served, kubelet, cluster):
    kubelet.registrations.get(timeout=10)
    bind(cluster, placed("big", 8192, 70))
    bind(cluster, placed("small", 2048, 20))
    results = allocate_at_once(kubelet, slots(1), slots(2)[1:])
    for result in results:
        assert isinstance(result, grpc.RpcError)
        assert result.code() == grpc.StatusCode.FAILED_PRECONDITION
        assert "Pods team/big, team/small all wait for 1 nvke.io/gpu-share" in result.details()
    assert served.plugin.answered == {}


def test_a_pod_the_kubelet_admitted_already_is_not_taken_again(served, kubelet, cluster):
    kubelet.registrations.get(timeout=10)
    bind(cluster, placed("running", 8192, 70))
    status = {"status": {"phase": "Pending", "containerStatuses": [_waiting("main")]}}
    cluster.patch_namespaced_pod_status("running", "team", status)
    bind(cluster, placed("next", 2048, 20))
    (answer,) = kubelet.allocate(slots(1)).container_responses
    assert dict(answer.envs)["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"] == "20"


def _waiting(name: str) -> dict:
    return {
        "name": name,
        "image": "vllm/vllm-openai:v0.11.0",
        "imageID": "",
        "ready": False,
        "restartCount": 0,
        "state": {"waiting": {"reason": "ContainerCreating"}},
    }


def test_unknown_slots_and_mps_daemon_down_are_refused(directory, kubelet, cluster, kube_client):
    plugin = DevicePlugin([GPU], node_pods(kube_client, NODE), SLOTS, lambda u: "/p", mps_up=lambda u: False)
    server = PluginServer(plugin, directory)
    server.step()
    try:
        kubelet.registrations.get(timeout=10)
        with pytest.raises(grpc.RpcError) as unknown:
            kubelet.allocate(["GPU-not-here::0"])
        assert unknown.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        bind(cluster, placed("big", 8192, 70))
        with pytest.raises(grpc.RpcError) as down:
            kubelet.allocate(slots(1))
        assert f"the MPS control daemon of {GPU} is not running" in down.value.details()
        with pytest.raises(grpc.RpcError) as prestart:
            from nvke.agent.kubelet import api_pb2

            kubelet.stub.PreStartContainer(api_pb2.PreStartContainerRequest(devices_ids=["x::1"]), timeout=5)
        assert prestart.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    finally:
        server.stop()


def test_the_plugin_registers_again_when_the_kubelet_restarts(served, kubelet, cluster):
    kubelet.registrations.get(timeout=10)
    kubelet.lists.get(timeout=10)
    kubelet.restart()  # removes every socket in the directory, the plugin's too
    assert not os.path.exists(served.socket)
    served.step()
    request, _ = kubelet.registrations.get(timeout=10)
    assert request.resource_name == "nvke.io/gpu-share" and served.registrations == 2
    assert len(kubelet.lists.get(timeout=10)) == 2 * SLOTS
    bind(cluster, placed("after", 2048, 20))
    assert dict(kubelet.allocate(slots(1)).container_responses[0].envs)["NVIDIA_VISIBLE_DEVICES"] == GPU


def test_without_a_kubelet_it_keeps_trying_to_register(directory, kube_client):
    server = PluginServer(DevicePlugin([GPU], lambda: [], SLOTS), directory)
    try:
        server.step()
        assert os.path.exists(server.socket) and not server.registered
    finally:
        server.stop()


def test_preferred_allocation_keeps_a_container_on_one_gpu():
    from nvke.agent.kubelet import api_pb2

    plugin = DevicePlugin([GPU, OTHER_GPU], lambda: [], SLOTS)
    ask = api_pb2.ContainerPreferredAllocationRequest(
        available_deviceIDs=[*slots(1), *slots(3, OTHER_GPU)], allocation_size=2
    )
    answer = plugin.GetPreferredAllocation(api_pb2.PreferredAllocationRequest(container_requests=[ask]), None)
    assert list(answer.container_responses[0].deviceIDs) == slots(2, OTHER_GPU)


def test_the_annotations_read_are_the_ones_nvke_writes():
    assert (allocation.UUIDS, allocation.MEMORY, allocation.CEILING, allocation.ISOLATION) == tuple(
        scheduler.ANNOTATIONS[k] for k in ("uuids", "memory", "ceiling", "isolation")
    )


def unbound(name: str, slots: int = 1) -> dict:
    return {
        "metadata": {"name": name, "namespace": "team", "uid": name},
        "spec": {
            "containers": [{"name": "main", "resources": {"limits": {allocation.RESOURCE: str(slots)}}}]
        },
    }


def test_the_scheduler_holds_back_only_a_pod_the_plugin_could_not_tell_apart():
    small, big = scheduler.annotations(placed("s", 2048, 20)), scheduler.annotations(placed("b", 8192, 70))
    waiting = [allocation.bound(unbound("first"), NODE, small)]
    assert allocation.ahead(unbound("same"), NODE, small, waiting) == ""  # interchangeable
    assert allocation.ahead(unbound("other"), NODE, big, waiting) == "team/first"
    assert allocation.ahead(unbound("two-slots", 2), NODE, big, waiting) == ""  # told apart by its slots
    assert allocation.ahead(unbound("elsewhere"), "another-node", big, waiting) == ""
    no_slot = unbound("no-slot")
    no_slot["spec"]["containers"][0]["resources"] = {}
    assert allocation.ahead(no_slot, NODE, big, waiting) == ""  # the plugin never answers for it
