"""One API client per attached cluster, and the one place the client's errors become ProviderErrors.

Every request has a connect and a read timeout, and idempotent requests (reads, patches, deletes) are
retried with backoff on connection errors, 429 from API priority and fairness and 502/503/504. POSTs are
not retried here: an eviction's 429 is a PodDisruptionBudget's answer, which the caller reports."""

import json
from collections.abc import Callable
from typing import Any, TypeVar

import urllib3
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from nvke.providers.base import ClusterRef, ProviderError

TIMEOUT = (5, 20)  # seconds to connect, seconds to read a response
RETRIES = urllib3.Retry(
    total=3,
    backoff_factor=0.3,
    status_forcelist=(429, 502, 503, 504),
    allowed_methods=frozenset({"GET", "HEAD", "PUT", "PATCH", "DELETE"}),
    respect_retry_after_header=True,
    raise_on_status=False,  # the last answer reaches the caller as an ApiException with its Status
)

T = TypeVar("T")


def api_client(cluster: ClusterRef) -> client.ApiClient:
    """A client bound to the cluster's endpoint, token and CA bundle (the system's CAs when empty)."""
    config = client.Configuration(
        host=cluster.endpoint.rstrip("/"),
        api_key={"BearerToken": cluster.token},
        api_key_prefix={"BearerToken": "Bearer"},
        ca_cert_data=cluster.ca_bundle or None,
        retries=RETRIES,
    )
    return client.ApiClient(config)


def call(method: Callable[..., T], *args: Any, **kwargs: Any) -> T:
    """Call one client method with NVKE's timeout; its failure raises a ProviderError."""
    try:
        return method(*args, _request_timeout=TIMEOUT, **kwargs)
    except ApiException as error:
        raise api_error(error) from None
    except urllib3.exceptions.HTTPError as error:
        raise transport_error(error) from None


def read(method: Callable[..., Any], *args: Any, **kwargs: Any) -> dict:
    """A read as the API's own JSON (camelCase dicts, which the mapping code reads), skipping the
    client's models: building a model per object costs more than the request on a large list."""
    response = call(method, *args, _preload_content=False, **kwargs)
    try:
        return json.loads(response.data)
    finally:
        response.release_conn()


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
    if isinstance(cause, urllib3.exceptions.SSLError) or "CERTIFICATE_VERIFY_FAILED" in str(cause):
        return ProviderError(
            "TLSError",
            "The API server's certificate is not signed by the CA bundle given (TLS verification failed).",
        )
    return ProviderError("Unreachable", f"The API server did not answer: {cause}")
