"""Every call to a tenant's cluster ends within its deadline, whatever the endpoint does."""

from kubernetes import client as k8s

from nvke.providers.base import ClusterRef, ProviderError
from nvke.providers.kubernetes import client
from tests.security.hostile import HostileServer, elapsed


def ref(url: str) -> ClusterRef:
    return ClusterRef(name="hostile", endpoint=url, token="t", ca_bundle="", provider="kubernetes")


def version(url: str):
    api = client.api_client(ref(url))
    try:
        return client.call(k8s.VersionApi(api).get_code)
    finally:
        api.close()


def list_nodes(url: str) -> dict:
    api = client.api_client(ref(url))
    try:
        return client.read(k8s.CoreV1Api(api).list_node)
    finally:
        api.close()


def test_retry_after_of_six_hours_is_waited_seconds_not_hours():
    with HostileServer("retry_after") as server:
        took, outcome = elapsed(lambda: version(server.url))
    assert isinstance(outcome, ProviderError) and outcome.status == 503
    assert took < 2 * client.RETRY_AFTER_MAX_S + 2, f"held {took:.1f}s"
    assert server.requests == 3, "two retries, each after a capped wait"


def test_a_server_that_never_answers_is_given_up_at_the_deadline():
    with HostileServer("stall") as server, client.deadline(2):
        took, outcome = elapsed(lambda: version(server.url))
    assert isinstance(outcome, ProviderError) and outcome.reason == "Timeout"
    assert took < 3, f"held {took:.1f}s"


def test_a_trickled_body_is_cut_off_at_the_deadline():
    with HostileServer("trickle") as server, client.deadline(2):
        took, outcome = elapsed(lambda: list_nodes(server.url))
    assert isinstance(outcome, ProviderError) and outcome.reason == "Timeout"
    assert took < 3, f"held {took:.1f}s"


def test_the_default_deadline_bounds_a_stalled_call(monkeypatch):
    monkeypatch.setattr(client, "CALL_DEADLINE_S", 1.5)
    with HostileServer("stall") as server:
        took, outcome = elapsed(lambda: version(server.url))
    assert isinstance(outcome, ProviderError) and took < 2.5


def test_a_redirect_is_not_followed():
    with HostileServer("internal") as internal, HostileServer("redirect", internal.url) as server:
        _, outcome = elapsed(lambda: version(server.url))
    assert isinstance(outcome, ProviderError) and outcome.status == 302
    assert internal.requests == 0
    assert "internal-secret" not in outcome.message


def test_unreachable_says_nothing_of_why():
    """A closed port says only that nothing answered; a name that does not resolve reads as one the
    address policy refuses (each connection checks it, nvke/outbound.py), as it does at attach."""
    from nvke import outbound
    from tests.security.hostile import free_port

    _, refused = elapsed(lambda: version(f"http://127.0.0.1:{free_port()}"))
    _, unresolved = elapsed(lambda: version("http://no-such-host.invalid"))
    assert refused.message == "The API server did not answer."
    assert (unresolved.reason, unresolved.message) == ("AddressRefused", outbound.REFUSED)
