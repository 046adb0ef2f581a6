"""One API client per attached cluster, and the one place the client's errors become ProviderErrors.

A tenant's cluster is somebody else's computer: every call has an overall deadline (CALL_DEADLINE_S,
retries and their waits included; a caller may narrow it for a group of calls with `deadline()`), each
attempt's read timeout is cut to what is left, and a body is read against the same clock, so an
endpoint that stalls or trickles bytes holds a worker for seconds, not hours. Idempotent requests
(reads, patches, deletes) are retried with a short backoff on connection errors, 429 from API priority
and fairness and 502/503/504, honouring Retry-After up to RETRY_AFTER_MAX_S (urllib3's own cap is six
hours). POSTs are not retried here: an eviction's 429 is a PodDisruptionBudget's answer, which the
caller reports. Redirects are never followed (a 3xx is an answer like any other error).

Every new connection checks the address policy again (nvke/outbound.py): the host is resolved, each
address it resolves to must be one NVKE may call, and the socket goes to the address checked (TLS still
verifies the name). A name that passed at attach and is re-pointed later (to 127.0.0.1, to the metadata
service) is refused with reason AddressRefused, before any byte is sent there."""

import contextlib
import contextvars
import json
import time
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

import urllib3
import urllib3.connection
import urllib3.connectionpool
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from nvke import outbound
from nvke.providers.base import ClusterRef, ProviderError

TIMEOUT = (5, 20)  # seconds to connect, seconds to read a response (at most: see the deadline)
CALL_DEADLINE_S = 30.0  # one call, retries and waits included
RETRY_AFTER_MAX_S = 3

# When the calls of this context must be done (time.monotonic()), or None outside `call`/`deadline`.
_deadline: contextvars.ContextVar[float | None] = contextvars.ContextVar("kube_deadline", default=None)


class AddressPolicyError(urllib3.exceptions.NewConnectionError):
    """The host resolved to an address the policy refuses: no connection was made."""


class _Checked:
    """A urllib3 connection that resolves its host and connects only to an address the policy admits."""

    def _new_conn(self):
        name = self._dns_host
        try:
            address = outbound.checked_address(name, self.port)
        except outbound.AddressRefused as refused:
            raise AddressPolicyError(self, str(refused)) from None
        self._dns_host = address  # what the socket connects to; TLS (server_hostname) keeps the name
        try:
            return super()._new_conn()
        finally:
            self._dns_host = name


class _CheckedHTTPS(_Checked, urllib3.connection.HTTPSConnection):
    pass


class _CheckedHTTP(_Checked, urllib3.connection.HTTPConnection):
    pass


class _CheckedHTTPSPool(urllib3.connectionpool.HTTPSConnectionPool):
    ConnectionCls = _CheckedHTTPS


class _CheckedHTTPPool(urllib3.connectionpool.HTTPConnectionPool):
    ConnectionCls = _CheckedHTTP


def checked(api: client.ApiClient) -> client.ApiClient:
    """The client, its new connections under the address policy. Every client of a tenant's cluster or
    of the management cluster is made through this."""
    api.rest_client.pool_manager.pool_classes_by_scheme = {
        "http": _CheckedHTTPPool,
        "https": _CheckedHTTPSPool,
    }
    return api


class DeadlineRetry(urllib3.Retry):
    """urllib3's Retry that gives up once the context's deadline is near: no retry, and no wait, past it."""

    def increment(self, method=None, url=None, response=None, error=None, _pool=None, _stacktrace=None):
        new = super().increment(method, url, response, error, _pool, _stacktrace)
        # A stalled read is retried only if a whole read timeout is left: the attempt's timeout was set
        # when the call began, so a later attempt could run past the deadline by that much.
        stalled = isinstance(error, urllib3.exceptions.ReadTimeoutError) and _remaining() < TIMEOUT[1]
        if stalled or isinstance(error, AddressPolicyError) or _remaining() <= 0:
            raise urllib3.exceptions.MaxRetryError(
                _pool, url, error or urllib3.exceptions.ResponseError("deadline")
            )
        return new

    def sleep(self, response=None) -> None:
        wanted = self.get_retry_after(response) if response and self.respect_retry_after_header else None
        wait = wanted if wanted is not None else self.get_backoff_time()
        time.sleep(max(0.0, min(wait, _remaining())))


RETRIES = DeadlineRetry(
    total=2,
    backoff_factor=0.3,
    backoff_max=2,
    redirect=False,  # a 3xx comes back as it is: never followed to an address the policy did not check
    status_forcelist=(429, 502, 503, 504),
    allowed_methods=frozenset({"GET", "HEAD", "PUT", "PATCH", "DELETE"}),
    respect_retry_after_header=True,
    retry_after_max=RETRY_AFTER_MAX_S,
    raise_on_status=False,  # the last answer reaches the caller as an ApiException with its Status
)

T = TypeVar("T")


