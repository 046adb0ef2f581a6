"""The process's one event loop for list-watches of every cluster it follows: one thread, so the threads a
process needs do not grow with the clusters it watches, and one connection per cluster: an ApiClient's
lists and watches share one HTTP/2 connection (http2.py), as client-go's do (kube-apiserver offers
HTTP/2 by ALPN and takes 100 concurrent streams per connection; a cluster needs at most 7), or, where a
server does not agree to HTTP/2, one HTTP/1.1 connection (httpcore) per stream. A list runs within
CALL_DEADLINE_S, LISTS_PER_CLUSTER of a cluster at a time.

A request is the one the official client would send: its own method builds the path, query and
Authorization header against an ApiClient that hands the request back instead of sending it (`request`),
so a stream asks for exactly what the blocking client would and is authorized the same way. TLS is the
client configuration's (CA bundle, client certificate, server name); redirects are never followed; every
new connection's address is checked (nvke/outbound.py). Failures become the ProviderErrors client.py
makes; a watch's lines are cut at MAX_LINE_BYTES. A cluster's connection closes when its watches end
(`release`), or once unused for IDLE_S."""

import asyncio
import atexit
import concurrent.futures
import contextlib
import functools
import json
import ssl
import threading
import time
import weakref
from collections.abc import AsyncIterator, Callable, Coroutine, Iterable
from http import HTTPStatus
from typing import Any, NamedTuple, TypeVar
from urllib.parse import SplitResult, urlsplit

import anyio
import httpcore
import urllib3
import uvloop
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from nvke import outbound
from nvke.providers.base import ProviderError

from . import http2
from .client import CALL_DEADLINE_S, TIMEOUT, api_error, transport_error


class _AddressRefused(OSError):
    """The host resolved to an address the policy refuses."""


class _CheckedBackend(httpcore.AsyncNetworkBackend):
    """Connections as client.py's are made (nvke/outbound.py): to the address checked, or not at all, on
    every new connection, so a name re-pointed after attach is refused here too. TLS still names the host
    (httpcore starts TLS with the origin's name, or the request's `sni_hostname`)."""

    def __init__(self) -> None:
        self._anyio = httpcore.AnyIOBackend()

    async def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: Iterable | None = None,
    ) -> httpcore.AsyncNetworkStream:
        address = await _checked(host, port)
        return await self._anyio.connect_tcp(address, port, timeout, local_address, socket_options)

    async def sleep(self, seconds: float) -> None:
        await self._anyio.sleep(seconds)


LISTS_AT_ONCE = 32  # list bodies read at once per process: a restart of many clusters queues, not floods
LISTS_PER_CLUSTER = 2  # a cluster's lists in flight (its six watches list at start and after a 410)
MAX_LINE_BYTES = 8 * 1024 * 1024  # one watch event (the API server stores objects up to ~1.5 MiB)
ERROR_BODY_BYTES = 64 * 1024  # of a refusal's Status, for its message
# A cluster's connections close once nothing has used them for IDLE_S (under kube-apiserver's own 90 s
# IdleTimeout: secure_serving.go), looked at every REAP_S.
IDLE_S = 60.0
REAP_S = 15.0
PARSE_ON_LOOP_BYTES = 1024 * 1024  # a larger list is decoded off the loop, which every stream shares

T = TypeVar("T")
_REASONS = {status.value: status.phrase for status in HTTPStatus}


class Request(Exception):
    def __init__(self, method: str, url: str, headers: dict[str, str]):
        super().__init__(method, url)
        self.method, self.url, self.headers = method, url, headers


class _Recorder(client.ApiClient):
    """An ApiClient that raises the request it was asked to send."""

    def call_api(self, method, url, header_params=None, *args, **kwargs):
        raise Request(method, url, dict(header_params or {}))


_recorders: "weakref.WeakKeyDictionary[client.ApiClient, _Recorder]" = weakref.WeakKeyDictionary()


def _method(list_fn: Callable) -> tuple[Callable, tuple, dict]:
    """The client API method of `list_fn` (itself or a functools.partial of it), and its bound arguments."""
    if isinstance(list_fn, functools.partial):
        return list_fn.func, list_fn.args, list_fn.keywords
    return list_fn, (), {}


