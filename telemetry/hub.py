"""Live telemetry streams, coalesced: one task per server process wakes every frame interval, reads the
latest sample of every GPU that some connected view shows (one Redis MGET for all views), and sends
each view one frame with the GPUs that changed since its last frame, however many samples arrived.
The frame is encoded once and written to every socket watching that view.

A view is a set of GPUs a tenant may see (its fleet, a cluster, a pool, a GPU), resolved from the
database when the first socket joins and refreshed now and then (GPUs come and go)."""

import asyncio
import json
import logging
import time
from collections.abc import Awaitable, Callable

import redis.asyncio as aioredis
from channels.db import database_sync_to_async
from django.conf import settings

from nodepools.models import Gpu

from .store import gpu_key

logger = logging.getLogger(__name__)
REFRESH_GPUS_S = 10.0
MGET_CHUNK = 5000
COLUMNS = ["id", "ts", "util", "mem", "temp", "power", "sm", "xid"]
Send = Callable[[str], Awaitable[None]]


class View:
    def __init__(self, key: str, gpu_filter: dict) -> None:
        self.key = key
        self.gpu_filter = gpu_filter  # always includes the tenant
        self.members: dict[int, Send] = {}
        self.gpus: list[dict] = []
        self.sent_ts: dict[int, float] = {}
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
        self.redis: aioredis.Redis | None = None
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
            self.redis = aioredis.Redis.from_url(settings.REDIS_URL)
        while self.views:
            started = time.monotonic()
            try:
                await self.tick()
            except Exception:  # a Redis hiccup must not end the streams; the next tick tries again
                logger.exception("telemetry frame tick failed")
            await asyncio.sleep(max(0.0, interval - (time.monotonic() - started)))

    async def tick(self) -> None:
        views = list(self.views.values())
        for view in views:
            if time.monotonic() - view.loaded_at > REFRESH_GPUS_S:
                await view.load()
        wanted = sorted({g["id"] for view in views for g in view.gpus})
        latest = await self._latest(wanted)
        for view in views:
            rows = []
            for gpu in view.gpus:
                sample = latest.get(gpu["id"])
                if sample is not None and sample["ts"] > view.sent_ts.get(gpu["id"], 0.0):
                    view.sent_ts[gpu["id"]] = sample["ts"]
                    rows.append([gpu["id"], *(sample.get(c) for c in COLUMNS[1:])])
            if rows:
                text = json.dumps(
                    {"type": "telemetry.frame", "view": view.key, "columns": COLUMNS, "gpus": rows}
                )
                await asyncio.gather(
                    *(send(text) for send in list(view.members.values())), return_exceptions=True
                )
                self.frames_sent += len(view.members)

    async def _latest(self, gpu_ids: list[int]) -> dict[int, dict]:
        result = {}
        for i in range(0, len(gpu_ids), MGET_CHUNK):
            chunk = gpu_ids[i : i + MGET_CHUNK]
            for gpu_id, value in zip(chunk, await self.redis.mget([gpu_key(g) for g in chunk]), strict=True):
                if value is not None:
                    result[gpu_id] = json.loads(value)
        return result


hub = Hub()  # one per server process
