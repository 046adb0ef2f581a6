"""HTTP/2 as kube-apiserver serves it (tests/kubeapi/http2.py), driven by a bare h2 client: the settings
it announces, requests multiplexed on one connection, a watch ended by the client's RST_STREAM, and the
official client (which offers only HTTP/1.1) unchanged."""

import json
import socket
import ssl
import threading
import time

import h2.config
import h2.connection
import h2.errors
import h2.events
import h2.settings
from kubernetes import client

from tests.kubeapi import http2, objects
from tests.kubeapi.fixtures import client_configuration, wait_until


class Client:
    """A bare HTTP/2 client: one TLS connection, frames read as they come."""

    def __init__(self, server):
        context = ssl.create_default_context(cadata=server.ca_bundle)
        context.set_alpn_protocols(["h2", "http/1.1"])
        host, port = server.url.removeprefix("https://").split(":")
        self.sock = context.wrap_socket(socket.create_connection((host, int(port))), server_hostname=host)
        assert self.sock.selected_alpn_protocol() == "h2"
        self.sock.settimeout(10)
        self.h2 = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True))
        self.h2.initiate_connection()
        self.token = server.token
        self.events: list = []
        self._flush()

    def _flush(self) -> None:
        self.sock.sendall(self.h2.data_to_send())

    def get(self, path: str) -> int:
        stream_id = self.h2.get_next_available_stream_id()
        headers = [
            (":method", "GET"),
            (":scheme", "https"),
            (":authority", "kubernetes"),
            (":path", path),
            ("authorization", f"Bearer {self.token}"),
        ]
        self.h2.send_headers(stream_id, headers, end_stream=True)
        self._flush()
        return stream_id

    def read_until(self, done, timeout: float = 10) -> None:
        deadline = time.monotonic() + timeout
        while not done():
            assert time.monotonic() < deadline, "the server did not answer in time"
            for event in self.h2.receive_data(self.sock.recv(65536)):
                self.events.append(event)
                if isinstance(event, h2.events.DataReceived):
                    self.h2.acknowledge_received_data(event.flow_controlled_length, event.stream_id)
            self._flush()

    def body(self, stream_id: int) -> bytes:
        return b"".join(
            e.data for e in self.events if isinstance(e, h2.events.DataReceived) and e.stream_id == stream_id
        )

    def ended(self, stream_id: int) -> bool:
        return any(isinstance(e, h2.events.StreamEnded) and e.stream_id == stream_id for e in self.events)


def test_the_server_announces_kube_apiservers_http2_settings(kubeapi):
    h2_client = Client(kubeapi)
    settings = lambda: [e for e in h2_client.events if isinstance(e, h2.events.RemoteSettingsChanged)]  # noqa: E731
    h2_client.read_until(
        lambda: any(h2.settings.SettingCodes.MAX_FRAME_SIZE in s.changed_settings for s in settings())
    )
    announced = {code: s.new_value for e in settings() for code, s in e.changed_settings.items()}
    assert announced[h2.settings.SettingCodes.MAX_CONCURRENT_STREAMS] == 100
    assert announced[h2.settings.SettingCodes.MAX_FRAME_SIZE] == 256 * 1024


def test_requests_share_one_connection_and_a_reset_ends_a_watch(kubeapi):
    kubeapi.create(objects.gpu_node("gpu-0"))
    h2_client = Client(kubeapi)
    watch = h2_client.get("/api/v1/nodes?watch=true&timeoutSeconds=30")
    listed = h2_client.get("/api/v1/nodes")
    h2_client.read_until(lambda: h2_client.ended(listed) and b"\n" in h2_client.body(watch))
    assert [n["metadata"]["name"] for n in json.loads(h2_client.body(listed))["items"]] == ["gpu-0"]
    assert json.loads(h2_client.body(watch).splitlines()[0])["type"] == "ADDED"
    assert kubeapi.open_connections() == {"h2": 1}
    # The client gives the watch up: the server's stream ends, the connection stays.
    h2_client.h2.reset_stream(watch, h2.errors.ErrorCodes.CANCEL)
    h2_client._flush()
    serving = lambda: {t.name for t in threading.enumerate()}  # noqa: E731
    port = kubeapi.url.rsplit(":", 1)[1]
    assert f"{http2.THREAD_PREFIX}{port}-{watch}" in serving()
    wait_until(lambda: f"{http2.THREAD_PREFIX}{port}-{watch}" not in serving(), timeout=5)
    assert kubeapi.open_connections() == {"h2": 1}
    again = h2_client.get("/api/v1/nodes")  # the connection still serves
    h2_client.read_until(lambda: h2_client.ended(again))


def test_an_idle_connection_is_closed_with_a_goaway(kubeapi, monkeypatch):
    monkeypatch.setattr(http2, "IDLE_S", 0.5)
    h2_client = Client(kubeapi)
    h2_client.read_until(lambda: any(isinstance(e, h2.events.ConnectionTerminated) for e in h2_client.events))
    wait_until(lambda: not kubeapi.open_connections(), timeout=5)


def test_the_official_client_still_speaks_http_1_1(kubeapi):
    with client.ApiClient(client_configuration(kubeapi)) as api_client:
        client.CoreV1Api(api_client).list_node()
        assert kubeapi.open_connections() == {"http/1.1": 1}
