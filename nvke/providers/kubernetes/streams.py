"""The process's one event loop for list-watches of every cluster it follows: one thread and one aiohttp
session (its connector's pool shared by all clusters), so the threads a process needs do not grow with
the clusters it watches. A watch still holds one connection while it is open (HTTP/1.1), a list one
while it runs (at most LISTS_AT_ONCE at a time, each within client.py's CALL_DEADLINE_S).

A request is the one the official client would send: its own method builds the path, query and
Authorization header against an ApiClient that hands the request back instead of sending it (`request`),
so a stream asks for exactly what the blocking client would and is authorized the same way. TLS is the
client configuration's (CA bundle, client certificate, server name); redirects are never followed.
Failures become the ProviderErrors client.py makes; a watch's lines are cut at MAX_LINE_BYTES."""

import asyncio
import atexit
import concurrent.futures
import functools
import ipaddress
import json
import socket
import ssl
import threading
import weakref
from collections.abc import AsyncIterator, Callable, Coroutine
from typing import Any, TypeVar
from urllib.parse import urlsplit

import aiohttp
import urllib3
import uvloop
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from nvke import outbound
from nvke.providers.base import ProviderError

from .client import CALL_DEADLINE_S, TIMEOUT, api_error, transport_error


class _AddressRefused(OSError):
    """The host resolved to an address the policy refuses (aiohttp wraps a resolver's OSError)."""


class _CheckedResolver(aiohttp.abc.AbstractResolver):
    """Names resolved as client.py's connections resolve them (nvke/outbound.py): to the address checked,
    or not at all, on every new connection, so a name re-pointed after attach is refused here too."""

    async def resolve(self, host: str, port: int = 0, family: int = socket.AF_INET) -> list[dict]:
        loop = asyncio.get_running_loop()
        try:
            address = await loop.run_in_executor(None, outbound.checked_address, host, port)
        except outbound.AddressRefused:
            raise _AddressRefused(outbound.REFUSED) from None
        family = socket.AF_INET6 if ":" in address else socket.AF_INET
        return [{"hostname": host, "host": address, "port": port, "family": family, "proto": 0, "flags": 0}]

    async def close(self) -> None:
        pass


def _admitted(url: str) -> bool:
    """Whether an endpoint given as an IP address may be called: aiohttp asks no resolver for one."""
    host = urlsplit(url).hostname or ""
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return True  # a name: the resolver checks it
    return outbound.allowed(host)


LISTS_AT_ONCE = 32  # lists in flight per process: a restart of many clusters queues, not floods
MAX_LINE_BYTES = 8 * 1024 * 1024  # one watch event (the API server stores objects up to ~1.5 MiB)
ERROR_BODY_BYTES = 64 * 1024  # of a refusal's Status, for its message
PARSE_ON_LOOP_BYTES = 1024 * 1024  # a larger list is decoded off the loop, which every stream shares

T = TypeVar("T")


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
def _tls(verify: bool, ca_data: str | None, ca_file: str | None, cert: str | None, key: str | None):
    """A TLS context per set of credentials, shared by the streams of a cluster (and their connections)."""
    if not verify:
        return False
    context = ssl.create_default_context(cafile=ca_file, cadata=ca_data)
    if cert:
        context.load_cert_chain(cert, key)
    return context


def tls_of(config: client.Configuration) -> tuple[ssl.SSLContext | bool, str | None]:
    """The TLS context and server name of a client configuration, as the blocking client uses them."""
    ca_data = config.ca_cert_data.decode() if isinstance(config.ca_cert_data, bytes) else config.ca_cert_data
    context = _tls(config.verify_ssl, ca_data, config.ssl_ca_cert, config.cert_file, config.key_file)
    return context, config.tls_server_name


