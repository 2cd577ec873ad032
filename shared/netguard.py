"""Where the service may send a request of a customer's choosing (webhooks): the SSRF guard.

A webhook URL is checked twice: when a channel is created or changed (the API) and on every
attempt (the deliverer), on the very addresses the connection is made to. The name is resolved
once per attempt and the socket connects to an address from that answer that passed the
check, so a name that resolves to a public address at creation and to 127.0.0.1 later (DNS
rebinding) is refused at the attempt. Refused unless SDS_WEBHOOK_ALLOW_PRIVATE: loopback,
private, link-local, shared (CGNAT), multicast, reserved and unspecified addresses, i.e.
everything `ipaddress` does not call global.

IPv6 forms that carry an IPv4 address reach that IPv4 host through a translator or tunnel, so
`ipaddress` calling the IPv6 address global says nothing (issue 30 item 6.3: `::127.0.0.1` and
`64:ff9b::169.254.169.254` passed). IPv4-mapped `::ffff:a.b.c.d` and the NAT64 well-known
prefix `64:ff9b::/96` (how an IPv6-only host reaches IPv4 webhooks) are judged by their
embedded IPv4 address; the forms no webhook needs are refused outright, whatever they embed:
IPv4-compatible `::a.b.c.d` (deprecated), IPv4-translated `::ffff:0:a.b.c.d`, the local-use
NAT64 prefix `64:ff9b:1::/48`, 6to4 `2002::/16` and Teredo `2001::/32`.
"""

from __future__ import annotations

import ipaddress
import socket
from dataclasses import dataclass
from urllib.parse import urlsplit

SCHEMES = {"http": 80, "https": 443}
URL_MAX = 2000


class Refused(ValueError):
    """A URL or address the service will not send to; the message says why."""


@dataclass(frozen=True, slots=True)
class Target:
    """A checked webhook URL, split for the connection."""

    scheme: str
    host: str
    port: int
    path: str  # path and query, as sent in the request line


# IPv6 ranges that embed an IPv4 address and are never a webhook's (the module docstring).
REFUSED_V6 = tuple(ipaddress.IPv6Network(n) for n in (
    "::/96",  # IPv4-compatible (also :: and ::1, refused anyway)
    "::ffff:0:0:0/96",  # IPv4-translated (SIIT)
    "64:ff9b:1::/48",  # NAT64 local use
    "2002::/16",  # 6to4
    "2001::/32",  # Teredo
))
NAT64 = ipaddress.IPv6Network("64:ff9b::/96")


def embedded_ipv4(ip: ipaddress.IPv6Address) -> ipaddress.IPv4Address | None:
    """The IPv4 address an IPv4-mapped or NAT64 (64:ff9b::/96) address reaches; else None."""
    if ip.ipv4_mapped is not None:
        return ip.ipv4_mapped
    if ip in NAT64:
        return ipaddress.IPv4Address(int(ip) & 0xFFFF_FFFF)
    return None


def is_public(address: str) -> bool:
    """True for a globally routable unicast address (IPv6 forms embedding IPv4: above)."""
    ip: ipaddress.IPv4Address | ipaddress.IPv6Address = ipaddress.ip_address(
        address.split("%", 1)[0])
    if isinstance(ip, ipaddress.IPv6Address):
        inner = embedded_ipv4(ip)
        if inner is not None:
            ip = inner
        elif any(ip in net for net in REFUSED_V6):
            return False
    return ip.is_global and not ip.is_multicast


def parse_url(url: str) -> Target:
    """The parts of an http(s) URL without credentials or fragment; Refused says what is wrong."""
    if not isinstance(url, str) or not url or len(url) > URL_MAX:
        raise Refused(f"must be an http or https URL of at most {URL_MAX} characters")
    if any(c.isspace() or ord(c) < 32 or ord(c) == 127 for c in url):
        raise Refused("must not contain spaces or control characters")
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError as exc:
        raise Refused(f"is not a valid URL ({exc})") from None
    scheme = parts.scheme.lower()
    if scheme not in SCHEMES:
        raise Refused("must start with http:// or https://")
    if parts.username is not None or parts.password is not None:
        raise Refused("must not carry a user name or password (the request is signed instead)")
    if parts.fragment:
        raise Refused("must not have a #fragment")
    host = (parts.hostname or "").rstrip(".")
    if not host:
        raise Refused("must name a host")
    path = parts.path or "/"
    if parts.query:
        path += "?" + parts.query
    return Target(scheme, host, port or SCHEMES[scheme], path)


def resolve(host: str, port: int) -> list[str]:
    """The addresses `host` resolves to (an address literal: itself); Refused when none."""
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except (OSError, UnicodeError) as exc:
        raise Refused(f"host {host!r} does not resolve ({exc})") from None
    found: list[str] = []
    for info in infos:
        addr = str(info[4][0])
        if addr not in found:
            found.append(addr)
    if not found:
        raise Refused(f"host {host!r} does not resolve")
    return found


def allowed_addresses(host: str, port: int, *, allow_private: bool) -> list[str]:
    """The resolved addresses of `host` the service may connect to, in resolver order.

    Refused when there is none: every address is non-public and private targets are not
    allowed. A name with public and non-public addresses is refused too (the non-public one
    would be a way around the check on a resolver that rotates answers)."""
    addresses = resolve(host, port)
    if allow_private:
        return addresses
    blocked = [a for a in addresses if not is_public(a)]
    if blocked:
        raise Refused(f"host {host!r} resolves to {blocked[0]}, a loopback, private, link-local "
                      "or otherwise non-public address (an operator may allow these with "
                      "SDS_WEBHOOK_ALLOW_PRIVATE)")
    return addresses


def check_url(url: str, *, allow_private: bool) -> Target:
    """A URL a webhook may have: well formed, and (unless allowed) resolving to public
    addresses only at this moment; Refused says why not."""
    target = parse_url(url)
    allowed_addresses(target.host, target.port, allow_private=allow_private)
    return target
