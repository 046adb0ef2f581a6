"""The one way sync code reaches websockets: after the transaction commits, to tenant groups.

Groups: `tenant-<id>` (fleet views) and `tenant-<id>.cluster-<id>` (a cluster's pages).

With a Redis channel layer, events go out from one long-lived event loop in a background thread, so
a service that broadcasts per claim does not pay for a new event loop and thread every time; the
in-memory layer (the embedded default, one process) is reached with async_to_sync, as its consumers
live on the server's own loop."""

import asyncio
import atexit
import concurrent.futures
import threading

from asgiref.sync import async_to_sync
from channels.layers import InMemoryChannelLayer, get_channel_layer
from django.db import transaction

FLUSH_AT_EXIT_S = 5.0

_loop: asyncio.AbstractEventLoop | None = None
_loop_lock = threading.Lock()
_in_flight: set[concurrent.futures.Future] = set()


def tenant_group(tenant_id: int) -> str:
    return f"tenant-{tenant_id}"


def cluster_group(tenant_id: int, cluster_id: int) -> str:
    return f"tenant-{tenant_id}.cluster-{cluster_id}"


async def _send(layer, groups: list[str], event: dict) -> None:
    for group in groups:
        await layer.group_send(group, {"type": "nvke.event", "event": event})


def _background_loop() -> asyncio.AbstractEventLoop:
    global _loop
    with _loop_lock:
        if _loop is None:
            _loop = asyncio.new_event_loop()
            threading.Thread(target=_loop.run_forever, name="nvke-broadcast", daemon=True).start()
            atexit.register(flush)
    return _loop


def flush(timeout_s: float = FLUSH_AT_EXIT_S) -> None:
    """Wait for events still on their way (at process exit, and in tests)."""
    concurrent.futures.wait(list(_in_flight), timeout=timeout_s)


def broadcast(tenant_id: int, event: dict, cluster_id: int | None = None) -> None:
    """Send `event` to the tenant's group (and the cluster's) once the current transaction commits."""
    groups = [tenant_group(tenant_id)]
    if cluster_id is not None:
        groups.append(cluster_group(tenant_id, cluster_id))

    def send() -> None:
        layer = get_channel_layer()
        if isinstance(layer, InMemoryChannelLayer):
            async_to_sync(_send)(layer, groups, event)
            return
        future = asyncio.run_coroutine_threadsafe(_send(layer, groups, event), _background_loop())
        _in_flight.add(future)
        future.add_done_callback(_in_flight.discard)

    transaction.on_commit(send)
