"""The address policy of every URL NVKE calls on a tenant's behalf (an attached cluster's API endpoint,
a kubeconfig's server): the name is resolved once, every address it resolves to must be a public one —
not loopback, private, link-local (cloud metadata lives there), shared, reserved or multicast — unless
one of the operator's NVKE_OUTBOUND_ALLOWED_NETWORKS admits it, and the caller connects to the address
checked (the name stays the TLS server name), so a second resolution cannot point it elsewhere. Every
client NVKE makes for a tenant's cluster checks again on each new connection
(nvke/providers/kubernetes/client.py): a name re-pointed after attach is refused when it is next used.

A refusal says which rule refused, never what the name resolved to or whether it resolved at all."""

import ipaddress
import socket
from dataclasses import dataclass
from functools import lru_cache
from urllib.parse import urlsplit

from django.conf import settings

REFUSED = "The endpoint's address is not one NVKE may call (loopback, private and link-local are refused)."


class AddressRefused(ValueError):
    """The URL is not one NVKE may call; the message is safe to show."""


@dataclass(frozen=True)
class Target:
    url: str  # the URL with its host replaced by the address checked
    server_name: str  # the host as given: the TLS server name and certificate check


@lru_cache(maxsize=8)
def _allowed(spec: tuple[str, ...]) -> tuple[ipaddress.IPv4Network | ipaddress.IPv6Network, ...]:
    return tuple(ipaddress.ip_network(item, strict=False) for item in spec)


def allowed(address: str) -> bool:
    """Whether NVKE may connect to this IP address."""
    ip = ipaddress.ip_address(address)
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped:
        ip = ip.ipv4_mapped
    if any(ip in network for network in _allowed(tuple(settings.NVKE_OUTBOUND_ALLOWED_NETWORKS))):
        return True
    return ip.is_global and not ip.is_multicast


def checked_address(host: str, port: int) -> str:
    """An address of `host` NVKE may connect to, resolved now: AddressRefused when any address it
    resolves to is refused (a name with one public and one private address would be a coin toss)."""
    try:
        found = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except (ValueError, OSError, UnicodeError):
        raise AddressRefused(REFUSED) from None  # unresolvable reads as refused: no DNS oracle
    addresses = [info[4][0] for info in found]
    if not addresses or not all(allowed(address) for address in addresses):
        raise AddressRefused(REFUSED)
    return addresses[0]


def resolve(url: str) -> Target:
    """The https URL pinned to a checked address of its host; AddressRefused says why not."""
    parts = urlsplit(url)
    if parts.scheme != "https" or not parts.hostname:
        raise AddressRefused("The endpoint must be an https:// URL with a host.")
    if parts.username or parts.password or parts.query or parts.fragment:
        raise AddressRefused("The endpoint may not carry credentials, a query or a fragment.")
    try:
        port = parts.port or 443
    except ValueError:
        raise AddressRefused(REFUSED) from None
    address = checked_address(parts.hostname, port)
    host = f"[{address}]" if ":" in address else address
    return Target(url=f"https://{host}:{port}{parts.path.rstrip('/')}", server_name=parts.hostname)
