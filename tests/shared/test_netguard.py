"""The SSRF guard's judgement of IPv6 forms that embed an IPv4 address (issue 30 item 6.3):
each form with a loopback, private and metadata-service IPv4 address inside is refused; the
two forms judged by their IPv4 address (IPv4-mapped, NAT64 64:ff9b::/96) pass a public one."""

from __future__ import annotations

import ipaddress

import pytest

from shared import netguard

INSIDE = {"loopback": "127.0.0.1", "private": "10.1.2.3", "metadata": "169.254.169.254",
          "cgnat": "100.64.0.1"}


def _hex(v4: str) -> str:
    """'a.b.c.d' as two IPv6 groups."""
    n = int(ipaddress.IPv4Address(v4))
    return f"{n >> 16:x}:{n & 0xFFFF:x}"


def _teredo(v4: str) -> str:
    """A Teredo address whose client (obfuscated: bits inverted) is `v4`, server 65.54.227.120."""
    n = int(ipaddress.IPv4Address(v4)) ^ 0xFFFF_FFFF
    return f"2001:0:4136:e378:8000:63bf:{n >> 16:x}:{n & 0xFFFF:x}"


FORMS = {
    "ipv4-mapped": lambda v4: f"::ffff:{v4}",
    "ipv4-compatible": lambda v4: f"::{v4}",
    "ipv4-translated": lambda v4: f"::ffff:0:{v4}",
    "nat64": lambda v4: f"64:ff9b::{v4}",
    "nat64-local": lambda v4: f"64:ff9b:1::{_hex(v4)}",
    "6to4": lambda v4: f"2002:{_hex(v4)}::1",
    "teredo": _teredo,
}


@pytest.mark.parametrize("inside", list(INSIDE))
@pytest.mark.parametrize("form", list(FORMS))
def test_embedded_non_public_ipv4_is_refused(form: str, inside: str) -> None:
    address = FORMS[form](INSIDE[inside])
    assert not netguard.is_public(address), address
    with pytest.raises(netguard.Refused, match="non-public"):
        netguard.allowed_addresses(address, 80, allow_private=False)


@pytest.mark.parametrize(("form", "public"), [
    ("ipv4-mapped", True), ("nat64", True),  # judged by the IPv4 address they reach
    ("ipv4-compatible", False), ("ipv4-translated", False), ("nat64-local", False),
    ("6to4", False), ("teredo", False),  # refused whatever they embed
])
def test_embedded_public_ipv4(form: str, public: bool) -> None:
    assert netguard.is_public(FORMS[form]("8.8.8.8")) is public


def test_the_embedded_address_is_the_one_reached() -> None:
    assert netguard.embedded_ipv4(ipaddress.IPv6Address("64:ff9b::a9fe:a9fe")) == \
        ipaddress.IPv4Address("169.254.169.254")
    assert netguard.embedded_ipv4(ipaddress.IPv6Address("2606:4700::1111")) is None
    assert netguard.is_public("2606:4700::1111")
