"""A socket that stops reading (a frozen tab, a stalled network) through a real uvicorn: the other sockets
of its view keep getting every frame on time, and once it has not drained for
NVKE_TELEMETRY_STALLED_SOCKET_S it is dropped with 1013 and counted in /metrics."""

import json
import socket
import time

import pytest
import requests
from websockets.sync.client import connect

from nodepools.models import Gpu
from telemetry import store

from ..integration.test_websocket import close_code, open_socket, session_cookie

pytestmark = pytest.mark.integration
METRICS_TOKEN = "scrape-me"
# The non-reading client's own buffering: its kernel's receive buffer (the kernel doubles what is set)
# and segments small enough that the server's send buffer is not sized for loopback's 64 KiB segments.
CLIENT_RCVBUF = 4096
CLIENT_MSS = 536


def stalled_socket(server, user, path: str):
    """A real websocket client that stops reading from its socket as soon as one message waits unread."""
    sock = socket.socket()  # made here: these options must be set before connecting
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, CLIENT_RCVBUF)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_MAXSEG, CLIENT_MSS)
    sock.connect(("127.0.0.1", server.port))
    return connect(
        f"ws://127.0.0.1:{server.port}{path}",
        sock=sock,
        additional_headers={"Cookie": session_cookie(user), "Origin": f"http://127.0.0.1:{server.port}"},
        open_timeout=10,
        max_queue=1,
    )


def server_buffering_bound() -> int:
    """More bytes than the server side can hold for a socket that does not read before a send must wait:
    the largest TCP send buffer this kernel allows, the transport's write buffer (asyncio's default high
    water mark is 64 KiB) and the client's receive buffer and one queued message, with room to spare."""
    with open("/proc/sys/net/ipv4/tcp_wmem") as f:
        wmem_max = int(f.read().split()[2])
    return wmem_max + 256 * 1024


def stream_counters(server) -> dict[str, float]:
    """The counters of /metrics about slow sockets: frames coalesced, sockets closed as stalled."""
    text = requests.get(
        f"{server.url}/metrics", headers={"Authorization": f"Bearer {METRICS_TOKEN}"}, timeout=30
    ).text
    names = ("nvke_telemetry_frames_coalesced_total", "nvke_telemetry_sockets_closed_stalled_total")
    return {
        line.split(" ")[0]: float(line.split(" ")[1]) for line in text.splitlines() if line.startswith(names)
    }


def write_round(gpus: list[Gpu], util: int) -> None:
    """Every GPU of the pool reports, as the simulator writes: one round trip. Readings with all their
    digits, as NVML gives them, make frames of ~25 kB."""
    now = time.time()
    samples = [
        store.Sample(
            g.pk,
            now,
            {
                "util": util,
                "mem": 1024 + g.pk / 3,
                "temp": 55 + g.pk / 7,
                "power": 40 + g.pk / 9,
                "sm": 1800 + g.pk / 11,
            },
            {},
        )
        for g in gpus
    ]
    store.write_many([(gpus[0].node_id, samples)], now)


def frame_with(ws, util: int, timeout_s: float) -> str:
    """The first frame whose rows all carry `util`, which must arrive within `timeout_s`."""
    deadline = time.monotonic() + timeout_s
    while True:
        text = ws.recv(timeout=max(deadline - time.monotonic(), 0.001))
        message = json.loads(text)
        if message["type"] == "telemetry.frame" and {row[2] for row in message["gpus"]} == {util}:
            return text


def test_a_socket_that_stops_reading_holds_up_no_one_and_is_dropped(serve_asgi, owner, add_pool):
    stalled_s = 3.0
    server = serve_asgi(
        NVKE_TELEMETRY_FRAME_INTERVAL_S="0.05",
        NVKE_TELEMETRY_STALLED_SOCKET_S=str(stalled_s),
        NVKE_METRICS_TOKEN=METRICS_TOKEN,
    )
    pool = add_pool("wide", nodes=32, gpus_per_node=8, sharing_mode="exclusive")
    gpus = list(Gpu.objects.filter(node__pool=pool))
    path = f"/ws/telemetry/?pool={pool.pk}"
    with stalled_socket(server, owner, path) as frozen, open_socket(server, owner, path) as reader:
        assert json.loads(frozen.recv(timeout=10))["type"] == "telemetry.hello"
        assert json.loads(reader.recv(timeout=10))["type"] == "telemetry.hello"
        # Round by round, far past what the server can buffer for the frozen socket (the same frames go
        # to both): the reader gets each round's frame within a few intervals, never held up.
        sent, util = 0, 0
        while sent < server_buffering_bound():
            util += 1
            write_round(gpus, util)
            try:
                sent += len(frame_with(reader, util, timeout_s=2.0).encode())
            except TimeoutError:
                pytest.fail(f"the reader was held up after {sent} bytes, round {util}")
        # Frozen past the limit: dropped, counted, and the reader still served.
        deadline = time.monotonic() + stalled_s + 10
        while stream_counters(server)["nvke_telemetry_sockets_closed_stalled_total"] < 1:
            assert time.monotonic() < deadline, "the frozen socket was never dropped"
            util += 1
            write_round(gpus, util)
            frame_with(reader, util, timeout_s=2.0)
        # While it waited, its frames were merged into the one it had not taken.
        assert stream_counters(server)["nvke_telemetry_frames_coalesced_total"] > 0
        # The client reading again finds the frames it had left, then the close: 1013, try again later.
        assert close_code(frozen, timeout_s=30) == 1013
