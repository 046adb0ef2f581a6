"""HTTP/2 for the stand-in, as kube-apiserver serves it (kubernetes/kubernetes
staging/src/k8s.io/apiserver/pkg/server/secure_serving.go): offered by ALPN beside HTTP/1.1, at most 100
concurrent streams per connection ("match http2.initialMaxConcurrentStreams used by clients"), frames
read up to 256 KiB (`MaxReadFrameSize`), and a connection idle for 90 s (`IdleTimeout`) closed with a
GOAWAY. Each stream is served in its own thread by the same handler code as an HTTP/1.1 request; only the
connection's thread touches the socket (an SSL socket is not safe to read and write from two threads), so
a stream's answer is queued into the protocol state and the connection's thread is woken to send it,
within the peer's flow-control windows."""

from __future__ import annotations

import select
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import h2.config
import h2.connection
import h2.events
import h2.exceptions
import h2.settings

MAX_STREAMS = 100
MAX_READ_FRAME = 256 * 1024
IDLE_S = 90.0
THREAD_PREFIX = "kubeapi-h2-"  # a stream's thread: kubeapi-h2-<server port>-<stream id>


@dataclass
class Stream:
    id: int
    headers: dict[str, str]
    body: bytearray = field(default_factory=bytearray)
    reset: bool = False  # the client cancelled it (RST_STREAM)


class Connection:
    """One HTTP/2 connection: `serve()` runs in the connection's thread until the client or the server
    closes it; `serve_stream(connection, stream)` answers each request in a thread of its own through
    `respond`, `send` and `end`."""

    def __init__(self, sock: socket.socket, serve_stream: Callable[[Connection, Stream], None]):
        self.sock, self.serve_stream = sock, serve_stream
        self.h2 = h2.connection.H2Connection(
            h2.config.H2Configuration(client_side=False, header_encoding="utf-8")
        )
        self.changed = threading.Condition()  # guards `h2` and `streams`; notified when windows open
        self.streams: dict[int, Stream] = {}
        self.closed = False
        self._wake_r, self._wake_w = socket.socketpair()
        self._wake_w.setblocking(False)
        self.idle_s = IDLE_S

    # ---- the connection's thread ------------------------------------------------------------------------

    def serve(self) -> None:
        with self.changed:
            self.h2.initiate_connection()
            self.h2.update_settings(
                {
                    h2.settings.SettingCodes.MAX_CONCURRENT_STREAMS: MAX_STREAMS,
                    h2.settings.SettingCodes.MAX_FRAME_SIZE: MAX_READ_FRAME,
                }
            )
        idle_since = time.monotonic()
        try:
            while not self.closed:
                self._flush()
                if not self.sock.pending():
                    readable = select.select([self.sock, self._wake_r], [], [], 1.0)[0]
                    if self._wake_r in readable:
                        self._wake_r.recv(4096)
                    if self.sock not in readable:
                        if self.streams:
                            idle_since = time.monotonic()
                        elif time.monotonic() - idle_since > self.idle_s:
                            with self.changed:
                                self.h2.close_connection()
                            self._flush()
                            return
                        continue
                data = self.sock.recv(65536)
                if not data:
                    return
                idle_since = time.monotonic()
                self._receive(data)
        except (OSError, h2.exceptions.ProtocolError):
            self._flush_quietly()  # a protocol error leaves a GOAWAY to send
        finally:
            with self.changed:
                self.closed = True
                self.changed.notify_all()
            self._flush_quietly()  # a GOAWAY queued by `goaway`
            self._wake_r.close()
            self._wake_w.close()

    def _receive(self, data: bytes) -> None:
        with self.changed:
            events = self.h2.receive_data(data)
            for event in events:
                if isinstance(event, h2.events.RequestReceived):
                    self.streams[event.stream_id] = Stream(event.stream_id, dict(event.headers))
                elif isinstance(event, h2.events.DataReceived):
                    if event.stream_id in self.streams:
                        self.streams[event.stream_id].body += event.data
                    self.h2.acknowledge_received_data(event.flow_controlled_length, event.stream_id)
                elif isinstance(event, h2.events.StreamEnded) and event.stream_id in self.streams:
                    stream = self.streams[event.stream_id]
                    name = f"{THREAD_PREFIX}{self.sock.getsockname()[1]}-{stream.id}"
                    serve = threading.Thread(target=self.serve_stream, args=(self, stream), name=name)
                    serve.daemon = True
                    serve.start()
                elif isinstance(event, h2.events.StreamReset) and event.stream_id in self.streams:
                    self.streams.pop(event.stream_id).reset = True
                elif isinstance(event, h2.events.ConnectionTerminated):
                    self.closed = True
            self.changed.notify_all()  # windows may have opened, streams ended

    def _flush(self) -> None:
        with self.changed:
            out = self.h2.data_to_send()
        if out:
            self.sock.sendall(out)

    def _flush_quietly(self) -> None:
        try:
            self._flush()
        except OSError:
            pass

    # ---- a stream's thread -------------------------------------------------------------------------------

    def gone(self, stream: Stream) -> bool:
        """Whether the client cancelled the stream or the connection ended."""
        return stream.reset or self.closed

    def respond(self, stream: Stream, status: int, headers: list[tuple[str, str]]) -> None:
        with self.changed:
            self._alive(stream)
            self.h2.send_headers(stream.id, [(":status", str(status)), *headers])
        self._wake()

    def send(self, stream: Stream, data: bytes) -> None:
        """Queue `data` on the stream, waiting while the peer's windows are shut; OSError once gone."""
        view = memoryview(data)
        with self.changed:
            while view:
                self._alive(stream)
                window = min(self.h2.local_flow_control_window(stream.id), self.h2.max_outbound_frame_size)
                if window <= 0:
                    self.changed.wait(1.0)
                    continue
                self.h2.send_data(stream.id, bytes(view[:window]))
                view = view[window:]
                self._wake()

    def end(self, stream: Stream) -> None:
        with self.changed:
            if not self.gone(stream):
                self.h2.end_stream(stream.id)
            self.streams.pop(stream.id, None)
        self._wake()

    def goaway(self) -> None:
        """Send a GOAWAY and close, as kube-apiserver's --goaway-chance does to rebalance clients
        (staging/src/k8s.io/apiserver/pkg/server/filters/goaway.go; the h2 library cannot go on serving
        the streams it had, which Go's server does: a client must resume its watches either way)."""
        with self.changed:
            self.h2.close_connection()
            self.closed = True
            self.changed.notify_all()
        self._wake()

    def drop(self) -> None:
        """Close the connection without answering (FakeKubeApi.faults' `drop`)."""
        with self.changed:
            self.closed = True
        try:
            self.sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass

    def _alive(self, stream: Stream) -> None:
        if self.gone(stream):
            raise ConnectionResetError("the client closed the stream")

    def _wake(self) -> None:
        try:
            self._wake_w.send(b"\0")
        except OSError:
            pass  # full (the connection's thread is already due to look) or closed
