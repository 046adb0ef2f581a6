"""The kubelet's device manager on one node, for device plugins (NVKE's, in nvke-agent), over the
device-plugin gRPC API with the stubs generated from NVKE's statement of it (nvke/agent/kubelet/).

Each behaviour follows kubernetes/kubernetes:
- pkg/kubelet/cm/devicemanager/plugin/v1beta1/server.go: Registration on `<dir>/kubelet.sock` refuses
  another API version and dials `<dir>/<endpoint>`; starting empties the directory;
- pkg/kubelet/cm/devicemanager/plugin/v1beta1/client.go: GetDevicePluginOptions, then ListAndWatch in a
  stream, each response replacing the resource's devices;
- pkg/kubelet/cm/devicemanager/manager.go: GetCapacity (capacity: every device; allocatable: the healthy
  ones), devicesToAllocate (healthy devices no active pod holds, GetPreferredAllocation where the plugin
  offers it; "requested number of devices unavailable for R. Requested: n, Available: m"),
  allocateContainerResources (one Allocate per container, init containers first, at admission, before
  any container starts) and PreStartContainer where the plugin requires it;
- pkg/kubelet/cm/admission/errors.go: a failed allocation fails admission, reason
  UnexpectedAdmissionError, "Allocate failed due to <error>, which is unexpected" (a plugin's gRPC error
  as Go prints a status: "rpc error: code = FailedPrecondition desc = ...").

A kubelet calls its plugins outside the API server; so does this one: the stand-in's kubelet asks
`outcome(pod)`, which queues the pod for a worker thread that calls the plugin with the store unlocked
(NVKE's plugin reads the node's pods from the API server meanwhile), then hands the outcome to
`done(pod, outcome)`. The stand-in's kubelet records a successful answer on the pod (annotation
ALLOCATED + container name: its envs, mounts and devices as JSON, standing for the container's
environment, which the API does not show) and starts it; a refusal fails the pod's admission."""

from __future__ import annotations

import os
import queue
import threading
from collections.abc import Callable
from concurrent import futures
from typing import Any

import grpc

from nvke.agent.kubelet import HEALTHY, KUBELET_SOCKET, VERSION, api_pb2, api_pb2_grpc

ALLOCATED = "kubeapi.test/allocated."  # + container name: what the device plugins answered for it


class Unallocatable(Exception):
    pass


def go_status(error: grpc.RpcError) -> str:
    code = error.code().name.title().replace("_", "") if error.code() else "Unknown"
    return f"rpc error: code = {code} desc = {error.details()}"


