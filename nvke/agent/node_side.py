"""What nvke-agent keeps up on its node besides telemetry: NVKE's device plugin (registered with the
kubelet, GPU health from NVML) and, on MPS pools, the MPS control daemons. Their state joins the
node's sharing preflight facts (`device_plugin`, `mps_daemon`), which the agent reports when it changes."""

import json
import time
from collections.abc import Callable

from .device_plugin import PluginServer
from .mps import MpsSupervisor

CHECK_EVERY_S = 5.0  # the MPS probe is a process per GPU: not every telemetry tick


class NodeSide:
    def __init__(
        self,
        server: PluginServer | None,
        mps: MpsSupervisor | None,
        health: Callable[[], dict[str, bool]],
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.server, self.mps, self.health, self.clock = server, mps, health, clock
        self.next_check = 0.0
        self.facts: dict[str, bool] = {}

    def step(self) -> dict[str, bool]:
        """Keep the plugin served and registered and the daemons running; returns their facts."""
        if self.clock() < self.next_check:
            return self.facts
        self.next_check = self.clock() + CHECK_EVERY_S
        if self.mps is not None:
            self.facts["mps_daemon"] = self.mps.check()
        if self.server is not None:
            self.server.plugin.set_health(self.health())
            self.server.step()
            self.facts["device_plugin"] = self.server.registered
        return dict(self.facts)

    def close(self) -> None:
        if self.server is not None:
            self.server.stop()
        if self.mps is not None:
            self.mps.stop()


def node_pods(api_client, node: str) -> Callable[[], list[dict]]:
    """The pods bound to `node`, read from the API server at each call (the official client, the
    agent's service account: list pods)."""
    from kubernetes import client

    core = client.CoreV1Api(api_client)

    def pods() -> list[dict]:
        response = core.list_pod_for_all_namespaces(
            field_selector=f"spec.nodeName={node}", _preload_content=False, _request_timeout=5
        )
        return json.loads(response.data)["items"]

    return pods
