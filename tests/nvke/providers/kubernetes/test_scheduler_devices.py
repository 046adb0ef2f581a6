"""The scheduler path end to end with NVKE's device plugin: the strict stand-in's kubelet runs a device
manager (tests/kubeapi/device_manager.py) that nvke-agent's plugin registers with over its unix socket;
at admission it calls the plugin's Allocate for each container asking `nvke.io/gpu-share`, and records
the answer on the pod (annotation kubeapi.test/allocated.<container>) as the container's environment.
One A10 shared as 8Gi+70% and three 2Gi+20% ends with four pods Running on the one GPU, each started
with its GPU and limits from the plugin; a pod NVKE did not place is refused by the plugin, and the
kubelet fails its admission as a device manager does. On an MPS pool whose daemon is down, the plugin's
refusal fails the pod (UnexpectedAdmissionError), NVKE releases its claim and does not bind its
replacement to that node again; once the daemon is up, a pod starts with its MPS limits, pipes and
shared memory."""

import json
import shutil
import tempfile

import kubernetes
import pytest

from claims.models import Claim
from claims.workloads import sync_workloads
from nodepools.models import Gpu
from nvke.agent import allocation, mps
from nvke.agent.device_plugin import DevicePlugin, PluginServer
from nvke.agent.node_side import node_pods
from nvke.providers.kubernetes import records
from tests.kubeapi import objects
from tests.kubeapi.device_manager import ALLOCATED
from tests.kubeapi.fixtures import client_configuration, wait_until

from .test_scheduler import gpu_pod
from .test_scheduler_fit import NODE, attached, pod, server  # noqa: F401 (fixtures)

pytestmark = pytest.mark.django_db
SLOTS = 16


@pytest.fixture
def plugin_on(server):  # noqa: F811
    """plugin_on(**options) -> the GPU's UUID: nvke-agent's device plugin on the A10 node (DevicePlugin's
    options), registered with that node's kubelet, whose node then advertises its slots."""
    started = []

    def start(**options) -> str:
        directory = tempfile.mkdtemp(prefix="dm-", dir="/tmp")  # a unix socket's path is short
        manager = server.actors.device_manager(NODE, directory)
        uuid = f"GPU-{Gpu.objects.get(node__name=NODE).uuid}"
        api = kubernetes.client.ApiClient(client_configuration(server))
        served = PluginServer(DevicePlugin([uuid], node_pods(api, NODE), SLOTS, **options), directory)
        started.append((served, manager, api, directory))
        served.step()
        node = lambda: server.get("v1", "Node", NODE)["status"]["allocatable"]  # noqa: E731
        assert wait_until(lambda: node().get(allocation.RESOURCE), timeout=20) == str(SLOTS)
        return uuid

    yield start
    for served, manager, api, directory in started:
        served.stop()
        manager.stop()
        api.close()
        shutil.rmtree(directory, ignore_errors=True)


@pytest.fixture
def plugin(attached, plugin_on):  # noqa: F811
    return plugin_on()


def share_pod(name: str, memory: str, percent: int) -> dict:
    shared = gpu_pod(name, memory, percent)
    shared["spec"]["containers"][0]["resources"]["limits"][allocation.RESOURCE] = "1"
    return shared


def started(server, name: str) -> bool:  # noqa: F811 (the fixture's name)
    phase = pod(server, name)["status"].get("phase")
    assert phase != "Failed", pod(server, name)["status"]
    return phase == "Running"


def test_four_pods_share_one_a10_each_started_with_its_share_from_the_plugin(server, attached, plugin):  # noqa: F811
    # the node advertises the plugin's slots (the device manager's capacity, from ListAndWatch): plugin_on
    server.create(share_pod("train", "8Gi", 70))
    for i in range(3):
        server.create(share_pod(f"infer-{i}", "2Gi", 20))

    names = ["train", "infer-0", "infer-1", "infer-2"]
    for _ in range(2):  # train and the infer pods in two passes: one Allocate could not tell them apart
        sync_workloads(attached.pk)
        bound = [n for n in names if pod(server, n)["spec"].get("nodeName")]
        for name in bound:
            wait_until(lambda name=name: started(server, name), timeout=20)
    assert len(bound) == 4

    slots = set()
    for name in names:
        answer = json.loads(pod(server, name)["metadata"]["annotations"][ALLOCATED + "main"])
        memory, percent = ("8192", "70") if name == "train" else ("2048", "20")
        assert answer["envs"] == {
            "NVIDIA_VISIBLE_DEVICES": plugin,
            "CUDA_DEVICE_MEMORY_LIMIT": f"{memory}m",
            "CUDA_DEVICE_SM_LIMIT": percent,
            "NVKE_GPU_MEMORY_LIMIT_MIB": memory,
            "NVKE_GPU_COMPUTE_PERCENT": percent,
        }
        assert answer["mounts"] == [] and [allocation.slot_gpu(d) for d in answer["devices"]] == [plugin]
        slots.update(answer["devices"])
        assert Claim.objects.get(name=name).workload["state"] == "allocated"
    assert len(slots) == 4  # each its own slot
    (gpu,) = json.loads(server.get("v1", "Node", NODE)["metadata"]["annotations"][records.SNAPSHOT])
    assert gpu["uuid"] == plugin and gpu["memoryMiB"] == 14336 and gpu["ceilings"] == "130%"
    assert sorted(gpu["pods"]) == sorted(f"ml/{n}" for n in names)


