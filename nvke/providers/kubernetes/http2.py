"""One HTTP/2 connection to a cluster's API server, its GETs multiplexed as client-go's are (streams.py
opens it; kube-apiserver offers HTTP/2 by ALPN and takes 100 concurrent streams per connection).

Not httpcore's HTTP/2: there a stream waiting for its response reads the network itself under the
connection's read lock, so the lock's next holder goes back to the network while another stream's
event, already received, waits behind it; with a cluster's six watches on one connection an event
waited for the next few frames of any stream (seconds, or a minute: bench/README.md). Here one reader
task per connection hands each frame's event to its stream's queue at once. A stream given up early is
reset (RST_STREAM), so the server stops sending it; data on it still opens the connection's window."""

import asyncio
import ssl
import time
from collections.abc import AsyncIterator

import h2.config
import h2.connection
import h2.errors
import h2.events
import h2.exceptions
import h2.settings

# Receive windows, per stream and for the connection: a large list streams without waiting on us.
RECEIVE_WINDOW = 16 * 1024 * 1024
READ_BYTES = 64 * 1024
# The health check client-go's HTTP/2 connections make (k8s.io/apimachinery pkg/util/net/http.go:
# ReadIdleTimeout, PingTimeout): a connection silent this long is sent a PING, and one that does not
# answer it in time is closed, so a connection lost without a FIN (a NAT or a load balancer forgetting
# it) is replaced instead of holding the cluster's watches until their own timeouts.
READ_IDLE_S = 30.0
PING_TIMEOUT_S = 15.0


class Closed(ConnectionError):
    """The connection or the stream ended without a whole answer (EOF, GOAWAY, RST_STREAM, bad frames)."""


class GoneAway(Closed):
    """The server sent GOAWAY without an error (kube-apiserver's --goaway-chance rebalancing clients, a
    server shutting down): not a failure of the cluster. A watch cut by it carries on from its
    resourceVersion on a new connection (the h2 library ends every stream of a connection on a GOAWAY,
    even those the server would have finished)."""


class Stream:
    """One request's answer: `status` once `response()` returns, then the body's `chunks`."""

    def __init__(self, connection: "Connection", stream_id: int):
        self.connection, self.id = connection, stream_id
        self.events: asyncio.Queue = asyncio.Queue()
        self.status = 0
        self.ended = False

    async def _next(self, read_s: float) -> h2.events.Event:
        async with asyncio.timeout(read_s):
            event = await self.events.get()
        if isinstance(event, BaseException):
            raise event
        if isinstance(event, h2.events.StreamReset):
            raise Closed("the server reset the stream")
        return event

    async def response(self, read_s: float) -> int:
        """The answer's status code, within `read_s`."""
        while not self.status:
            event = await self._next(read_s)
            if isinstance(event, h2.events.ResponseReceived):
                self.status = int(dict(event.headers)[":status"])
            elif isinstance(event, h2.events.StreamEnded):
                raise Closed("the stream ended without an answer")
        return self.status

    async def chunks(self, read_s: float) -> AsyncIterator[bytes]:
        """The body as it arrives, each wait for more cut off after `read_s`."""
        while not self.ended:
            event = await self._next(read_s)
            if isinstance(event, h2.events.DataReceived):
                self.connection.consumed(self.id, event.flow_controlled_length)
                yield event.data
            elif isinstance(event, h2.events.StreamEnded):
                self.ended = True

    def close(self) -> None:
        """Done with it: an unfinished stream is reset, so the server stops sending it."""
        self.connection.forget(self.id, reset=not self.ended)


