"""The shared loop's requests (nvke/providers/kubernetes/streams.py) against a small HTTP/1.1 server of
the test's own, for what the stand-in does not do (redirects, oversized lines, ERROR events mid-stream),
and against the stand-in over HTTP/2."""

import json
import socket
import threading
import time

import pytest
from aiohttp import web
from kubernetes import client

from nvke.providers.base import ClusterRef, ProviderError
from nvke.providers.kubernetes import http2, streams
from nvke.providers.kubernetes.operations import KubernetesOperations
from nvke.providers.kubernetes.watch import ClusterWatch
from tests.kubeapi import objects
from tests.kubeapi.fixtures import client_configuration, wait_until


@pytest.fixture
def server():
    """server(handler) -> a CoreV1Api whose every request `handler` answers; the requests it got."""
    runners, seen = [], []

    def start(handler):
        async def record(request):
            seen.append(request.path_qs)
            return await handler(request)

        async def run():
            app = web.Application()
            app.router.add_route("GET", "/{tail:.*}", record)
            runner = web.AppRunner(app, access_log=None)
            await runner.setup()
            site = web.TCPSite(runner, "127.0.0.1", 0)
            await site.start()
            runners.append(runner)
            return runner.addresses[0][1]

        port = streams.hub().call(run())
        config = client.Configuration(host=f"http://127.0.0.1:{port}", api_key={"BearerToken": "Bearer t"})
        return client.CoreV1Api(client.ApiClient(config)), seen

    yield start
    for runner in runners:
        streams.hub().call(runner.cleanup())


def events(api, **params) -> list[dict]:
    async def read():
        return [event async for event in streams.watch_events(api.list_node, 5, **params)]

    return streams.hub().call(read(), 10)


def test_a_request_is_the_one_the_client_builds():
    api = client.CoreV1Api(client.ApiClient(client.Configuration(host="https://k.example:6443/prefix")))
    api.api_client.configuration.api_key = {"BearerToken": "Bearer secret"}
    built = streams.request(api.list_node, label_selector="a=b", watch=True)
    assert built.method == "GET"
    assert built.url == "https://k.example:6443/prefix/api/v1/nodes?labelSelector=a%3Db&watch=true"
    assert built.headers["authorization"] == "Bearer secret"


def test_events_come_line_by_line_and_an_error_event_is_its_status(server):
    async def handler(request):
        response = web.StreamResponse()
        await response.prepare(request)
        node = {"metadata": {"name": "n", "resourceVersion": "5"}}
        await response.write(json.dumps({"type": "ADDED", "object": node}).encode()[:10])
        await response.write(json.dumps({"type": "ADDED", "object": node}).encode()[10:] + b"\n\n")
        gone = {"kind": "Status", "code": 410, "reason": "Expired", "message": "too old resource version"}
        await response.write(json.dumps({"type": "ERROR", "object": gone}).encode() + b"\n")
        return response

    api, _ = server(handler)
    seen = []

    async def read():
        async for event in streams.watch_events(api.list_node, 5, resource_version="4"):
            seen.append(event)

    with pytest.raises(ProviderError) as error:
        streams.hub().call(read(), 10)
    assert [e["object"]["metadata"]["name"] for e in seen] == ["n"]
    assert (error.value.status, error.value.message) == (410, "too old resource version")


def test_a_line_longer_than_the_limit_ends_the_watch(server, monkeypatch):
    monkeypatch.setattr(streams, "MAX_LINE_BYTES", 1024)

    async def handler(request):
        response = web.StreamResponse()
        await response.prepare(request)
        for _ in range(10):
            await response.write(b"x" * 512)  # no newline: one line growing
        return response

    api, _ = server(handler)
    with pytest.raises(ProviderError) as error:
        events(api)
    assert error.value.reason == "WatchFailed"


def test_a_redirect_is_an_answer_never_followed(server):
    async def handler(request):
        if request.path == "/elsewhere":
            return web.json_response({"items": []})
        raise web.HTTPFound("/elsewhere")

    api, seen = server(handler)
    with pytest.raises(ProviderError) as error:
        streams.hub().call(streams.get_json(api.list_node), 10)
    assert error.value.status == 302 and "elsewhere" not in error.value.message
    assert seen == ["/api/v1/nodes"]


@pytest.mark.parametrize("host", ["127.0.0.1", "localhost"])
def test_the_address_policy_holds_for_streams_too(server, settings, host):
    async def handler(request):
        listed = {"kind": "NodeList", "metadata": {"resourceVersion": "1"}, "items": []}
        return web.json_response(listed, headers={"Connection": "close"})  # the next call connects anew

    api, seen = server(handler)
    api.api_client.configuration.host = api.api_client.configuration.host.replace("127.0.0.1", host)
    assert streams.hub().call(streams.get_json(api.list_node), 10)["kind"] == "NodeList"  # admitted
    settings.NVKE_OUTBOUND_ALLOWED_NETWORKS = []  # loopback refused, as in production
    with pytest.raises(ProviderError) as refused:
        streams.hub().call(streams.get_json(api.list_node), 10)
    assert refused.value.reason == "AddressRefused" and len(seen) == 1  # nothing more was sent


