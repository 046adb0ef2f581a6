"""Live streams through a real uvicorn and a real websocket client: coalesced frames, tenant isolation."""

import json
import math
import time

import pytest

from nodepools.models import Gpu

from ..integration.test_websocket import assert_refused, open_socket
from .conftest import post, sample

pytestmark = pytest.mark.integration


def frames_until(socket, predicate, timeout_s: float = 10) -> list[dict]:
    """Telemetry frames received until one satisfies `predicate` (which must happen in time)."""
    frames, deadline = [], time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        message = json.loads(socket.recv(timeout=deadline - time.monotonic()))
        if message["type"] == "telemetry.frame":
            frames.append(message)
            if predicate(message):
                return frames
    raise AssertionError(f"no matching frame among {frames}")


def rows(frame: dict) -> dict[int, dict]:
    return {row[0]: dict(zip(frame["columns"], row, strict=True)) for row in frame["gpus"]}


def test_pool_stream_sends_coalesced_frames_of_its_gpus(serve_asgi, owner, node, node_client):
    # The server's interval is set here, long enough that 30 posts span only a few intervals even on a
    # slow machine, so coalescing shows whatever the default.
    interval_s = 0.5
    server = serve_asgi(NVKE_TELEMETRY_FRAME_INTERVAL_S=str(interval_s))
    gpus = list(Gpu.objects.filter(node=node).order_by("index"))
    with open_socket(server, owner, f"/ws/telemetry/?pool={node.pool_id}") as ws:
        hello = json.loads(ws.recv(timeout=10))
        assert hello["type"] == "telemetry.hello"
        pool_gpus = set(Gpu.objects.filter(node__pool=node.pool).values_list("pk", flat=True))
        assert {g["id"] for g in hello["gpus"]} == pool_gpus

        started = time.monotonic()
        posts = 30
        for i in range(posts):  # one batch per post, as fast as the test client goes
            assert (
                post(node_client, [sample(gpus[0], util=i), sample(gpus[1], util=100 - i)]).status_code == 202
            )
        frames = frames_until(ws, lambda f: rows(f).get(gpus[0].pk, {}).get("util") == posts - 1)
        elapsed = time.monotonic() - started

    last = rows(frames[-1])
    assert last[gpus[1].pk]["util"] == 100 - (posts - 1)  # both GPUs' newest values in the same frame
    assert all(set(rows(f)) <= pool_gpus for f in frames)
    # Coalesced: at most one frame per interval, not one per sample.
    assert len(frames) <= math.ceil(elapsed / interval_s) + 1
    assert len(frames) < posts


def test_another_tenant_cannot_subscribe_or_overhear(asgi_server, owner, node, node_client, make_member):
    stranger = make_member("globex", "owner")
    gpu = node.gpus.first()
    for path in (
        f"/ws/telemetry/?pool={node.pool_id}",
        f"/ws/telemetry/?cluster={node.pool.cluster_id}",
        f"/ws/telemetry/?gpu={gpu.pk}",
        "/ws/telemetry/?gpu=x",
        f"/ws/telemetry/?gpu={gpu.pk}&pool={node.pool_id}",
    ):
        assert_refused(asgi_server, path, stranger)
    assert_refused(asgi_server, "/ws/telemetry/")  # anonymous

    with (
        open_socket(asgi_server, stranger, "/ws/telemetry/") as theirs,
        open_socket(asgi_server, owner, f"/ws/telemetry/?gpu={gpu.pk}") as mine,
    ):
        assert json.loads(theirs.recv(timeout=10))["gpus"] == []  # their fleet has no GPUs
        assert [g["id"] for g in json.loads(mine.recv(timeout=10))["gpus"]] == [gpu.pk]
        assert post(node_client, [sample(gpu, util=77)]).status_code == 202
        frames = frames_until(mine, lambda f: gpu.pk in rows(f))
        assert rows(frames[-1])[gpu.pk]["util"] == 77
        with pytest.raises(TimeoutError):
            theirs.recv(timeout=1.5)  # several intervals: nothing of acme's reaches them
    # A socket opened later starts from the current values.
    with open_socket(asgi_server, owner, f"/ws/telemetry/?gpu={gpu.pk}") as late:
        hello = json.loads(late.recv(timeout=10))
        assert [dict(zip(hello["columns"], row, strict=True))["util"] for row in hello["latest"]] == [77]