def _remaining() -> float:
    """Seconds left before the context's deadline (infinite outside one)."""
    at = _deadline.get()
    return float("inf") if at is None else at - time.monotonic()


@contextlib.contextmanager
def deadline(seconds: float) -> Iterator[None]:
    """Every call inside ends within `seconds` from now (or the enclosing deadline, if sooner)."""
    at = time.monotonic() + seconds
    outer = _deadline.get()
    token = _deadline.set(at if outer is None else min(at, outer))
    try:
        yield
    finally:
        _deadline.reset(token)


def api_client(cluster: ClusterRef, server_name: str | None = None) -> client.ApiClient:
    """A client bound to the cluster's endpoint, token and CA bundle (the system's CAs when empty).
    With `server_name` the endpoint is an address already checked (nvke.outbound) and the certificate
    is checked for that name."""
    config = client.Configuration(
        host=cluster.endpoint.rstrip("/"),
        api_key={"BearerToken": cluster.token},
        api_key_prefix={"BearerToken": "Bearer"},
        ca_cert_data=cluster.ca_bundle or None,
        retries=RETRIES,
    )
    config.tls_server_name = server_name
    return checked(client.ApiClient(config))


def call(method: Callable[..., T], *args: Any, **kwargs: Any) -> T:
    """Call one client method within its deadline; its failure raises a ProviderError."""
    with deadline(CALL_DEADLINE_S):
        return _call(method, *args, **kwargs)


def _call(method: Callable[..., T], *args: Any, **kwargs: Any) -> T:
    left = _remaining()
    if left <= 0:
        raise _timed_out()
    try:
        return method(*args, _request_timeout=(min(TIMEOUT[0], left), min(TIMEOUT[1], left)), **kwargs)
    except ApiException as error:
        raise api_error(error) from None
    except urllib3.exceptions.HTTPError as error:
        raise _timed_out() if _remaining() <= 0 else transport_error(error) from None


def read(method: Callable[..., Any], *args: Any, **kwargs: Any) -> dict:
    """A read as the API's own JSON (camelCase dicts, which the mapping code reads), skipping the
    client's models: building a model per object costs more than the request on a large list. The body
    is read in what pieces arrive, against the call's deadline (a trickling server is cut off)."""
    with deadline(CALL_DEADLINE_S):
        response = _call(method, *args, _preload_content=False, **kwargs)
        done = False
        try:
            chunks = []
            while chunk := response.read1(256 * 1024):
                chunks.append(chunk)
                if _remaining() <= 0:
                    raise _timed_out()
            done = True
            return json.loads(b"".join(chunks))
        except urllib3.exceptions.HTTPError as error:
            raise transport_error(error) from None
        finally:
            if not done:  # a half-read connection must not go back to the pool
                response.close()
            response.release_conn()


def _timed_out() -> ProviderError:
    return ProviderError("Timeout", "The API server did not answer in time.")


def plain(api: client.ApiClient, obj: Any) -> Any:
    """A client model as the API's own JSON shape (camelCase dicts), which the mapping code reads."""
    return api.sanitize_for_serialization(obj)


REASONS = {
    400: "BadRequest",
    401: "Unauthorized",
    403: "Forbidden",
    404: "NotFound",
    409: "Conflict",
    410: "Expired",
    422: "Invalid",
    429: "TooManyRequests",
}


def status_of(error: ApiException) -> dict:
    """The Kubernetes Status an error carried, or {} when its body was not one."""
    try:
        body = json.loads(error.body or "")
    except ValueError:
        return {}
    return body if isinstance(body, dict) else {}


def api_error(error: ApiException) -> ProviderError:
    status = status_of(error)
    reason = REASONS.get(error.status or 0, "ServerError" if (error.status or 0) >= 500 else "ApiError")
    message = status.get("message") or f"{error.status} {error.reason}"
    if error.status == 401:
        message = "The API server refused the credentials (401 Unauthorized): the token is wrong or expired."
    return ProviderError(reason, message, status=error.status or 0)


def transport_error(error: urllib3.exceptions.HTTPError) -> ProviderError:
    """No HTTP answer: a certificate the CA bundle does not sign, or no server at the endpoint."""
    cause = getattr(error, "reason", None) or error
    if isinstance(cause, AddressPolicyError):
        return ProviderError("AddressRefused", outbound.REFUSED)
    if isinstance(cause, urllib3.exceptions.SSLError) or "CERTIFICATE_VERIFY_FAILED" in str(cause):
        return ProviderError(
            "TLSError",
            "The API server's certificate is not signed by the CA bundle given (TLS verification failed).",
        )
    # One text for refused, reset, timed out and unresolvable: the reason would tell a prober which
    # ports are open and which names resolve.
    return ProviderError("Unreachable", "The API server did not answer.")


def said(error: ProviderError) -> str:
    """What a failed check tells the tenant: NVKE's own words for an HTTP answer (401 has its own)."""
    if error.status and error.status != 401:
        return f"The API server answered {error.status} ({error.reason})."
    return error.message