def test_an_event_on_any_of_a_clusters_watches_arrives_at_once(gpu_cluster):
    """A cluster's six watches share one HTTP/2 connection, and an event on one of them reaches its
    watch at once, not when the next frame of another stream happens to be read (as with httpcore's
    HTTP/2, where these events waited seconds: http2.py). No bookmarks here to move frames along."""
    kubeapi = gpu_cluster
    kubeapi.bookmark_interval = 3600
    seen: list[str] = []
    ref = ClusterRef(name="c", endpoint=kubeapi.url, token=kubeapi.token, ca_bundle=kubeapi.ca_bundle)
    watch = ClusterWatch(
        KubernetesOperations(ref),
        changed=lambda: seen.extend(watch.nodes),
        failed=lambda error: None,
        dra=True,
    ).start()
    try:
        wait_until(lambda: all(w.resource_version for w in watch.watches), timeout=10)
        assert len(watch.watches) == 6 and kubeapi.open_connections().get("h2") == 1
        for i in range(5):
            kubeapi.create(objects.gpu_node(f"gpu-{i}"))
            wait_until(lambda i=i: f"gpu-{i}" in seen, timeout=2)
    finally:
        watch.close(timeout=5)


def test_clusters_that_never_answer_hold_no_one_elses_lists(gpu_cluster, monkeypatch):
    """Eight clusters whose server accepts and never answers, six lists each (a watch's start): another
    cluster's list still comes at once. Each of them waits out its own connect timeout (raised here to
    20 s); the process's LISTS_AT_ONCE slots are taken only for reading an answer."""
    monkeypatch.setattr(streams, "TIMEOUT", (20, 20))
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen(128)  # the kernel completes the handshakes; nobody ever reads
        host, port = silent.getsockname()
        stalled = [
            client.CoreV1Api(client.ApiClient(client.Configuration(host=f"https://{host}:{port}")))
            for _ in range(8)
        ]
        waiting = streams.hub().spawn([streams.get_json(api.list_node) for api in stalled for _ in range(6)])
        healthy = client.CoreV1Api(client.ApiClient(client_configuration(gpu_cluster)))
        try:
            assert streams.hub().call(streams.get_json(healthy.list_node), 3)["kind"] == "NodeList"
            assert not any(task.done() for task in waiting), "the silent clusters' lists still wait"
        finally:
            streams.hub().cancel(waiting, 5)


def test_a_goaway_is_no_failure_the_watches_resume_on_a_new_connection(gpu_cluster):
    """kube-apiserver's --goaway-chance sends GOAWAY to move clients to another server: the cluster's
    watches carry on from their resourceVersion on a new connection, with no failure reported (which
    would mark the cluster unreachable) and no event lost."""
    kubeapi = gpu_cluster
    seen: list[str] = []
    failures: list[ProviderError] = []
    ref = ClusterRef(name="c", endpoint=kubeapi.url, token=kubeapi.token, ca_bundle=kubeapi.ca_bundle)
    watch = ClusterWatch(
        KubernetesOperations(ref), changed=lambda: seen.extend(watch.nodes), failed=failures.append, dra=True
    ).start()
    try:
        wait_until(lambda: all(w.resource_version for w in watch.watches), timeout=10)
        first = next(iter(kubeapi._server.multiplexed))
        kubeapi.goaway()
        kubeapi.create(objects.gpu_node("gpu-after"))  # while no watch is open, maybe: from its version
        wait_until(lambda: "gpu-after" in seen, timeout=5)
        wait_until(
            lambda: kubeapi._server.multiplexed and first not in kubeapi._server.multiplexed, timeout=5
        )
        assert failures == []
    finally:
        watch.close(timeout=5)


class Relay:
    """A TCP relay to a server that can go silent on the connections it has (a NAT or load balancer that
    forgot them: no FIN, no RST), while new connections pass."""

    def __init__(self, port: int):
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.target, self.silent, self.sockets = port, set(), []
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                near = self.listener.accept()[0]
            except OSError:
                return
            far = socket.create_connection(("127.0.0.1", self.target))
            self.sockets += [near, far]
            pair = (near, far)
            for source, sink in (pair, pair[::-1]):
                threading.Thread(target=self._pump, args=(pair, source, sink), daemon=True).start()

    def _pump(self, pair, source, sink) -> None:
        source.settimeout(0.05)
        while True:
            if pair in self.silent:
                time.sleep(0.05)  # nothing read, nothing passed on: the connection is just gone quiet
                continue
            try:
                data = source.recv(65536)
                if not data:
                    return
                if pair not in self.silent:  # read as it went silent: lost on the way
                    sink.sendall(data)
            except TimeoutError:
                continue
            except OSError:
                return

    def go_silent(self) -> None:
        self.silent.update(zip(self.sockets[::2], self.sockets[1::2], strict=True))

    def close(self) -> None:
        self.listener.close()
        for sock in self.sockets:
            sock.close()


def test_a_connection_gone_silent_is_found_by_ping_and_replaced(gpu_cluster, monkeypatch):
    """A connection lost without a FIN: the PING client-go's connections send after a silence (here
    after 0.5 s, answered within 0.5 s) finds it, and the watches carry on on a new one; without it they
    would wait out their own read timeout (70 s)."""
    monkeypatch.setattr(http2, "READ_IDLE_S", 0.5)
    monkeypatch.setattr(http2, "PING_TIMEOUT_S", 0.5)
    kubeapi = gpu_cluster
    relay = Relay(int(kubeapi.url.rsplit(":", 1)[1]))
    seen: list[str] = []
    endpoint = f"https://127.0.0.1:{relay.port}"
    ref = ClusterRef(name="c", endpoint=endpoint, token=kubeapi.token, ca_bundle=kubeapi.ca_bundle)
    watch = ClusterWatch(
        KubernetesOperations(ref), changed=lambda: seen.extend(watch.nodes), failed=lambda e: None, dra=True
    ).start()
    try:
        wait_until(lambda: all(w.resource_version for w in watch.watches), timeout=10)
        relay.go_silent()
        kubeapi.create(objects.gpu_node("gpu-after"))
        wait_until(lambda: "gpu-after" in seen, timeout=10)
    finally:
        watch.close(timeout=5)
        relay.close()
