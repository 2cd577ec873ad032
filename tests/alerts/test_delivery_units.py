"""Pure parts of delivery: the SSRF address rule, URL parsing, backoff with jitter, the
envelope, and the signature against the specification's verifier."""

from __future__ import annotations

import random
from datetime import UTC, datetime

import pytest
from standardwebhooks.webhooks import Webhook

from alerts.delivery.payload import envelope, retry_delay
from alerts.delivery.webhook import signed_headers
from shared import netguard


@pytest.mark.parametrize(("address", "public"), [
    ("8.8.8.8", True), ("93.184.215.14", True), ("2606:4700::1111", True),
    ("127.0.0.1", False), ("10.0.0.1", False), ("172.31.255.255", False),
    ("192.168.0.1", False), ("169.254.169.254", False), ("100.64.0.1", False),
    ("0.0.0.0", False), ("::1", False), ("fe80::1%eth0", False), ("fc00::1", False),
    ("::ffff:127.0.0.1", False), ("::ffff:8.8.8.8", True), ("224.0.0.251", False),
    ("255.255.255.255", False), ("198.18.0.1", False),
])
def test_public_addresses(address: str, public: bool) -> None:
    assert netguard.is_public(address) is public


def test_parse_url() -> None:
    t = netguard.parse_url("https://Example.org.:8443/a/b?x=1")
    assert (t.scheme, t.host, t.port, t.path) == ("https", "example.org", 8443, "/a/b?x=1")
    assert netguard.parse_url("http://h").path == "/"
    for bad in ("", "example.org", "file:///etc/passwd", "http://u@h/", "http:///x",
                "http://h/#f", "http://h:99999/", "http://h/ x", "gopher://h/"):
        with pytest.raises(netguard.Refused):
            netguard.parse_url(bad)


def test_allowed_addresses_refuses_loopback_names() -> None:
    with pytest.raises(netguard.Refused, match="non-public"):
        netguard.allowed_addresses("localhost", 80, allow_private=False)
    assert "127.0.0.1" in netguard.allowed_addresses("127.0.0.1", 80, allow_private=True)


def test_retry_delay_doubles_with_jitter_up_to_the_cap() -> None:
    rand = random.Random(7)
    for attempt in range(1, 20):
        ceiling = min(7200.0, 5.0 * 2 ** (attempt - 1))
        for _ in range(50):
            d = retry_delay(attempt, base=5.0, cap=7200.0, rand=rand)
            assert ceiling / 2 <= d <= ceiling
    # Spread: the same attempt does not always wait the same time.
    assert len({round(retry_delay(3, base=5.0, cap=7200.0, rand=rand), 3) for _ in range(20)}) > 1
    # The default schedule (15 attempts, 14 waits) spreads them over 4.4 to 8.8 hours.
    ceilings = sum(min(7200.0, 5.0 * 2 ** (a - 1)) for a in range(1, 15))
    assert 4 * 3600 < ceilings / 2 and ceilings < 9 * 3600


def test_signature_verifies_with_the_specification_verifier() -> None:
    secret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
    body = b'{"type":"alert.firing","data":{"id":"e1"}}'
    headers = signed_headers(secret, "e1", body, datetime.now(UTC))
    assert headers["webhook-signature"].startswith("v1,")
    assert Webhook(secret).verify(body, headers) == {"type": "alert.firing",
                                                     "data": {"id": "e1"}}


def test_envelope() -> None:
    t = datetime(2026, 11, 25, 4, 15, tzinfo=UTC)
    doc = envelope({"id": "e1", "kind": "resolved", "rule_id": None, "device": "d",
                    "location_id": None, "column_name": "tair", "value": 1.0, "unit": "C",
                    "at": t, "title": "T", "created_at": t, "body": {"rule": {"name": "F"}}})
    assert doc == {"type": "alert.resolved", "timestamp": "2026-11-25T04:15:00Z", "data": {
        "rule": {"name": "F"}, "id": "e1", "kind": "resolved", "rule_id": None, "device": "d",
        "location_id": None, "column": "tair", "value": 1.0, "unit": "C",
        "at": "2026-11-25T04:15:00Z", "title": "T", "created_at": "2026-11-25T04:15:00Z"}}
