"""The client's address, for the audit log, sign-in lockouts and per-address rate limits.

Behind proxies, `X-Forwarded-For` is a list that each proxy appends its peer to; everything left of
what NVKE's own proxies wrote is whatever the client sent, so the client is the right-most hop that is
not one of those proxies. Two ways to say which they are (settings, read per call):

- `NVKE_TRUSTED_PROXIES`: their addresses or networks. The peer (`REMOTE_ADDR`) must be one of them for
  the header to be read at all; hops are then skipped from the right while they are trusted ones.
- otherwise `NVKE_TRUST_PROXY`: how many proxies stand in front (0: the header is ignored). The client
  is the hop that many places from the right, as Django REST framework's `NUM_PROXIES` takes it.

A hop that is not an IP address ends the walk: the address is then the last trusted one (a proxy's), so
garbage never reaches the audit log's address column or a rate-limit key."""

import ipaddress
from collections.abc import Iterable
from functools import lru_cache

from django.conf import settings

Network = ipaddress.IPv4Network | ipaddress.IPv6Network


def _ip(value: str) -> str | None:
    """The address in canonical form, or None when it is not one (ports and brackets are not taken)."""
    try:
        return str(ipaddress.ip_address(value.strip()))
    except ValueError:
        return None


@lru_cache(maxsize=8)
def _networks(spec: tuple[str, ...]) -> tuple[Network, ...]:
    return tuple(ipaddress.ip_network(item, strict=False) for item in spec)


def _trusted(address: str, networks: Iterable[Network]) -> bool:
    ip = ipaddress.ip_address(address)
    return any(ip in network for network in networks)


def client_address(remote_addr: str | None, forwarded_for: str | None) -> str | None:
    """The client's address from the peer's address and the X-Forwarded-For header (either may be
    missing), by the settings above."""
    peer = _ip(remote_addr or "")
    hops = [hop for hop in (forwarded_for or "").split(",") if hop.strip()]
    if settings.NVKE_TRUSTED_PROXIES:
        networks = _networks(tuple(settings.NVKE_TRUSTED_PROXIES))
        address = peer
        while address is not None and hops and _trusted(address, networks):
            hop = _ip(hops.pop())
            if hop is None:
                break
            address = hop
        return address
    count = settings.NVKE_TRUST_PROXY
    if count <= 0 or not hops:
        return peer
    # DRF's rule: the count-th hop from the right, or the left-most when fewer were sent.
    return _ip(hops[-min(count, len(hops))]) or peer


def request_address(request) -> str | None:
    """The client address of a Django (or DRF) request."""
    return client_address(request.META.get("REMOTE_ADDR"), request.META.get("HTTP_X_FORWARDED_FOR"))


def scope_address(scope: dict) -> str | None:
    """The client address of an ASGI (websocket) scope."""
    peer = (scope.get("client") or (None,))[0]
    forwarded = ",".join(
        value.decode("latin-1") for name, value in scope.get("headers", ()) if name == b"x-forwarded-for"
    )
    return client_address(peer, forwarded)
