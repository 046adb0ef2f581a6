"""NVKE's device plugin: nvke-agent speaks the kubelet's device-plugin API (gRPC over unix sockets,
nvke/agent/kubelet/api.proto) so the GPU share NVKE's scheduler chose reaches the container.

It advertises each GPU as `slots` share slots of `nvke.io/gpu-share` (`<GPU UUID>::<n>`), healthy while
NVML reads the GPU; in Allocate it answers for the pod NVKE bound here (allocation.py says how the pod
is found) with NVIDIA_VISIBLE_DEVICES, the memory and compute limits, and on MPS pools the GPU's MPS
pipes; PreStartContainer refuses slots it never advertised and a GPU whose MPS daemon is down. The
kubelet removes every socket in its directory when it restarts: `PluginServer.step` sees its socket
gone, serves again and registers again."""

import logging
import os
import threading
from collections.abc import Callable
from concurrent import futures

import grpc

from . import allocation
from .kubelet import DEVICE_PLUGIN_PATH, HEALTHY, KUBELET_SOCKET, UNHEALTHY, VERSION, api_pb2, api_pb2_grpc

log = logging.getLogger("nvke-agent")
ENDPOINT = "nvke-gpu-share.sock"
SLOTS_PER_GPU = 16
WATCH_POLL_S = 1.0  # how often a ListAndWatch stream checks that its kubelet is still there


class DevicePlugin(api_pb2_grpc.DevicePluginServicer):
    """The DevicePlugin service. `pods()`: the pods bound to this node (dicts, as the API returns them);
    `pipe_directory(uuid)` and `mps_up(uuid)`: the MPS supervisor's, on MPS pools."""

    def __init__(
        self,
        uuids: list[str],
        pods: Callable[[], list[dict]],
        slots: int = SLOTS_PER_GPU,
        pipe_directory: Callable[[str], str] = lambda uuid: "",
        mps_up: Callable[[str], bool] = lambda uuid: False,
    ) -> None:
        self.uuids, self.pods, self.slots = list(uuids), pods, slots
        self.pipe_directory, self.mps_up = pipe_directory, mps_up
        self.healthy = dict.fromkeys(self.uuids, True)
        self.answered: dict[str, allocation.Grant] = {}  # pod UID → what its container got
        self.lock = threading.Lock()  # one Allocate resolves and records at a time
        self.changed = threading.Condition()
        self.generation = 0

    def devices(self) -> list:
        return [
            api_pb2.Device(
                ID=allocation.slot_id(uuid, n), health=HEALTHY if self.healthy[uuid] else UNHEALTHY
            )
            for uuid in self.uuids
            for n in range(self.slots)
        ]

    def set_health(self, health: dict[str, bool]) -> bool:
        """Record each GPU's health; wakes the ListAndWatch streams when one changed."""
        with self.changed:
            if all(self.healthy[u] == health.get(u, self.healthy[u]) for u in self.uuids):
                return False
            self.healthy.update({u: h for u, h in health.items() if u in self.healthy})
            self.generation += 1
            self.changed.notify_all()
        log.info("device plugin: GPU health now %s", self.healthy)
        return True

    def GetDevicePluginOptions(self, request, context):  # noqa: N802 (the API's names)
        return api_pb2.DevicePluginOptions(pre_start_required=True, get_preferred_allocation_available=True)

    def ListAndWatch(self, request, context):  # noqa: N802
        seen = -1
        while context.is_active():
            with self.changed:
                if seen == self.generation:
                    self.changed.wait(WATCH_POLL_S)
                if seen == self.generation:
                    continue
                seen, devices = self.generation, self.devices()
            yield api_pb2.ListAndWatchResponse(devices=devices)

    def GetPreferredAllocation(self, request, context):  # noqa: N802
        """Slots of as few GPUs as can be: the ones it must include first, then the GPU with the most free
        slots (which GPU a slot names does not change what the pod gets; it keeps slots easy to read)."""
        responses = []
        for ask in request.container_requests:
            chosen = list(ask.must_include_deviceIDs)
            free: dict[str, list[str]] = {}
            for device in ask.available_deviceIDs:
                if device not in chosen:
                    free.setdefault(allocation.slot_gpu(device), []).append(device)
            for _, slots in sorted(free.items(), key=lambda item: (-len(item[1]), item[0])):
                chosen += slots[: max(0, ask.allocation_size - len(chosen))]
            responses.append(api_pb2.ContainerPreferredAllocationResponse(deviceIDs=chosen))
        return api_pb2.PreferredAllocationResponse(container_responses=responses)

    def Allocate(self, request, context):  # noqa: N802
        responses = []
        for ask in request.container_requests:
            if unknown := self._unknown(ask.devices_ids):
                context.abort(grpc.StatusCode.INVALID_ARGUMENT, f"Not this plugin's slots: {unknown}.")
            try:
                granted = self.allocate(len(ask.devices_ids))
            except (allocation.NoPod, allocation.Ambiguous, ValueError) as error:
                context.abort(grpc.StatusCode.FAILED_PRECONDITION, str(error))
            responses.append(
                api_pb2.ContainerAllocateResponse(
                    envs=dict(granted.envs),
                    mounts=[api_pb2.Mount(host_path=h, container_path=c) for h, c in granted.mounts],
                )
            )
        return api_pb2.AllocateResponse(container_responses=responses)

    def allocate(self, count: int) -> allocation.Grant:
        """Resolve and record the pod a container asking `count` slots belongs to (one at a time)."""
        with self.lock:
            pods = self.pods()
            present = {p["metadata"].get("uid") for p in pods}
            self.answered = {uid: g for uid, g in self.answered.items() if uid in present}
            granted = allocation.resolve(pods, count, set(self.answered), self.pipe_directory)
            gpus = dict(granted.envs)["NVIDIA_VISIBLE_DEVICES"].split(",")
            if missing := [g for g in gpus if g not in self.healthy]:
                raise ValueError(f"{granted.pod} was placed on GPUs this node does not have: {missing}.")
            if "CUDA_MPS_PIPE_DIRECTORY" in dict(granted.envs) and not all(map(self.mps_up, gpus)):
                raise ValueError(f"{granted.pod}: the MPS control daemon of {gpus[0]} is not running.")
            self.answered[granted.uid] = granted
        log.info("device plugin: %s gets %s", granted.pod, dict(granted.envs))
        return granted

    def PreStartContainer(self, request, context):  # noqa: N802
        if unknown := self._unknown(request.devices_ids):
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, f"Not this plugin's slots: {unknown}.")
        return api_pb2.PreStartContainerResponse()

    def _unknown(self, device_ids) -> list[str]:
        return [d for d in device_ids if allocation.slot_gpu(d) not in self.healthy]


