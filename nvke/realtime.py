"""The one way sync code reaches websockets: after the transaction commits, to tenant groups.

Groups: `tenant-<id>` (fleet views), `tenant-<id>.cluster-<id>` (a cluster's pages) and `operators`
(platform operators' pages of fleet rollouts, which span every tenant); streams also join
`tenant-<id>.member-<user id>` and, when opened with an API token, `token-<id>`, which close them.

With a Redis channel layer, events go out from one long-lived event loop in a background thread, so
a service that broadcasts per claim does not pay for a new event loop and thread every time. Events
that are waiting there together (a placement pass commits hundreds at once) go to each group as one
channel-layer message; consumers unpack it into one websocket frame per event. The in-memory layer
(the embedded default, one process) is reached with async_to_sync, as its consumers live on the
server's own loop."""

import asyncio
import atexit
import concurrent.futures
import logging
import threading
from collections import defaultdict

from asgiref.sync import async_to_sync
from channels.layers import InMemoryChannelLayer, get_channel_layer
from django.db import transaction

FLUSH_AT_EXIT_S = 5.0
MESSAGE_TYPE = "nvke.events"  # handled by a consumer's `nvke_events`
# How long the sender waits for more events to join the first: a process placing claims one by one
# sends a few per message instead of one (each send costs Redis commands per group); invisible to people.
LINGER_S = 0.02

log = logging.getLogger(__name__)

_loop: asyncio.AbstractEventLoop | None = None
_outbox: asyncio.Queue | None = None
_loop_lock = threading.Lock()
_in_flight: set[concurrent.futures.Future] = set()


def tenant_group(tenant_id: int) -> str:
    return f"tenant-{tenant_id}"


def cluster_group(tenant_id: int, cluster_id: int) -> str:
    return f"tenant-{tenant_id}.cluster-{cluster_id}"


OPERATORS_GROUP = "operators"


def member_group(tenant_id: int, user_id: int) -> str:
    """Every stream a user has open on a tenant's data: closed when the membership ends."""
    return f"tenant-{tenant_id}.member-{user_id}"


def user_group(user_id: int) -> str:
    """Every stream a user has open: closed when the account is deactivated or deleted."""
    return f"user-{user_id}"


def staff_group(user_id: int) -> str:
    """A staff user's operators' streams: closed when the user is no longer staff."""
    return f"staff-{user_id}"


def token_group(token_id: int) -> str:
    """Every stream opened with one API token: closed when the token is revoked or deleted."""
    return f"token-{token_id}"


def close_streams(group: str) -> None:
    """Once the transaction commits, close the group's open streams (code 4403)."""

    def send() -> None:
        layer = get_channel_layer()
        async_to_sync(layer.group_send)(group, {"type": "nvke.access_revoked"})

    transaction.on_commit(send)


async def _send(layer, by_group: dict[str, list[dict]]) -> None:
    for group, events in by_group.items():
        await layer.group_send(group, {"type": MESSAGE_TYPE, "events": events})


async def _sender(outbox: asyncio.Queue) -> None:
    """Take whatever has queued up, send it as one message per group, repeat."""
    while True:
        batch = [await outbox.get()]
        await asyncio.sleep(LINGER_S)
        while not outbox.empty():
            batch.append(outbox.get_nowait())
        by_group: dict[str, list[dict]] = defaultdict(list)
        for groups, event, _ in batch:
            for group in groups:
                by_group[group].append(event)
        try:
            await _send(get_channel_layer(), by_group)
        except Exception:  # a broken channel layer must not stop later events
            log.exception("Could not send %d events", len(batch))
        for _, _, done in batch:
            done.set_result(None)


def _background_loop() -> tuple[asyncio.AbstractEventLoop, asyncio.Queue]:
    global _loop, _outbox
    with _loop_lock:
        if _loop is None:
            _loop = asyncio.new_event_loop()
            _outbox = asyncio.Queue()
            _loop.create_task(_sender(_outbox))
            threading.Thread(target=_loop.run_forever, name="nvke-broadcast", daemon=True).start()
            atexit.register(flush)
    return _loop, _outbox


def flush(timeout_s: float = FLUSH_AT_EXIT_S) -> None:
    """Wait for events still on their way (at process exit, and in tests)."""
    concurrent.futures.wait(list(_in_flight), timeout=timeout_s)


def broadcast(tenant_id: int, event: dict, cluster_id: int | None = None) -> None:
    """Send `event` to the tenant's group (and the cluster's) once the current transaction commits."""
    groups = [tenant_group(tenant_id)]
    if cluster_id is not None:
        groups.append(cluster_group(tenant_id, cluster_id))
    _broadcast(groups, event)


def broadcast_operators(event: dict) -> None:
    """Send `event` to platform operators' streams once the current transaction commits."""
    _broadcast([OPERATORS_GROUP], event)


def _broadcast(groups: list[str], event: dict) -> None:
    def send() -> None:
        layer = get_channel_layer()
        if isinstance(layer, InMemoryChannelLayer):
            async_to_sync(_send)(layer, {group: [event] for group in groups})
            return
        loop, outbox = _background_loop()
        done: concurrent.futures.Future = concurrent.futures.Future()
        _in_flight.add(done)
        done.add_done_callback(_in_flight.discard)
        loop.call_soon_threadsafe(outbox.put_nowait, (groups, event, done))

    transaction.on_commit(send)
