"""The stand-in kubelet's device manager (device_manager.py) against a device plugin of the test's own:
registration, the node's capacity and allocatable from ListAndWatch, Allocate at admission with the
answer on the pod, and admission refused when too few healthy devices are free."""

import json
import os
import queue
import shutil
import tempfile
from concurrent import futures

import grpc
import pytest

from nvke.agent.kubelet import HEALTHY, KUBELET_SOCKET, UNHEALTHY, VERSION, api_pb2, api_pb2_grpc
from tests.kubeapi import objects
from tests.kubeapi.device_manager import ALLOCATED
from tests.kubeapi.fixtures import wait_until

RESOURCE = "example.com/dev"


class EchoPlugin(api_pb2_grpc.DevicePluginServicer):
    """Two devices; Allocate answers with the IDs it was given."""

    def __init__(self) -> None:
        self.health = {"dev-0": HEALTHY, "dev-1": HEALTHY}
        self.updates: queue.Queue = queue.Queue()

    def GetDevicePluginOptions(self, request, context):  # noqa: N802
        return api_pb2.DevicePluginOptions()

    def ListAndWatch(self, request, context):  # noqa: N802
        while context.is_active():
            yield api_pb2.ListAndWatchResponse(
                devices=[api_pb2.Device(ID=d, health=h) for d, h in sorted(self.health.items())]
            )
            while context.is_active():
                try:
                    self.updates.get(timeout=0.2)
                    break
                except queue.Empty:
                    continue

    def Allocate(self, request, context):  # noqa: N802
        return api_pb2.AllocateResponse(
            container_responses=[
                api_pb2.ContainerAllocateResponse(envs={"DEVICES": ",".join(ask.devices_ids)})
                for ask in request.container_requests
            ]
        )


@pytest.fixture
def plugin(kubeapi):
    directory = tempfile.mkdtemp(prefix="dm-", dir="/tmp")
    manager = kubeapi.actors.device_manager("cpu-1", directory)
    echo = EchoPlugin()
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
    api_pb2_grpc.add_DevicePluginServicer_to_server(echo, server)
    server.add_insecure_port(f"unix://{os.path.join(directory, 'echo.sock')}")
    server.start()
    with grpc.insecure_channel(f"unix://{os.path.join(directory, KUBELET_SOCKET)}") as channel:
        request = api_pb2.RegisterRequest(version=VERSION, endpoint="echo.sock", resource_name=RESOURCE)
        api_pb2_grpc.RegistrationStub(channel).Register(request, timeout=5)
    yield echo
    server.stop(grace=None)
    manager.stop()
    shutil.rmtree(directory, ignore_errors=True)


def node_has(kubeapi, capacity: str, allocatable: str) -> bool:
    status = kubeapi.get("v1", "Node", "cpu-1")["status"]
    return (status["capacity"].get(RESOURCE), status["allocatable"].get(RESOURCE)) == (capacity, allocatable)


def asking(name: str, count: int) -> dict:
    pod = objects.pod(name, node="cpu-1")
    pod["spec"]["containers"][0]["resources"] = {"limits": {RESOURCE: str(count)}}
    return pod


def test_the_device_manager_allocates_at_admission_and_refuses_what_is_not_free(kubeapi, plugin):
    kubeapi.create(objects.cpu_node("cpu-1"))
    kubeapi.settle()
    wait_until(lambda: node_has(kubeapi, "2", "2"), timeout=10)

    kubeapi.create(asking("one", 1))
    wait_until(lambda: kubeapi.get("v1", "Pod", "one")["status"]["phase"] == "Running", timeout=10)
    answer = json.loads(kubeapi.get("v1", "Pod", "one")["metadata"]["annotations"][ALLOCATED + "main"])
    assert answer == {"devices": ["dev-0"], "envs": {"DEVICES": "dev-0"}, "mounts": []}

    kubeapi.create(asking("two", 2))  # one device is held by "one"
    wait_until(lambda: kubeapi.get("v1", "Pod", "two")["status"].get("reason"), timeout=10)
    status = kubeapi.get("v1", "Pod", "two")["status"]
    assert (status["phase"], status["reason"]) == ("Failed", "UnexpectedAdmissionError")
    assert status["message"] == (
        f"Pod was rejected: Allocate failed due to requested number of devices unavailable for {RESOURCE}. "
        "Requested: 2, Available: 1, which is unexpected"
    )

    plugin.health["dev-1"] = UNHEALTHY
    plugin.updates.put(True)
    wait_until(lambda: node_has(kubeapi, "2", "1"), timeout=10)  # allocatable: the healthy ones