class PluginServer:
    """Serves a DevicePlugin on `<directory>/<endpoint>` and registers it with the kubelet there."""

    def __init__(self, plugin: DevicePlugin, directory: str = DEVICE_PLUGIN_PATH, endpoint: str = ENDPOINT):
        self.plugin, self.directory, self.endpoint = plugin, directory, endpoint
        self.socket = os.path.join(directory, endpoint)
        self.server: grpc.Server | None = None
        self.registered = False
        self.registrations = 0

    def serve(self) -> None:
        self.stop()
        if os.path.exists(self.socket):
            os.unlink(self.socket)
        self.server = grpc.server(futures.ThreadPoolExecutor(max_workers=8))
        api_pb2_grpc.add_DevicePluginServicer_to_server(self.plugin, self.server)
        self.server.add_insecure_port(f"unix://{self.socket}")
        self.server.start()

    def register(self) -> None:
        with grpc.insecure_channel(f"unix://{os.path.join(self.directory, KUBELET_SOCKET)}") as channel:
            api_pb2_grpc.RegistrationStub(channel).Register(
                api_pb2.RegisterRequest(
                    version=VERSION,
                    endpoint=self.endpoint,
                    resource_name=allocation.RESOURCE,
                    options=self.plugin.GetDevicePluginOptions(None, None),
                ),
                timeout=5,
            )
        self.registered = True
        self.registrations += 1
        log.info("device plugin registered with the kubelet as %s", allocation.RESOURCE)

    def step(self) -> None:
        """Serve again where the kubelet removed the socket; register until the kubelet takes it."""
        if self.server is None or not os.path.exists(self.socket):
            if self.server is not None:
                log.warning("device plugin socket removed (the kubelet restarted): serving again")
            self.registered = False
            self.serve()
        if not self.registered:
            try:
                self.register()
            except grpc.RpcError as error:
                log.warning("device plugin not registered yet: %s", error.details() or error.code())

    def stop(self) -> None:
        if self.server is not None:
            self.server.stop(grace=None)
            self.server = None
        self.registered = False
