"""pytest fixtures for the fake Kubernetes API server. A plugin module: tests/conftest.py names it in
pytest_plugins; tests/kubeapi/conftest.py imports it for this package's own tests."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from typing import TypeVar

import kubernetes
import pytest

from .server import FakeKubeApi

T = TypeVar("T")


def client_configuration(
    server: FakeKubeApi, *, token: str | None = None, ca_bundle: str | None = None
) -> kubernetes.client.Configuration:
    """How a cluster's endpoint, token and CA bundle configure the official client."""
    return kubernetes.client.Configuration(
        host=server.url,
        api_key={"authorization": f"Bearer {server.token if token is None else token}"},
        ca_cert_data=server.ca_bundle if ca_bundle is None else ca_bundle,
    )


def wait_until(check: Callable[[], T], timeout: float = 5.0, interval: float = 0.01) -> T:
    """Poll until check() returns something truthy, failing after timeout seconds."""
    deadline = time.monotonic() + timeout
    while not (result := check()):
        if time.monotonic() > deadline:
            raise AssertionError(f"condition not met within {timeout}s")
        time.sleep(interval)
    return result


@pytest.fixture
def kubeapi() -> Iterator[FakeKubeApi]:
    """A started FakeKubeApi, stopped after the test."""
    with FakeKubeApi() as server:
        yield server


@pytest.fixture
def kube_client(kubeapi: FakeKubeApi) -> Iterator[kubernetes.client.ApiClient]:
    """The official client, configured for `kubeapi` with its token and CA bundle."""
    with kubernetes.client.ApiClient(client_configuration(kubeapi)) as api_client:
        yield api_client
