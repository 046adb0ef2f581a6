"""List-watch of one resource on one cluster, as client-go's reflector does it: list, then watch from the
list's resourceVersion with bookmarks (which move the resourceVersion on without an event); a 410 Gone
(the server forgot that resourceVersion) lists again; a broken stream or a failed call waits a jittered,
growing backoff and carries on from the last resourceVersion; every `resync_s` a full list refreshes
the view even if no event was lost. Every list-watch of the process runs as a task of one event loop
(streams.py): a cluster watched costs connections, never threads. The caller gets the listed objects and
each event on that loop's thread, so its callbacks must not block (hand slow work to a thread)."""

import asyncio
import contextlib
import functools
import logging
import math
import random
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from nvke.providers.base import ProviderError

from . import gpus, streams
from .dra import MANAGED
from .operations import DRIVER_COMPONENT, DRIVER_GROUP, DRIVER_VERSION, DRIVERS, VALIDATOR_APP

log = logging.getLogger(__name__)


@dataclass
class Backoff:
    """Seconds to wait after the n-th failure in a row: doubling from `first` up to `most`, each drawn
    from its upper half, so clusters that failed together do not come back together."""

    first: float = 0.5
    most: float = 30.0
    failures: int = 0

    def next(self) -> float:
        self.failures += 1
        ceiling = min(self.most, self.first * 2 ** (self.failures - 1))
        return random.uniform(ceiling / 2, ceiling)

    def reset(self) -> None:
        self.failures = 0


class ListWatch:
    def __init__(
        self,
        list_fn: Callable,
        *,
        on_list: Callable[[list[dict]], None],
        on_event: Callable[[str, dict], None],
        on_error: Callable[[ProviderError], None],
        stop: threading.Event,
        resync_s: float = 300.0,
        watch_timeout_s: int = 60,
        **selectors: str,
    ):
        self.list_fn, self.selectors = list_fn, selectors
        self.on_list, self.on_event, self.on_error = on_list, on_event, on_error
        self.stop, self.resync_s, self.watch_timeout_s = stop, resync_s, watch_timeout_s
        self.backoff = Backoff()
        self.resource_version: str | None = None
        self.listed_at = 0.0

    def run(self) -> None:
        """Serve on the shared loop until `stop` is set (for a caller that gives it a thread)."""
        hub = streams.hub()
        tasks = hub.spawn([self.serve()])
        self.stop.wait()
        hub.cancel(tasks)

    async def serve(self) -> None:
        while not self.stop.is_set():
            try:
                if self.resource_version is None or time.monotonic() - self.listed_at > self.resync_s:
                    await self.list()
                await self._watch()
                self.backoff.reset()
            except ProviderError as error:
                if error.status == 410:  # expired: what we have is too old to watch from
                    self.resource_version = None
                    continue
                self.on_error(error)
                await asyncio.sleep(self.backoff.next())
            except Exception:  # a bug must not end the watch: log it and carry on after the backoff
                log.exception("list-watch of %s failed", getattr(self.list_fn, "__name__", self.list_fn))
                self.on_error(ProviderError("WatchFailed", "The watch failed unexpectedly; retrying."))
                await asyncio.sleep(self.backoff.next())

    async def list(self) -> None:
        body = await streams.get_json(self.list_fn, **self.selectors)
        self.resource_version = body["metadata"]["resourceVersion"]
        self.listed_at = time.monotonic()
        self.on_list(body.get("items") or [])

    async def _watch(self) -> None:
        # Each event's object is the API's JSON, as the mapping code reads it: no client model is built
        # (37.x has none named for a ResourceClaim list's items: ResourceV1ResourceClaim). The server
        # ends the watch when the next resync is due: a stream closed early by us would go on being sent
        # on the shared HTTP/2 connection until its timeout (httpcore resets no stream it gives up).
        left_s = math.ceil(self.listed_at + self.resync_s - time.monotonic())
        timeout_s = max(1, min(self.watch_timeout_s, left_s))
        events = streams.watch_events(
            self.list_fn,
            timeout_s + 10,
            resource_version=self.resource_version,
            allow_watch_bookmarks=True,
            timeout_seconds=timeout_s,
            **self.selectors,
        )
        async with contextlib.aclosing(events):  # a return below closes the stream at once
            async for event in events:
                obj = event["object"]
                self.resource_version = obj["metadata"]["resourceVersion"]
                if event["type"] != "BOOKMARK":
                    self.on_event(event["type"], obj)
                if self.stop.is_set() or time.monotonic() - self.listed_at > self.resync_s:
                    return