class Hub:
    """The loop's thread, the shared session, and a way in from other threads (`call`)."""

    def __init__(self) -> None:
        # uvloop: asyncio's own TLS transport fills a 256 KiB read buffer per connection (sslproto's
        # max_size), 750 MiB resident at 3,000 streams; uvloop's is allocated, touched only as it fills.
        self.loop = uvloop.new_event_loop()
        # Name resolution (for an endpoint given by name) runs on the loop's default executor: two threads.
        self.loop.set_default_executor(
            concurrent.futures.ThreadPoolExecutor(2, thread_name_prefix="kube-resolve")
        )
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True, name="kube-watch-loop")
        self.thread.start()
        self.session, self.lists = self.call(self._open())
        atexit.register(self.close)

    def close(self) -> None:
        """Close the session's connections (at exit: the loop's thread is a daemon)."""
        try:
            self.call(self.session.close(), 2)
        except (TimeoutError, RuntimeError):
            pass

    async def _open(self) -> tuple[aiohttp.ClientSession, asyncio.Semaphore]:
        connector = aiohttp.TCPConnector(  # no DNS cache: every new connection's name is checked again
            limit=0, enable_cleanup_closed=True, resolver=_CheckedResolver(), use_dns_cache=False
        )
        return aiohttp.ClientSession(connector=connector, trust_env=False), asyncio.Semaphore(LISTS_AT_ONCE)

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


def _transport(error: BaseException) -> ProviderError:
    """client.py's words for a request that got no HTTP answer."""
    if isinstance(getattr(error, "os_error", error), _AddressRefused):
        return ProviderError("AddressRefused", outbound.REFUSED)
    if isinstance(error, aiohttp.ClientSSLError | ssl.SSLError):
        return transport_error(urllib3.exceptions.SSLError())
    return transport_error(urllib3.exceptions.HTTPError())


@functools.cache
def _timeouts(read_s: float) -> aiohttp.ClientTimeout:
    return aiohttp.ClientTimeout(total=None, connect=TIMEOUT[0], sock_read=read_s)


async def _open(list_fn: Callable, read_s: float, params: dict[str, Any]) -> aiohttp.ClientResponse:
    """GET the request `list_fn(**params)` would send; a refusal raises its ProviderError."""
    built = request(list_fn, **params)
    context, server_name = tls_of(_method(list_fn)[0].__self__.api_client.configuration)
    if not _admitted(built.url):
        raise ProviderError("AddressRefused", outbound.REFUSED)
    try:
        response = await hub().session.get(
            built.url,
            headers=built.headers,
            ssl=context,
            server_hostname=server_name,
            allow_redirects=False,
            timeout=_timeouts(read_s),
        )
        if response.status == 200:
            return response
        async with response:
            body = await response.content.read(ERROR_BODY_BYTES)
    except (aiohttp.ClientError, OSError, TimeoutError) as error:
        raise _transport(error) from None
    raise api_error(
        ApiException(status=response.status, reason=response.reason, body=body.decode("utf-8", "replace"))
    )


async def get_json(list_fn: Callable, **params: Any) -> dict:
    """A list as the API's JSON, within CALL_DEADLINE_S (connect, answer and body); no retry here: the
    list-watch's backoff is the retry."""
    async with hub().lists:
        try:
            async with asyncio.timeout(CALL_DEADLINE_S):
                async with await _open(list_fn, TIMEOUT[1], params) as response:
                    body = await response.read()
        except TimeoutError:
            raise ProviderError("Timeout", "The API server did not answer in time.") from None
        except (aiohttp.ClientError, OSError) as error:
            raise _transport(error) from None
    if len(body) < PARSE_ON_LOOP_BYTES:
        return json.loads(body)
    return await asyncio.get_running_loop().run_in_executor(None, json.loads, body)


async def watch_events(list_fn: Callable, read_s: float, **params: Any) -> AsyncIterator[dict]:
    """The events of a watch, each a decoded line, until the server ends the stream. An ERROR event
    raises its Status as client.py would (410 Gone included); a read silent for `read_s` is cut off."""
    try:
        async with await _open(list_fn, read_s, {**params, "watch": True}) as response:
            buffer = bytearray()
            async for chunk in response.content.iter_any():
                buffer += chunk
                while (end := buffer.find(b"\n")) >= 0:
                    line = bytes(buffer[:end])
                    del buffer[: end + 1]
                    if line.strip():
                        yield _event(json.loads(line))
                if len(buffer) > MAX_LINE_BYTES:
                    raise ProviderError("WatchFailed", "A watch event was larger than NVKE accepts.")
    except (aiohttp.ClientError, OSError, TimeoutError) as error:
        raise _transport(error) from None


def _event(event: dict) -> dict:
    if event.get("type") == "ERROR":
        status = event.get("object") or {}
        raise api_error(
            ApiException(status=status.get("code"), reason=status.get("reason"), body=json.dumps(status))
        )
    return event
