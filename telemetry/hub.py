"""Live telemetry streams, coalesced: one task per server process wakes every frame interval, reads
what was written since its last tick from the `tm:fresh` Redis stream (one entry per ingested batch
or simulator slice, so a tick decodes a few dozen entries, not one value per GPU), and sends each
view one frame with the newest sample of each of its GPUs that changed, however many samples
arrived. The frame is encoded once and written to every socket watching that view. A socket's first
message carries its view's current values (one MGET when it joins).

The tick never waits on a socket: each socket has its own sender task and a one-frame mailbox. A
server's send waits while the socket's buffer is full (uvicorn's flow control), so a client that stops
reading would otherwise hold up every other socket of the process. A frame put while the previous one
still waits is merged into it, the newest row of each GPU winning (a frame carries only the GPUs that
changed, so replacing it would lose updates). A socket whose send has not completed for
TELEMETRY_STALLED_SOCKET_S when its next frame comes is dropped with 1013 (try again later): the tick
checks a clock only for sockets already behind, so sockets that keep up cost no timer.

A view is a set of GPUs a tenant may see (its fleet, a cluster, a pool, a GPU), resolved from the
database when the first socket joins and refreshed now and then (GPUs come and go)."""

import asyncio
import contextlib
import json
import logging
import time
from collections.abc import Awaitable, Callable
from typing import NamedTuple

from channels.db import database_sync_to_async
from django.conf import settings

from nodepools.models import Gpu

from . import store
from .store import FRESH, STREAM_KEYS, gpu_key

logger = logging.getLogger(__name__)
REFRESH_GPUS_S = 10.0
MGET_CHUNK = 5000
COLUMNS = ["id", "ts", *STREAM_KEYS]
READ_COUNT = 1000
TRY_AGAIN_LATER = 1013  # the close code of a socket dropped for not reading
Send = Callable[[str], Awaitable[None]]
Close = Callable[[int, str], Awaitable[None]]


class Frame(NamedTuple):
    view: str
    rows: list[list]
    text: str  # encoded once for all the view's sockets


def encode(view_key: str, rows: list[list]) -> str:
    return json.dumps({"type": "telemetry.frame", "view": view_key, "columns": COLUMNS, "gpus": rows})


class Mailbox:
    """A socket's next frame. One put while another waits is merged into it, the newest row of each GPU
    winning: a slow socket gets fewer, fuller frames and still every GPU's newest values."""

    def __init__(self) -> None:
        self.frame: Frame | None = None
        self.merged: dict[int, list] | None = None  # GPU id → row, once two frames were merged
        self.ready = asyncio.Event()

    def put(self, frame: Frame) -> bool:
        """Leave `frame` for the socket; True if it was merged into one still waiting."""
        coalesced = self.frame is not None
        if coalesced:
            if self.merged is None:
                self.merged = {row[0]: row for row in self.frame.rows}
            for row in frame.rows:
                kept = self.merged.get(row[0])
                if kept is None or kept[1] <= row[1]:
                    self.merged[row[0]] = row
        self.frame = frame
        self.ready.set()
        return coalesced

    async def take(self) -> str:
        """The waiting frame's text, once there is one; the mailbox is empty after."""
        await self.ready.wait()
        self.ready.clear()
        frame, merged = self.frame, self.merged
        self.frame = self.merged = None
        # A frame that was not merged goes out as the view encoded it, shared with its other sockets.
        return frame.text if merged is None else encode(frame.view, list(merged.values()))


class Member:
    """One socket of a view: its mailbox and the task that sends from it."""

    def __init__(self, send: Send, close: Close) -> None:
        self.send = send
        self.close = close
        self.mailbox = Mailbox()
        self.sending_since: float | None = None  # when the send under way began (monotonic)
        self.sender = asyncio.get_running_loop().create_task(self.deliver())

    async def deliver(self) -> None:
        """Send frames as the socket takes them, until it is gone (its disconnect leaves the view)."""
        with contextlib.suppress(Exception):
            while True:
                text = await self.mailbox.take()
                self.sending_since = time.monotonic()
                await self.send(text)
                self.sending_since = None

    def stalled(self, now: float, limit_s: float) -> bool:
        return self.sending_since is not None and now - self.sending_since > limit_s


class View:
    def __init__(self, key: str, gpu_filter: dict) -> None:
        self.key = key
        self.gpu_filter = gpu_filter  # always includes the tenant
        self.members: dict[int, Member] = {}
        self.gpus: list[dict] = []
        self.loaded_at = 0.0

    async def load(self) -> None:
        self.gpus = await database_sync_to_async(_gpus)(self.gpu_filter)
        self.loaded_at = time.monotonic()


def _gpus(gpu_filter: dict) -> list[dict]:
    rows = Gpu.objects.filter(**gpu_filter).order_by("node__pool__cluster__name", "node__name", "index")
    return [
        {
            "id": pk,
            "name": f"{node}/gpu{index}",
            "node": node_id,
            "pool": pool_id,
            "pool_name": pool_name,
            "cluster": cluster_id,
            "memory_mib": memory,
            "healthy": healthy,
        }
        for pk, node, node_id, index, pool_id, pool_name, cluster_id, memory, healthy in rows.values_list(
            "pk",
            "node__name",
            "node_id",
            "index",
            "node__pool_id",
            "node__pool__name",
            "node__pool__cluster_id",
            "memory_mib",
            "healthy",
        )
    ]