class ClusterWatch:
    """The watches kube_sync keeps on one attached cluster: its GPU Nodes (GFD's product label) and, where
    DRA is served, NVIDIA's ResourceSlices, which call `changed()` after every list and event; pods, which
    call `workloads_changed()` after every list and event and, for the GPU Operator's driver and
    validator pods, `drivers_changed()` (an upgrade step may be done); NVIDIADrivers, which call
    `drivers_changed()` after every event; ResourceClaims and managed namespaces, which call
    `workloads_changed()`. Six streams at most, on the process's shared loop: no thread of its own.
    It keeps the GPU nodes it has seen (`nodes`) and calls `failed(error)` after every failed call.
    Every callback runs on the loop's thread and must not block; `close()` stops the streams."""

    def __init__(
        self,
        ops,
        *,
        changed: Callable[[], None],
        failed: Callable[[ProviderError], None],
        dra: bool,
        drivers_changed: Callable[[], None] = lambda: None,
        workloads_changed: Callable[[], None] = lambda: None,
        resync_s: float = 300.0,
        watch_timeout_s: int = 60,
    ):
        self.stop = threading.Event()
        self.changed, self.drivers_changed, self.workloads_changed = (
            changed,
            drivers_changed,
            workloads_changed,
        )
        self._lock, self._nodes = threading.Lock(), {}
        self.tasks: list[asyncio.Task] = []
        self.api_client = ops.core.api_client
        common = dict(on_error=failed, stop=self.stop, resync_s=resync_s, watch_timeout_s=watch_timeout_s)
        self.watches = [
            ListWatch(
                ops.core.list_node,
                on_list=self._listed_nodes,
                on_event=self._node_event,
                label_selector=gpus.PRODUCT,
                **common,
            ),
            ListWatch(
                ops.core.list_pod_for_all_namespaces,
                on_list=lambda items: workloads_changed(),
                on_event=self._pod_event,
                **common,
            ),
        ]
        if dra:
            self.watches.append(
                ListWatch(
                    ops.resource.list_resource_slice,
                    on_list=lambda items: changed(),
                    on_event=lambda kind, obj: changed(),
                    field_selector=f"spec.driver={gpus.DRA_DRIVER}",
                    **common,
                )
            )
        workload_events = dict(
            on_list=lambda items: workloads_changed(),
            on_event=lambda kind, obj: workloads_changed(),
            **common,
        )
        if dra:
            self.watches.append(
                ListWatch(ops.resource.list_resource_claim_for_all_namespaces, **workload_events)
            )
        # A namespace labelled managed (or relabelled): the requests already waiting in it are NVKE's now.
        self.watches.append(
            ListWatch(ops.core.list_namespace, label_selector=f"{MANAGED}=true", **workload_events)
        )
        # Lists only set the resourceVersion: a step done before the watch began is seen by the next tick.
        drivers = functools.partial(
            ops.custom.list_cluster_custom_object, DRIVER_GROUP, DRIVER_VERSION, DRIVERS
        )
        self.watches.append(
            ListWatch(
                drivers, on_list=lambda items: None, on_event=lambda kind, obj: drivers_changed(), **common
            )
        )

    @property
    def nodes(self) -> dict[str, dict]:
        with self._lock:
            return dict(self._nodes)

    def _listed_nodes(self, items: list[dict]) -> None:
        with self._lock:
            self._nodes = {node["metadata"]["name"]: node for node in items}
        self.changed()

    def _node_event(self, kind: str, node: dict) -> None:
        with self._lock:
            if kind == "DELETED":
                self._nodes.pop(node["metadata"]["name"], None)
            else:
                self._nodes[node["metadata"]["name"]] = node
        self.changed()

    def _pod_event(self, kind: str, pod: dict) -> None:
        labels = pod["metadata"].get("labels") or {}
        if labels.get(DRIVER_COMPONENT[0]) == DRIVER_COMPONENT[1] or labels.get("app") == VALIDATOR_APP:
            self.drivers_changed()
        self.workloads_changed()

    def start(self) -> "ClusterWatch":
        self.tasks = streams.hub().spawn([watch.serve() for watch in self.watches])
        return self

    def close(self, timeout: float | None = None) -> None:
        self.stop.set()
        streams.hub().cancel(self.tasks, timeout)
        streams.hub().release(self.api_client, timeout)
