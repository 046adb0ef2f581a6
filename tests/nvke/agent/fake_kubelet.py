"""A kubelet's device manager, as far as a device plugin meets it: the Registration service on
`<dir>/kubelet.sock` and a client of each registered plugin, over the stubs generated from NVKE's
api.proto (nvke/agent/kubelet/). What it does on Register, and on a restart, follows
kubernetes/kubernetes pkg/kubelet/cm/devicemanager/plugin/v1beta1/server.go (Register checks the version
and dials `<dir>/<endpoint>`), .../plugin/v1beta1/client.go (GetDevicePluginOptions, then ListAndWatch
in a stream) and pkg/kubelet/cm/devicemanager/manager.go (Start's removeContents empties the directory
but for the kubelet's checkpoint, so plugins notice their socket gone and register again; the same
cleanup sits in plugin/v1beta1/server.go in later releases)."""

import os
import queue
import threading
from concurrent import futures

import grpc

from nvke.agent.kubelet import KUBELET_SOCKET, VERSION, api_pb2, api_pb2_grpc


class FakeKubelet(api_pb2_grpc.RegistrationServicer):
    def __init__(self, directory: str) -> None:
        self.directory = directory
        self.registrations: queue.Queue = queue.Queue()
        self.lists: queue.Queue = queue.Queue()  # each ListAndWatch response, as {device ID: health}
        self.server: grpc.Server | None = None
        self.channel: grpc.Channel | None = None
        self.stub: api_pb2_grpc.DevicePluginStub | None = None

    def start(self) -> None:
        for name in os.listdir(self.directory):  # manager.go Start: removeContents
            os.unlink(os.path.join(self.directory, name))
        self.server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
        api_pb2_grpc.add_RegistrationServicer_to_server(self, self.server)
        self.server.add_insecure_port(f"unix://{os.path.join(self.directory, KUBELET_SOCKET)}")
        self.server.start()

    def stop(self) -> None:
        if self.channel is not None:
            self.channel.close()
        if self.server is not None:
            self.server.stop(grace=None)

    def restart(self) -> None:
        self.stop()
        self.start()

    def Register(self, request, context):  # noqa: N802
        if request.version != VERSION:
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, f"unsupported API version {request.version}")
        self.channel = grpc.insecure_channel(f"unix://{os.path.join(self.directory, request.endpoint)}")
        self.stub = api_pb2_grpc.DevicePluginStub(self.channel)
        options = self.stub.GetDevicePluginOptions(api_pb2.Empty(), timeout=5)
        threading.Thread(target=self._watch, args=(self.stub,), daemon=True).start()
        self.registrations.put((request, options))
        return api_pb2.Empty()

    def _watch(self, stub) -> None:
        try:
            for response in stub.ListAndWatch(api_pb2.Empty()):
                self.lists.put({d.ID: d.health for d in response.devices})
        except grpc.RpcError:
            pass  # the plugin or this kubelet went away

    def allocate(self, *containers: list[str]) -> api_pb2.AllocateResponse:
        request = api_pb2.AllocateRequest(
            container_requests=[api_pb2.ContainerAllocateRequest(devices_ids=ids) for ids in containers]
        )
        return self.stub.Allocate(request, timeout=10)