class Hub:
    def __init__(self) -> None:
        self.views: dict[str, View] = {}
        self.task: asyncio.Task | None = None
        self.redis = None  # store.async_client(), made on the loop that uses it
        self.last_id: bytes = b"0-0"
        self.closing: set[asyncio.Task] = set()  # closes of stalled sockets under way

    async def view(self, key: str, gpu_filter: dict) -> View:
        view = self.views.get(key)
        if view is None:
            view = View(key, gpu_filter)
            await view.load()
        return view

    def join(self, view: View, member_id: int, send: Send, close: Close) -> None:
        """From now on the member gets the view's frames (send the view's GPU list first)."""
        self.views.setdefault(view.key, view).members[member_id] = Member(send, close)
        if self.task is None or self.task.done():
            self.task = asyncio.get_running_loop().create_task(self.run())

    def leave(self, key: str, member_id: int) -> Member | None:
        view = self.views.get(key)
        if view is None:
            return None
        member = view.members.pop(member_id, None)
        if not view.members:
            del self.views[key]
        if member is not None:
            member.sender.cancel()
        return member

    def _drop(self, key: str, member_id: int) -> None:
        """A socket that has not drained for TELEMETRY_STALLED_SOCKET_S gets no more frames and is closed:
        the close frame waits behind what it has not read (ASGI can close a connection, not abort it)."""
        member = self.leave(key, member_id)
        if member is not None:
            logger.info("telemetry socket of %s dropped: not drained", key)
            closing = asyncio.get_running_loop().create_task(self._close(member))
            self.closing.add(closing)  # referenced until done, so it is not collected midway
            closing.add_done_callback(self.closing.discard)

    @staticmethod
    async def _close(member: Member) -> None:
        with contextlib.suppress(Exception):  # gone meanwhile
            await member.close(TRY_AGAIN_LATER, "not reading")

    async def run(self) -> None:
        interval = settings.TELEMETRY_FRAME_INTERVAL_S
        if self.redis is None:
            self.redis = store.async_client()
        newest = await self.redis.xrevrange(FRESH, count=1)
        self.last_id = newest[0][0] if newest else b"0-0"
        while self.views:
            started = time.monotonic()
            try:
                await self.tick()
            except Exception:  # a Redis hiccup must not end the streams; the next tick tries again
                logger.exception("telemetry frame tick failed")
            await asyncio.sleep(max(0.0, interval - (time.monotonic() - started)))

    async def _fresh(self) -> dict[int, list]:
        """GPU id → its newest row written since the last tick."""
        changed: dict[int, list] = {}
        while True:
            reply = await self.redis.xread({FRESH: self.last_id}, count=READ_COUNT)
            entries = reply[0][1] if reply else []
            for entry_id, fields in entries:
                for row in json.loads(fields[b"rows"]):
                    if row[0] not in changed or changed[row[0]][1] <= row[1]:
                        changed[row[0]] = row
                self.last_id = entry_id
            if len(entries) < READ_COUNT:
                return changed

    async def tick(self) -> None:
        views = list(self.views.values())
        # One view's GPU list is refreshed per tick at most, so refreshes never pile up in one tick.
        stalest = min(views, key=lambda v: v.loaded_at, default=None)
        if stalest is not None and time.monotonic() - stalest.loaded_at > REFRESH_GPUS_S:
            await stalest.load()
        changed = await self._fresh()
        if not changed:
            return
        lags = []  # (seconds since the frame's oldest sample, frames handed over), for /metrics
        coalesced = 0  # frames merged into one their socket had not taken yet
        stalled = []  # (view key, member id) of sockets whose send has not completed for too long
        now, limit_s = time.monotonic(), settings.TELEMETRY_STALLED_SOCKET_S
        for view in views:
            rows = [changed[gpu["id"]] for gpu in view.gpus if gpu["id"] in changed]
            if not rows:
                continue
            frame = Frame(view.key, rows, encode(view.key, rows))
            merged = 0
            for member_id, member in view.members.items():
                if member.mailbox.put(frame):  # its socket has not taken the last one yet
                    merged += 1
                    if member.stalled(now, limit_s):
                        stalled.append((view.key, member_id))
            coalesced += merged
            lags.append((time.time() - min(row[1] for row in rows), len(view.members) - merged))
        for key, member_id in stalled:
            self._drop(key, member_id)
        await store.record_frames(self.redis, lags, coalesced, len(stalled))

    async def current(self, view: View) -> list[list]:
        """The view's GPUs' latest rows, as frames carry them (for a socket that just joined)."""
        if self.redis is None:
            self.redis = store.async_client()
        rows = []
        ids = [g["id"] for g in view.gpus]
        for i in range(0, len(ids), MGET_CHUNK):
            chunk = ids[i : i + MGET_CHUNK]
            for gpu_id, value in zip(chunk, await self.redis.mget([gpu_key(g) for g in chunk]), strict=True):
                if value is not None:
                    sample = json.loads(value)
                    rows.append([gpu_id, sample["ts"], *(sample.get(k) for k in STREAM_KEYS)])
        return rows


hub = Hub()  # one per server process