def request(list_fn: Callable, **params: Any) -> Request:
    """The request `list_fn(**params)` would send: `list_fn` is a method of a client API object (such as
    CoreV1Api.list_node), or a functools.partial of one."""
    fn, args, kwargs = _method(list_fn)
    api = fn.__self__
    recorder = _recorders.get(api.api_client)
    if recorder is None:
        recorder = _recorders[api.api_client] = _Recorder(api.api_client.configuration)
    try:
        getattr(type(api)(recorder), fn.__name__)(*args, **kwargs, **params)
    except Request as built:
        return built
    raise TypeError(f"{fn.__name__} sent no request")


@functools.lru_cache(maxsize=1024)
def _tls(
    verify: bool, ca_data: str | None, ca_file: str | None, cert: str | None, key: str | None, alpn: tuple
):
    """A TLS context per set of credentials, as the blocking client would verify and authenticate."""
    context = ssl.create_default_context(cafile=ca_file, cadata=ca_data)
    if not verify:
        context.check_hostname, context.verify_mode = False, ssl.CERT_NONE
    if cert:
        context.load_cert_chain(cert, key)
    context.set_alpn_protocols(list(alpn))
    return context


def tls_of(
    config: client.Configuration, alpn: tuple = ("h2", "http/1.1")
) -> tuple[ssl.SSLContext, str | None]:
    """The TLS context and server name of a client configuration, as the blocking client uses them."""
    ca_data = config.ca_cert_data.decode() if isinstance(config.ca_cert_data, bytes) else config.ca_cert_data
    context = _tls(config.verify_ssl, ca_data, config.ssl_ca_cert, config.cert_file, config.key_file, alpn)
    return context, config.tls_server_name


class _Answer(NamedTuple):
    status: int
    chunks: AsyncIterator[bytes]


class _Pool:
    """The connections of one ApiClient (one cluster): one HTTP/2 connection for all of its lists and
    watches where the server offers HTTP/2, as client-go's; else HTTP/1.1 (httpcore), one per stream."""

    def __init__(self, api_client: client.ApiClient):
        self.owner = weakref.ref(api_client)
        self.configuration = api_client.configuration
        self.connection: http2.Connection | None = None
        self.connecting = asyncio.Lock()
        self.http1: httpcore.AsyncConnectionPool | None = None  # once the server did not agree to h2
        self.lists = asyncio.Semaphore(LISTS_PER_CLUSTER)
        self.in_flight = 0
        self.used_at = time.monotonic()

    @contextlib.asynccontextmanager
    async def get(self, url: str, headers: dict[str, str], read_s: float) -> AsyncIterator[_Answer]:
        self.in_flight += 1
        try:
            parts = urlsplit(url)
            connection = await self._connection(parts) if parts.scheme == "https" else None
            if connection is not None:
                stream = await connection.request(
                    f"{parts.path}?{parts.query}" if parts.query else parts.path, headers
                )
                try:
                    yield _Answer(await stream.response(read_s), stream.chunks(read_s))
                finally:
                    stream.close()
            else:
                async with self._http1().stream(
                    "GET", url, headers=list(headers.items()), extensions=self._extensions(read_s)
                ) as response:
                    yield _Answer(response.status, response.aiter_stream())
        finally:
            self.in_flight -= 1
            self.used_at = time.monotonic()

    async def _connection(self, parts: SplitResult) -> http2.Connection | None:
        """The cluster's HTTP/2 connection, made if need be; None for a server that did not agree to it."""
        async with self.connecting:
            if self.http1 is None and (self.connection is None or not self.connection.usable):
                context, server_name = tls_of(self.configuration)
                port = parts.port or 443
                address = await _checked(parts.hostname or "", port)
                async with asyncio.timeout(TIMEOUT[0]):
                    reader, writer = await asyncio.open_connection(
                        address, port, ssl=context, server_hostname=server_name or parts.hostname
                    )
                if writer.get_extra_info("ssl_object").selected_alpn_protocol() != "h2":
                    writer.close()
                    self.http1 = self._http1()
                    return None
                self.connection = http2.Connection(reader, writer, parts.netloc)
            return self.connection

    def _http1(self) -> httpcore.AsyncConnectionPool:
        if self.http1 is None:
            self.http1 = httpcore.AsyncConnectionPool(
                ssl_context=tls_of(self.configuration, alpn=("http/1.1",))[0],
                max_connections=None,  # a connection per stream, as many as the cluster's streams
                keepalive_expiry=IDLE_S,
                network_backend=_CheckedBackend(),
            )
        return self.http1

    def _extensions(self, read_s: float) -> dict:
        extensions: dict[str, Any] = {"timeout": {**_TIMEOUTS, "read": read_s}}
        if self.configuration.tls_server_name:
            extensions["sni_hostname"] = self.configuration.tls_server_name
        return extensions

    def idle(self, now: float) -> bool:
        """Whether its cluster is gone, or nothing has used it for IDLE_S: its connections can close."""
        return self.in_flight == 0 and (self.owner() is None or now - self.used_at > IDLE_S)

    async def aclose(self) -> None:
        if self.connection is not None:
            await self.connection.aclose()
        if self.http1 is not None:
            await self.http1.aclose()


