"""The agents' ingestion route, served ahead of Django by the ASGI app (nvke/asgi.py): every GPU node
posts once a second, so this path skips the middleware, DRF and a thread per request. The checks are
ingest.check's (a bad batch: 4xx naming the field, nothing stored); checked batches wait for one
writer per process, which stores all that arrived meanwhile in one Redis round trip and then answers
each 202. While NVKE_TELEMETRY_INGEST_MAX_PENDING samples wait, a batch is refused with 503
`ingest_overloaded` and Retry-After before it is checked: an overloaded process spends little on it."""

import asyncio
import json
import logging
import random
from concurrent.futures import ThreadPoolExecutor

from asgiref.sync import sync_to_async
from django.conf import settings
from django.db import connections
from django.http.request import split_domain_port, validate_host

from nvke.errors import DomainError

from . import ingest, store

log = logging.getLogger(__name__)
PATH = "/api/v1/telemetry/ingest/"
MAX_BODY_BYTES = 4 << 20  # 10,000 samples (ingest.MAX_SAMPLES) of about 300 bytes
JSON = [(b"content-type", b"application/json")]


class TooLarge(DomainError):
    status = 413
    code = "too_large"


class Writer:
    """One per event loop: stores what waits in one write, one write at a time (its own thread, so a
    slow Redis never blocks the loop), counts rejections into the next write, and renews the node
    identities every IDENTITY_TTL_S in the same thread."""

    def __init__(self) -> None:
        self.loop = asyncio.get_running_loop()
        self.waiting: list[tuple[ingest.NodeIdentity, list[store.Sample], asyncio.Future]] = []
        self.pending_samples = 0
        self.counts: dict[str, int] = {}
        self.wake = asyncio.Event()
        self.thread = ThreadPoolExecutor(1, thread_name_prefix="ingest-writer")
        self.task = self.loop.create_task(self.run())

    def admit(self) -> None:
        """Refuse the next batch while as many samples wait as the process takes."""
        limit = settings.TELEMETRY_INGEST_MAX_PENDING
        if self.pending_samples >= limit:
            raise ingest.Overloaded(
                f"samples: {self.pending_samples} samples wait to be stored (at most {limit}); retry later.",
                field="samples",
            )

    def submit(self, identity: ingest.NodeIdentity, samples: list[store.Sample]) -> asyncio.Future:
        done = self.loop.create_future()
        self.waiting.append((identity, samples, done))
        self.pending_samples += len(samples)
        self.wake.set()
        return done

    def count(self, counts: dict[str, int]) -> None:
        for field, n in counts.items():
            self.counts[field] = self.counts.get(field, 0) + n
        self.wake.set()

    async def run(self) -> None:
        refresh_at = self.loop.time() + ingest.IDENTITY_TTL_S
        while True:
            try:
                await asyncio.wait_for(self.wake.wait(), max(0.0, refresh_at - self.loop.time()))
            except TimeoutError:
                pass
            if self.loop.time() >= refresh_at:
                refresh_at = self.loop.time() + ingest.IDENTITY_TTL_S
                await self.loop.run_in_executor(self.thread, refresh_identities)
            self.wake.clear()
            waiting, self.waiting = self.waiting, []
            counts, self.counts = self.counts, {}
            batches = [(identity, samples) for identity, samples, _ in waiting]
            try:
                if batches:
                    await self.loop.run_in_executor(self.thread, ingest.store_batches, batches, counts)
                elif counts:
                    await self.loop.run_in_executor(self.thread, store.count, counts)
            except (
                Exception
            ) as error:  # Redis down: every waiting batch gets the error, none is lost silently
                for _, _, done in waiting:
                    done.set_exception(error)
            else:
                for _, samples, done in waiting:
                    done.set_result(len(samples))
            finally:
                self.pending_samples -= sum(len(samples) for _, samples, _ in waiting)


class Intake:
    """POST PATH goes to the ingestion route; everything else to `app` (Django)."""

    def __init__(self, app) -> None:
        self.app = app
        self.writer: Writer | None = None

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] != "http" or scope["path"] != PATH or scope["method"] != "POST":
            return await self.app(scope, receive, send)
        status, body, headers = await self.answer(scope, receive)
        encoded = json.dumps(body).encode()
        headers = [*JSON, (b"content-length", str(len(encoded)).encode()), *headers]
        await send({"type": "http.response.start", "status": status, "headers": headers})
        await send({"type": "http.response.body", "body": encoded})

    async def answer(self, scope, receive) -> tuple[int, dict, list]:
        payload = None
        try:
            check_transport(scope)
            raw_token = ingest.node_token(dict(scope["headers"]).get(b"authorization", b"").decode("latin-1"))
            payload = await read_json(receive)
            writer = self.writer_for_this_loop()
            writer.admit()
            try:
                identity, samples = ingest.check(raw_token, payload, cached_only=True)
            except ingest.NeedsDatabase:
                identity, samples = await sync_to_async(ingest.check)(raw_token, payload)
            accepted = await writer.submit(identity, samples)
        except DomainError as error:
            self.writer_for_this_loop().count(ingest.rejected(error, payload))
            body = {"code": error.code, "message": error.message, "details": error.details}
            return error.status, body, retry_after(error)
        except Exception:  # the write failed (Redis): the agent keeps its batch and sends it again
            log.exception("ingestion failed")
            error = ingest.TelemetryUnavailable("Telemetry storage did not answer; retry later.")
            return 503, {"code": error.code, "message": error.message, "details": {}}, retry_after(error)
        return 202, {"accepted": accepted}, []

    def writer_for_this_loop(self) -> Writer:
        if self.writer is None or self.writer.loop is not asyncio.get_running_loop():
            self.writer = Writer()
        return self.writer


def refresh_identities() -> None:
    try:
        ingest.refresh_identities()
    except Exception:  # the database is away: the identities stay as they are until the next try
        log.exception("refreshing node identities failed")
    finally:
        connections.close_all()  # this thread's connection goes back to the pool between refreshes


def retry_after(error: DomainError) -> list[tuple[bytes, bytes]]:
    """Seconds, jittered so that the nodes refused together do not come back together."""
    if error.status != 503:
        return []
    return [(b"retry-after", str(random.randint(1, 3)).encode())]


def check_transport(scope) -> None:
    """What Django's middleware would refuse: a Host outside NVKE_ALLOWED_HOSTS, plain HTTP where
    NVKE_SECURE asks for HTTPS."""
    headers = dict(scope["headers"])
    host, _ = split_domain_port(headers.get(b"host", b"").decode("latin-1"))
    if not validate_host(host, settings.ALLOWED_HOSTS):
        raise DomainError(
            "Host: not one of this control plane's names.", field="host", code="disallowed_host"
        )
    if settings.SECURE_SSL_REDIRECT:
        forwarded = headers.get(b"x-forwarded-proto", b"").decode("latin-1")
        if scope.get("scheme") != "https" and not (settings.SECURE_PROXY_SSL_HEADER and forwarded == "https"):
            raise DomainError("Post telemetry over HTTPS.", field="url", code="https_required")


async def read_json(receive):
    chunks, size = [], 0
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            raise DomainError("body: the request ended early.", field="body")
        chunks.append(message.get("body", b""))
        size += len(chunks[-1])
        if size > MAX_BODY_BYTES:
            raise TooLarge(f"body: larger than {MAX_BODY_BYTES} bytes.", field="body")
        if not message.get("more_body"):
            break
    try:
        return json.loads(b"".join(chunks))
    except (ValueError, RecursionError):
        raise DomainError("body: expected a JSON object.", field="body", code="parse_error") from None