def test_a_pod_nvke_did_not_place_is_refused_by_the_plugin_at_admission(server, attached, plugin):  # noqa: F811
    stray = objects.pod("stray", namespace="ml", node=NODE)  # bound by hand, past NVKE
    stray["spec"]["containers"][0]["resources"] = {"limits": {allocation.RESOURCE: "1"}}
    server.create(stray)

    refused = wait_until(lambda: pod(server, "stray")["status"].get("reason"), timeout=20)

    status = pod(server, "stray")["status"]
    assert (refused, status["phase"]) == ("UnexpectedAdmissionError", "Failed")
    assert status["message"] == (
        "Pod was rejected: Allocate failed due to rpc error: code = FailedPrecondition desc = No pod bound "
        f"to this node by NVKE waits for 1 {allocation.RESOURCE}: was it scheduled with schedulerName: "
        "nvke?, which is unexpected"
    )


def test_an_mps_pod_refused_for_want_of_its_daemon_is_not_bound_there_again_and_one_later_gets_mps(
    server,  # noqa: F811
    attach,
    sharing_pool,
    plugin_on,
    django_capture_on_commit_callbacks,
):
    cluster = attach(server)
    sharing_pool(cluster, "mps")
    daemon = {"up": False}
    uuid = plugin_on(pipe_directory=lambda u: f"/run/nvke/mps/{u}/pipe", mps_up=lambda u: daemon["up"])
    owner = {
        "apiVersion": "apps/v1",
        "kind": "ReplicaSet",
        "name": "web",
        "uid": "rs-web",
        "controller": True,
    }
    web = share_pod("web-1", "6Gi", 40)
    web["metadata"]["ownerReferences"] = [owner]
    server.create(web)

    sync_workloads(cluster.pk)
    reason = wait_until(lambda: pod(server, "web-1")["status"].get("reason"), timeout=20)

    assert reason == "UnexpectedAdmissionError"  # the plugin refused: no MPS daemon on that GPU
    refusal = (
        "Allocate failed due to rpc error: code = FailedPrecondition desc = ml/web-1: the MPS control "
        f"daemon of {uuid} is not running., which is unexpected"
    )
    assert pod(server, "web-1")["status"]["message"] == f"Pod was rejected: {refusal}"
    with django_capture_on_commit_callbacks(execute=True):
        sync_workloads(cluster.pk)
    assert not Claim.objects.filter(name="web-1").exists()
    replacement = share_pod("web-2", "6Gi", 40)  # its ReplicaSet makes another
    replacement["metadata"]["ownerReferences"] = [owner]
    server.create(replacement)
    sync_workloads(cluster.pk)
    sync_workloads(cluster.pk)
    assert not pod(server, "web-2")["spec"].get("nodeName")  # not bound there again: no Failed loop
    assert (
        f"the kubelet there refused web-1 (UnexpectedAdmissionError: Pod was rejected: {refusal})"
        in (Claim.objects.get(name="web-2").workload["message"])
    )

    daemon["up"] = True  # the agent started it
    server.create(share_pod("serve", "2Gi", 20))
    sync_workloads(cluster.pk)
    wait_until(lambda: started(server, "serve"), timeout=20)
    answer = json.loads(pod(server, "serve")["metadata"]["annotations"][ALLOCATED + "main"])
    pipes = f"/run/nvke/mps/{uuid}/pipe"
    assert {k: v for k, v in answer["envs"].items() if k.startswith("CUDA_MPS_")} == {
        "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE": "20",
        "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT": "0=2048M",
        "CUDA_MPS_PIPE_DIRECTORY": pipes,
    }
    assert answer["mounts"] == [
        {"hostPath": pipes, "containerPath": pipes},
        {"hostPath": mps.SHM, "containerPath": "/dev/shm"},
    ]