class Connection:
    """A connection made (TLS with ALPN `h2` agreed) and its reader task; `request` opens streams."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, authority: str):
        self.reader, self.writer, self.authority = reader, writer, authority
        self.h2 = h2.connection.H2Connection(
            h2.config.H2Configuration(client_side=True, header_encoding="utf-8")
        )
        self.h2.local_settings = h2.settings.Settings(
            client=True,
            initial_values={
                h2.settings.SettingCodes.ENABLE_PUSH: 0,
                h2.settings.SettingCodes.INITIAL_WINDOW_SIZE: RECEIVE_WINDOW,
                h2.settings.SettingCodes.MAX_CONCURRENT_STREAMS: 100,
            },
        )
        self.h2.initiate_connection()
        self.h2.increment_flow_control_window(RECEIVE_WINDOW - self.h2.inbound_flow_control_window)
        self.streams: dict[int, Stream] = {}
        self.room = asyncio.Condition()  # a stream ended: one more may start
        self.failure: Closed | None = None
        self.read_at = time.monotonic()
        self.pong = asyncio.Event()
        self._flush()
        loop = asyncio.get_running_loop()
        self.reading = loop.create_task(self._read())
        self.checking = loop.create_task(self._check_health())

    @property
    def usable(self) -> bool:
        return self.failure is None and self.h2.state_machine.state != h2.connection.ConnectionState.CLOSED

    async def request(self, path: str, headers: dict[str, str]) -> Stream:
        """Send a GET for `path` (with its query) and return its stream."""
        async with self.room:
            await self.room.wait_for(
                lambda: self.failure or len(self.streams) < self.h2.remote_settings.max_concurrent_streams
            )
        if self.failure:
            raise self.failure
        stream = Stream(self, self.h2.get_next_available_stream_id())
        self.streams[stream.id] = stream
        fields = [(":method", "GET"), (":scheme", "https"), (":authority", self.authority), (":path", path)]
        fields += [(name.lower(), value) for name, value in headers.items() if name.lower() != "host"]
        self.h2.send_headers(stream.id, fields, end_stream=True)
        self._flush()
        return stream

    def consumed(self, stream_id: int, length: int) -> None:
        if self.usable:
            self.h2.acknowledge_received_data(length, stream_id)
            self._flush()

    def forget(self, stream_id: int, reset: bool) -> None:
        if self.streams.pop(stream_id, None) is None:
            return
        if reset and self.usable:
            try:
                self.h2.reset_stream(stream_id, h2.errors.ErrorCodes.CANCEL)
            except h2.exceptions.StreamClosedError:
                pass  # the server ended it meanwhile
            self._flush()
        asyncio.get_running_loop().create_task(self._notify())

    async def _notify(self) -> None:
        async with self.room:
            self.room.notify_all()

    def _flush(self) -> None:
        # Only small frames go out (headers, window updates, resets): the transport buffers them.
        data = self.h2.data_to_send()
        if data and not self.writer.is_closing():
            self.writer.write(data)

    async def _read(self) -> None:
        try:
            while True:
                data = await self.reader.read(READ_BYTES)
                if not data:
                    raise Closed("the server closed the connection")
                self.read_at = time.monotonic()
                for event in self.h2.receive_data(data):
                    self._dispatch(event)
                self._flush()
        except (OSError, ssl.SSLError, h2.exceptions.ProtocolError) as error:
            self._fail(error if isinstance(error, Closed) else Closed(type(error).__name__))
        finally:
            self.writer.close()

    async def _check_health(self) -> None:
        while self.failure is None:
            await asyncio.sleep(max(0.0, self.read_at + READ_IDLE_S - time.monotonic()))
            if time.monotonic() - self.read_at < READ_IDLE_S:
                continue  # frames came meanwhile
            self.pong.clear()
            self.h2.ping(b"nvke-hc!")
            self._flush()
            try:
                async with asyncio.timeout(PING_TIMEOUT_S):
                    await self.pong.wait()
            except TimeoutError:
                self._fail(Closed("the server did not answer a PING"))
                self.writer.close()

    def _dispatch(self, event: h2.events.Event) -> None:
        if isinstance(event, h2.events.PingAckReceived):
            self.pong.set()
        if isinstance(event, h2.events.ConnectionTerminated):
            if event.error_code == h2.errors.ErrorCodes.NO_ERROR:
                raise GoneAway("the server ended the connection (GOAWAY)")
            raise Closed(f"the server ended the connection (GOAWAY, {event.error_code!r})")
        stream_id = getattr(event, "stream_id", None)
        stream = self.streams.get(stream_id) if stream_id else None
        if stream is not None and isinstance(
            event,
            h2.events.ResponseReceived
            | h2.events.DataReceived
            | h2.events.StreamEnded
            | h2.events.StreamReset,
        ):
            stream.events.put_nowait(event)
        elif isinstance(event, h2.events.DataReceived):  # a stream already given up
            self.h2.acknowledge_received_data(event.flow_controlled_length, event.stream_id)

    def _fail(self, failure: Closed) -> None:
        if self.failure is not None:
            return
        self.failure = failure
        self.checking.cancel()
        for stream in self.streams.values():
            stream.events.put_nowait(failure)
        asyncio.get_running_loop().create_task(self._notify())

    async def aclose(self) -> None:
        if self.usable:
            self.h2.close_connection()
            self._flush()
        self._fail(Closed("the connection was closed"))
        self.reading.cancel()
        self.writer.close()