class DeviceManager(api_pb2_grpc.RegistrationServicer):
    def __init__(
        self,
        directory: str,
        done: Callable[[dict[str, Any], dict[str, Any] | str], None],
        wake: Callable[[], None],
    ) -> None:
        self.directory, self.done, self.wake = directory, done, wake
        self.lock = threading.Lock()
        self.plugins: dict[str, tuple[api_pb2_grpc.DevicePluginStub, Any]] = {}  # resource → (stub, options)
        self.devices: dict[str, dict[str, str]] = {}  # resource → {device ID: health}
        self.held: dict[str, dict[str, list[str]]] = {}  # pod UID → resource → device IDs
        self.outcomes: dict[str, dict[str, Any] | str] = {}  # pod UID → answers by container, or why not
        self.queued: set[str] = set()
        self.work: queue.Queue = queue.Queue()
        self.channels: list[grpc.Channel] = []
        self.server: grpc.Server | None = None

    # ---- lifecycle and registration ---------------------------------------------------------------------

    def start(self) -> DeviceManager:
        for name in os.listdir(self.directory):
            os.unlink(os.path.join(self.directory, name))
        self.server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
        api_pb2_grpc.add_RegistrationServicer_to_server(self, self.server)
        self.server.add_insecure_port(f"unix://{os.path.join(self.directory, KUBELET_SOCKET)}")
        self.server.start()
        threading.Thread(target=self._worker, daemon=True).start()
        return self

    def stop(self) -> None:
        self.work.put(None)
        for channel in self.channels:
            channel.close()
        if self.server is not None:
            self.server.stop(grace=None)

    def Register(self, request, context):  # noqa: N802 (the API's names)
        if request.version != VERSION:
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, f"unsupported API version {request.version}")
        channel = grpc.insecure_channel(f"unix://{os.path.join(self.directory, request.endpoint)}")
        self.channels.append(channel)
        stub = api_pb2_grpc.DevicePluginStub(channel)
        options = stub.GetDevicePluginOptions(api_pb2.Empty(), timeout=5)
        with self.lock:
            self.plugins[request.resource_name] = (stub, options)
        threading.Thread(target=self._watch, args=(request.resource_name, stub), daemon=True).start()
        return api_pb2.Empty()

    def _watch(self, resource: str, stub) -> None:
        try:
            for response in stub.ListAndWatch(api_pb2.Empty()):
                with self.lock:
                    self.devices[resource] = {d.ID: d.health for d in response.devices}
                self.wake()  # the node's capacity changed: the kubelet reports it
        except grpc.RpcError:
            pass  # the plugin or this kubelet went away

    def capacity(self) -> dict[str, tuple[int, int]]:
        """resource → (capacity, allocatable)."""
        with self.lock:
            return {
                r: (len(devices), sum(h == HEALTHY for h in devices.values()))
                for r, devices in self.devices.items()
            }

    # ---- admission -----------------------------------------------------------------------------------------

    def asks(self, pod: dict[str, Any]) -> dict[str, int]:
        """The registered resources the pod's containers ask for, summed (0 for none)."""
        with self.lock:
            registered = set(self.plugins)
        asked: dict[str, int] = {}
        for container in _containers(pod):
            for resource, count in _limits(container).items():
                if resource in registered:
                    asked[resource] = asked.get(resource, 0) + count
        return asked

    def outcome(self, pod: dict[str, Any]) -> dict[str, Any] | str | None:
        """The answers for the pod's containers, or why they were refused; None while being asked."""
        uid = pod["metadata"]["uid"]
        with self.lock:
            if uid in self.outcomes:
                return self.outcomes[uid]
            if uid not in self.queued:
                self.queued.add(uid)
                self.work.put(pod)
        return None

    def keep(self, active: set[str]) -> None:
        """Free the devices of pods no longer active on the node (the manager's UpdateAllocatedDevices)."""
        with self.lock:
            for uid in set(self.held) - active:
                del self.held[uid]

    def _worker(self) -> None:
        while (pod := self.work.get()) is not None:
            uid = pod["metadata"]["uid"]
            try:
                outcome: dict[str, Any] | str = self._allocate(pod)
            except (Unallocatable, grpc.RpcError) as error:
                with self.lock:
                    self.held.pop(uid, None)
                why = go_status(error) if isinstance(error, grpc.RpcError) else str(error)
                outcome = f"Allocate failed due to {why}, which is unexpected"
            with self.lock:
                self.outcomes[uid] = outcome
                self.queued.discard(uid)
            self.done(pod, outcome)

    def _allocate(self, pod: dict[str, Any]) -> dict[str, Any]:
        uid, answers = pod["metadata"]["uid"], {}
        for container in _containers(pod):
            for resource, count in _limits(container).items():
                with self.lock:
                    plugin = self.plugins.get(resource)
                if plugin is None:
                    continue
                stub, options = plugin
                ids = self._devices_to_allocate(uid, resource, count, stub, options)
                request = api_pb2.AllocateRequest(
                    container_requests=[api_pb2.ContainerAllocateRequest(devices_ids=ids)]
                )
                (response,) = stub.Allocate(request, timeout=10).container_responses
                if options.pre_start_required:
                    stub.PreStartContainer(api_pb2.PreStartContainerRequest(devices_ids=ids), timeout=10)
                answers[container["name"]] = {
                    "devices": ids,
                    "envs": dict(response.envs),
                    "mounts": [
                        {"hostPath": m.host_path, "containerPath": m.container_path} for m in response.mounts
                    ],
                }
        return answers

    def _devices_to_allocate(self, uid: str, resource: str, count: int, stub, options) -> list[str]:
        with self.lock:
            taken = {d for held in self.held.values() for d in held.get(resource, [])}
            free = sorted(
                d for d, h in self.devices.get(resource, {}).items() if h == HEALTHY and d not in taken
            )
            if len(free) < count:
                raise Unallocatable(
                    f"requested number of devices unavailable for {resource}. Requested: {count}, "
                    f"Available: {len(free)}"
                )
            chosen = free[:count]
            self.held.setdefault(uid, {}).setdefault(resource, []).extend(chosen)  # held while asking
        if options.get_preferred_allocation_available:
            ask = api_pb2.ContainerPreferredAllocationRequest(
                available_deviceIDs=free, must_include_deviceIDs=[], allocation_size=count
            )
            response = stub.GetPreferredAllocation(
                api_pb2.PreferredAllocationRequest(container_requests=[ask]), timeout=10
            )
            preferred = list(response.container_responses[0].deviceIDs)
            if len(preferred) == count and set(preferred) <= set(free):
                with self.lock:
                    held = self.held[uid][resource]
                    held[-count:] = preferred
                chosen = preferred
        return chosen


def _containers(pod: dict[str, Any]) -> list[dict[str, Any]]:
    spec = pod.get("spec") or {}
    return [*(spec.get("initContainers") or []), *(spec.get("containers") or [])]


def _limits(container: dict[str, Any]) -> dict[str, int]:
    """Device-plugin resources are whole numbers, with requests equal to limits (API validation)."""
    resources = container.get("resources") or {}
    asked = {**(resources.get("requests") or {}), **(resources.get("limits") or {})}
    found = {}
    for name, value in asked.items():
        try:
            found[name] = int(str(value))
        except ValueError:
            continue  # cpu "500m", memory "4Gi": not a device count
    return found