async def _checked(host: str, port: int) -> str:
    """The address of `host` to connect to, as nvke/outbound.py admits it (resolved off the loop)."""
    try:
        return await asyncio.get_running_loop().run_in_executor(None, outbound.checked_address, host, port)
    except outbound.AddressRefused:
        raise _AddressRefused(outbound.REFUSED) from None


class Hub:
    """The loop's thread, each cluster's connections (`pool`), and a way in from other threads (`call`)."""

    def __init__(self) -> None:
        # uvloop: asyncio's own TLS transport fills a 256 KiB read buffer per connection (sslproto's
        # max_size); uvloop's is allocated, touched only as it fills.
        self.loop = uvloop.new_event_loop()
        # Name resolution (for an endpoint given by name) runs on the loop's default executor: two threads.
        self.loop.set_default_executor(
            concurrent.futures.ThreadPoolExecutor(2, thread_name_prefix="kube-resolve")
        )
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True, name="kube-watch-loop")
        self.thread.start()
        self.pools: dict[int, _Pool] = {}  # by id() of their ApiClient, which each checks is still its own
        self.lists = self.call(self._start())
        atexit.register(self.close)

    async def _start(self) -> asyncio.Semaphore:
        asyncio.get_running_loop().create_task(self._reap())
        return asyncio.Semaphore(LISTS_AT_ONCE)

    def pool(self, api_client: client.ApiClient) -> _Pool:
        """The connections of `api_client`'s cluster (on the loop's thread)."""
        pool = self.pools.get(id(api_client))
        if pool is None or pool.owner() is not api_client:
            if pool is not None:  # an id reused after its client was collected: never its TLS context
                asyncio.get_running_loop().create_task(pool.aclose())
            pool = self.pools[id(api_client)] = _Pool(api_client)
        return pool

    def release(self, api_client: client.ApiClient, timeout: float | None = None) -> None:
        """Close the connections of `api_client`'s cluster now: its streams are over."""

        async def close() -> None:
            pool = self.pools.get(id(api_client))
            if pool is not None and pool.owner() is api_client:
                del self.pools[id(api_client)]
                await pool.aclose()

        try:
            self.call(close(), timeout)
        except TimeoutError:
            pass  # it closes on the loop all the same

    async def _reap(self) -> None:
        """Close the connections of clusters no longer watched (a pool per cluster ends with it)."""
        while True:
            await asyncio.sleep(REAP_S)
            now = time.monotonic()
            for key, pool in list(self.pools.items()):
                if pool.idle(now):
                    del self.pools[key]
                    await pool.aclose()

    def close(self) -> None:
        """Close every connection (at exit: the loop's thread is a daemon)."""

        async def close_all() -> None:
            for pool in list(self.pools.values()):
                await pool.aclose()

        try:
            self.call(close_all(), 2)
        except (TimeoutError, RuntimeError):
            pass

    def call(self, coroutine: Coroutine[Any, Any, T], timeout: float | None = None) -> T:
        """Run a coroutine on the loop and wait for its result (never from the loop's own thread)."""
        return asyncio.run_coroutine_threadsafe(coroutine, self.loop).result(timeout)

    def spawn(self, coroutines: list[Coroutine]) -> list[asyncio.Task]:
        """Start coroutines as tasks of the loop; `cancel` ends them."""

        async def start() -> list[asyncio.Task]:
            return [asyncio.get_running_loop().create_task(c) for c in coroutines]

        return self.call(start())

    def cancel(self, tasks: list[asyncio.Task], timeout: float | None = None) -> None:
        """Cancel tasks and wait (up to `timeout`) until they have let go of their connections."""

        async def stop() -> None:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

        try:
            self.call(stop(), timeout)
        except TimeoutError:
            pass  # they end on the loop all the same


_hub: Hub | None = None
_hub_lock = threading.Lock()


