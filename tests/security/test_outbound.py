"""The address policy of attach: loopback, private, link-local and metadata addresses are refused unless
the operator's allowlist admits them (the test settings admit 127.0.0.0/8, where the fake API servers
listen); the checks connect to the address approved; refusals never carry the remote server's words."""

import socket

import pytest
from kubernetes.client import CoreV1Api

from nvke import outbound
from nvke.providers.base import ClusterRef, ProviderError
from nvke.providers.kubernetes import client

pytestmark = pytest.mark.django_db(transaction=True)

ATTACH = "/api/v1/clusters/attach/"


def attach(api, server, endpoint: str | None = None):
    return api.post(
        ATTACH,
        {
            "name": "onprem",
            "endpoint": endpoint or server.url,
            "token": server.token,
            "ca_bundle": server.ca_bundle,
        },
    )


def test_the_default_policy_refuses_a_loopback_endpoint(api, gpu_cluster, settings):
    settings.NVKE_OUTBOUND_ALLOWED_NETWORKS = []
    response = attach(api, gpu_cluster)
    assert response.status_code == 400
    body = response.json()
    assert (body["code"], body["details"]["field"]) == ("address_refused", "endpoint")
    assert gpu_cluster.requests == [], "refused before any connection"


@pytest.mark.parametrize(
    "url",
    [
        "https://127.0.0.1:6443",
        "https://localhost:6443",
        "https://[::1]:6443",
        "https://[::ffff:127.0.0.1]:6443",
        "https://0.0.0.0:6443",
        "https://10.1.2.3:6443",
        "https://192.168.0.10",
        "https://172.16.5.5",
        "https://100.64.0.1",  # carrier-grade NAT (shared)
        "https://169.254.169.254/latest/meta-data",  # the cloud metadata service
        "https://[fd00:ec2::254]",  # AWS's IPv6 metadata address
        "https://[fe80::1]",
        "https://224.0.0.1",
        "https://no-such-host.invalid",
    ],
)
def test_addresses_nvke_may_not_call_are_refused_alike(settings, url):
    settings.NVKE_OUTBOUND_ALLOWED_NETWORKS = []
    with pytest.raises(outbound.AddressRefused) as refused:
        outbound.resolve(url)
    assert str(refused.value) == outbound.REFUSED, "one text: no DNS or range oracle"


@pytest.mark.parametrize(
    "url", ["http://203.0.113.9", "https://user:pw@203.0.113.9", "https://203.0.113.9/?x=1", "ftp://x"]
)
def test_only_plain_https_urls_are_taken(url):
    with pytest.raises(outbound.AddressRefused):
        outbound.resolve(url)


def test_a_public_address_passes_pinned_to_what_was_checked(settings):
    settings.NVKE_OUTBOUND_ALLOWED_NETWORKS = []
    target = outbound.resolve("https://8.8.8.8:6443/")
    assert (target.url, target.server_name) == ("https://8.8.8.8:6443", "8.8.8.8")


def test_the_allowlist_admits_a_name_and_the_checks_connect_to_its_address(api, gpu_cluster, settings):
    settings.NVKE_OUTBOUND_ALLOWED_NETWORKS = ["127.0.0.1/32"]
    response = attach(api, gpu_cluster, gpu_cluster.url.replace("127.0.0.1", "localhost"))
    assert response.status_code == 201, response.content[:300]


def test_a_refusal_never_carries_the_servers_words(api, gpu_cluster):
    gpu_cluster.faults.fail("GET", "^/version", 403, times=5, message="internal-secret-42")
    response = attach(api, gpu_cluster)
    assert response.status_code == 400
    assert "internal-secret" not in response.content.decode()
    assert response.json()["message"] == "The API server answered 403 (Forbidden)."


def test_a_name_re_pointed_after_attach_is_refused_on_its_next_connection(gpu_cluster, settings, monkeypatch):
    """The policy is checked on every new connection to a tenant's cluster, not at attach only: the
    name that passed is re-pointed at the metadata service and the next connection is refused, with
    nothing sent anywhere; pointed back, the same client works again."""
    settings.NVKE_OUTBOUND_ALLOWED_NETWORKS = ["127.0.0.1/32"]
    endpoint = gpu_cluster.url.replace("127.0.0.1", "localhost")  # the stand-in's certificate names it
    ref = ClusterRef("onprem", endpoint, gpu_cluster.token, gpu_cluster.ca_bundle)
    api = client.api_client(ref)
    nodes = CoreV1Api(api).list_node
    assert len(client.read(nodes)["items"]) == 3

    resolve = socket.getaddrinfo
    pointed = {"localhost": "169.254.169.254"}
    monkeypatch.setattr(
        outbound.socket,
        "getaddrinfo",
        lambda host, *args, **kw: resolve(pointed.get(host, host), *args, **kw),
    )
    api.rest_client.pool_manager.clear()  # the next call needs a new connection
    sent = len(gpu_cluster.requests)
    with pytest.raises(ProviderError) as refused:
        client.read(nodes)
    assert (refused.value.reason, refused.value.message) == ("AddressRefused", outbound.REFUSED)
    assert len(gpu_cluster.requests) == sent, "nothing sent"

    pointed["localhost"] = "127.0.0.1"
    assert len(client.read(nodes)["items"]) == 3
