"""Live telemetry streams, coalesced: one task per server process wakes every frame interval, reads
what was written since its last tick from the `tm:fresh` Redis stream (one entry per ingested batch
or simulator slice, so a tick decodes a few dozen entries, not one value per GPU), and sends each
view one frame with the newest sample of each of its GPUs that changed, however many samples
arrived. The frame is encoded once and written to every socket watching that view. A socket's first
message carries its view's current values (one MGET when it joins).

A view is a set of GPUs a tenant may see (its fleet, a cluster, a pool, a GPU), resolved from the
database when the first socket joins and refreshed now and then (GPUs come and go)."""

import asyncio
import json
import logging
import time
from collections.abc import Awaitable, Callable

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
Send = Callable[[str], Awaitable[None]]


class View:
    def __init__(self, key: str, gpu_filter: dict) -> None:
        self.key = key
        self.gpu_filter = gpu_filter  # always includes the tenant
        self.members: dict[int, Send] = {}
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
        self.frames_sent = 0

    async def view(self, key: str, gpu_filter: dict) -> View:
        view = self.views.get(key)
        if view is None:
            view = View(key, gpu_filter)
            await view.load()
        return view

    def join(self, view: View, member: int, send: Send) -> None:
        """From now on the member gets the view's frames (send the view's GPU list first)."""
        self.views.setdefault(view.key, view).members[member] = send
        if self.task is None or self.task.done():
            self.task = asyncio.get_running_loop().create_task(self.run())

    def leave(self, key: str, member: int) -> None:
        view = self.views.get(key)
        if view is not None:
            view.members.pop(member, None)
            if not view.members:
                del self.views[key]

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
        lags = []  # (seconds since the frame's oldest sample, frames sent), for /metrics
        for view in views:
            rows = [changed[gpu["id"]] for gpu in view.gpus if gpu["id"] in changed]
            if rows:
                text = json.dumps(
                    {"type": "telemetry.frame", "view": view.key, "columns": COLUMNS, "gpus": rows}
                )
                members = list(view.members.values())
                await asyncio.gather(*(send(text) for send in members), return_exceptions=True)
                self.frames_sent += len(members)
                lags.append((time.time() - min(row[1] for row in rows), len(members)))
        await store.record_frame_lags(self.redis, lags)

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
