"""The client's address behind proxies: the right-most X-Forwarded-For hop that is not one of NVKE's
own proxies, never what a client wrote to the left of them."""

import pytest

from nvke.addresses import client_address, scope_address


@pytest.mark.parametrize(
    ("hops", "remote", "forwarded", "expected"),
    [
        (0, "10.0.0.1", "6.6.6.6", "10.0.0.1"),  # no proxy: the header is the client's own words
        (1, "10.0.0.1", None, "10.0.0.1"),
        (1, "10.0.0.1", "203.0.113.9", "203.0.113.9"),
        # The client wrote the first two; the one proxy appended the real peer.
        (1, "10.0.0.1", "6.6.6.6, 127.0.0.1, 203.0.113.9", "203.0.113.9"),
        (2, "10.0.0.1", "6.6.6.6, 203.0.113.9, 10.0.0.2", "203.0.113.9"),
        (2, "10.0.0.1", "203.0.113.9", "203.0.113.9"),  # fewer hops than proxies: the left-most
        (1, "10.0.0.1", "not-an-ip", "10.0.0.1"),  # garbage never becomes the address
        (1, "10.0.0.1", "2001:DB8::1", "2001:db8::1"),
    ],
)
def test_hop_count(settings, hops, remote, forwarded, expected):
    settings.NVKE_TRUST_PROXY = hops
    settings.NVKE_TRUSTED_PROXIES = []
    assert client_address(remote, forwarded) == expected


@pytest.mark.parametrize(
    ("remote", "forwarded", "expected"),
    [
        ("203.0.113.9", "6.6.6.6", "203.0.113.9"),  # not from a trusted proxy: the header is ignored
        ("10.0.0.1", "6.6.6.6, 203.0.113.9", "203.0.113.9"),
        ("10.0.0.1", "6.6.6.6, 203.0.113.9, 10.0.0.7", "203.0.113.9"),  # two of ours, skipped
        ("10.0.0.1", "10.0.0.8, 10.0.0.7", "10.0.0.8"),  # all ours: the left-most
        ("10.0.0.1", "6.6.6.6, junk, 10.0.0.7", "10.0.0.7"),  # the walk stops at garbage
        ("10.0.0.1", None, "10.0.0.1"),
    ],
)
def test_trusted_networks(settings, remote, forwarded, expected):
    settings.NVKE_TRUST_PROXY = 5  # the list takes precedence over a count
    settings.NVKE_TRUSTED_PROXIES = ["10.0.0.0/8"]
    assert client_address(remote, forwarded) == expected


def test_websocket_scope(settings):
    settings.NVKE_TRUST_PROXY = 1
    settings.NVKE_TRUSTED_PROXIES = []
    scope = {"client": ("10.0.0.1", 5555), "headers": [(b"x-forwarded-for", b"6.6.6.6, 203.0.113.9")]}
    assert scope_address(scope) == "203.0.113.9"
    assert scope_address({"client": None, "headers": []}) is None