def hub() -> Hub:
    """The process's hub, started on first use."""
    global _hub
    with _hub_lock:
        if _hub is None:
            _hub = Hub()
        return _hub


def _caused_by(error: BaseException, kind: type) -> bool:
    while error is not None:
        if isinstance(error, kind):
            return True
        error = error.__cause__ or error.__context__
    return False


def _transport(error: BaseException) -> ProviderError:
    """client.py's words for a request that got no HTTP answer."""
    if _caused_by(error, _AddressRefused):
        return ProviderError("AddressRefused", outbound.REFUSED)
    if _caused_by(error, ssl.SSLError):
        return transport_error(urllib3.exceptions.SSLError())
    return transport_error(urllib3.exceptions.HTTPError())


# What a request that got no (whole) answer raises: httpcore's errors, our own refusal, and anyio's for a
# peer gone mid-write (which httpcore's HTTP/2 write lets through unmapped).
_TRANSPORT = (
    httpcore.NetworkError,
    httpcore.TimeoutException,
    httpcore.ProtocolError,
    OSError,
    anyio.EndOfStream,
    anyio.BrokenResourceError,
    anyio.ClosedResourceError,
)
_TIMEOUTS = {"connect": TIMEOUT[0], "write": TIMEOUT[1], "pool": CALL_DEADLINE_S}


@contextlib.asynccontextmanager
async def _open(list_fn: Callable, read_s: float, params: dict[str, Any]) -> AsyncIterator[httpcore.Response]:
    """GET the request `list_fn(**params)` would send; a refusal raises its ProviderError."""
    built = request(list_fn, **params)
    pool = hub().pool(_method(list_fn)[0].__self__.api_client)
    async with pool.get(built.url, built.headers, read_s) as response:
        if response.status == 200:
            yield response
            return
        body = bytearray()
        async for chunk in response.chunks:
            body += chunk
            if len(body) >= ERROR_BODY_BYTES:
                break
    raise api_error(
        ApiException(
            status=response.status,
            reason=_REASONS.get(response.status, ""),
            body=bytes(body[:ERROR_BODY_BYTES]).decode("utf-8", "replace"),
        )
    )


async def get_json(list_fn: Callable, **params: Any) -> dict:
    """A list as the API's JSON, within CALL_DEADLINE_S (connect, answer and body); no retry here: the
    list-watch's backoff is the retry. A cluster runs LISTS_PER_CLUSTER at a time; the process reads at
    most LISTS_AT_ONCE bodies at a time, a slot taken once the answer has come, so clusters that never
    answer hold none of them."""
    pool = hub().pool(_method(list_fn)[0].__self__.api_client)
    try:
        async with pool.lists, asyncio.timeout(CALL_DEADLINE_S):
            async with _open(list_fn, TIMEOUT[1], params) as response, hub().lists:
                body = b"".join([chunk async for chunk in response.chunks])
    except TimeoutError:
        raise ProviderError("Timeout", "The API server did not answer in time.") from None
    except _TRANSPORT as error:
        raise _transport(error) from None
    if len(body) < PARSE_ON_LOOP_BYTES:
        return json.loads(body)
    return await asyncio.get_running_loop().run_in_executor(None, json.loads, body)


async def watch_events(list_fn: Callable, read_s: float, **params: Any) -> AsyncIterator[dict]:
    """The events of a watch, each a decoded line, until the server ends the stream. An ERROR event
    raises its Status as client.py would (410 Gone included); a read silent for `read_s` is cut off."""
    try:
        async with _open(list_fn, read_s, {**params, "watch": True}) as response:
            buffer = bytearray()
            async for chunk in response.chunks:
                buffer += chunk
                while (end := buffer.find(b"\n")) >= 0:
                    line = bytes(buffer[:end])
                    del buffer[: end + 1]
                    if line.strip():
                        yield _event(json.loads(line))
                if len(buffer) > MAX_LINE_BYTES:
                    raise ProviderError("WatchFailed", "A watch event was larger than NVKE accepts.")
    except http2.GoneAway:
        return  # the watch ends as if the server had ended it: the list-watch resumes at once
    except _TRANSPORT as error:
        raise _transport(error) from None


def _event(event: dict) -> dict:
    if event.get("type") == "ERROR":
        status = event.get("object") or {}
        raise api_error(
            ApiException(status=status.get("code"), reason=status.get("reason"), body=json.dumps(status))
        )
    return event
