"""Pure parts of delivery: the SSRF address rule, URL parsing, backoff with jitter, the
envelope, the signature against the specification's verifier, the IRI to URI mapping of
channel URLs, the stored form of a failure's reason, and the deliverer's watchdog rule."""

from __future__ import annotations

import email
import email.policy
import random
from datetime import UTC, datetime

import pytest
from standardwebhooks.webhooks import Webhook

from alerts.delivery import mail
from alerts.delivery.outbox import REASON_MAX, stored_reason
from alerts.delivery.payload import email_text, envelope, retry_delay
from alerts.delivery.service import FANOUT, cannot_work, failed_attempt
from alerts.delivery.webhook import signed_headers
from serve.api.channels import iri_to_uri
from shared import netguard
from shared.config import Settings


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


@pytest.mark.parametrize(("iri", "uri"), [
    ("http://8.8.8.8/\u00e9", "http://8.8.8.8/%C3%A9"),
    ("https://B\u00fccher.example:8443/\u00e4?q=\u00fc", "https://xn--bcher-kva.example:8443/%C3%A4?q=%C3%BC"),
    ("http://\u4f8b\u3002\u30c6\u30b9\u30c8/", "http://xn--fsq.xn--zckzah/"),
    ("http://[2606:4700::1111]/\u2603", "http://[2606:4700::1111]/%E2%98%83"),
    ("https://example.org/a%20b?x=1", "https://example.org/a%20b?x=1"),  # ASCII: unchanged
    ("http://h/ x\u00e9", "http://h/ x%C3%A9"),  # the space is left for netguard to refuse
])
def test_iri_to_uri(iri: str, uri: str) -> None:
    assert iri_to_uri(iri) == uri
    assert iri_to_uri(uri) == uri  # idempotent


@pytest.mark.parametrize("bad", ["http://" + "\u00fc" * 70 + ".de/", "http://\udc80.de/",
                                 "http://h\u00e9:\u0661\u0662/"])
def test_iri_to_uri_refuses(bad: str) -> None:
    with pytest.raises(ValueError):
        netguard.parse_url(iri_to_uri(bad))


def test_stored_reason_is_escaped_and_bounded() -> None:
    raw = "HTTP 500 Bad\x00Reason\x1b[31m \u0085 \udcff \\x00 caf\u00e9"
    assert stored_reason(raw) == ("HTTP 500 Bad\\x00Reason\\x1b[31m \\x85 \\udcff \\x5cx00 "
                                  "caf\u00e9")
    safe = stored_reason("\x00" * 10_000)
    assert len(safe) == REASON_MAX and safe.endswith("...")
    assert all(ord(c) >= 32 for c in safe)
    safe.encode("utf-8")  # what PostgreSQL text takes
    assert stored_reason("refused: host 'x' does not resolve") == (
        "refused: host 'x' does not resolve")
    try:
        "/\u00e9".encode("ascii")
    except UnicodeEncodeError as exc:
        assert failed_attempt(exc).error.startswith("error: UnicodeEncodeError: 'ascii' codec")
        assert failed_attempt(exc).ok is False


def test_cannot_work() -> None:
    workers = {"deliver-0": 100.0, "deliver-1": 50.0, FANOUT: 100.0}
    alive = {"deliver-0": True, "deliver-1": True}
    assert cannot_work(110.0, workers, alive, 30.0) is None
    # One worker long in an attempt is no reason while another completes rounds.
    assert cannot_work(125.0, workers, alive, 30.0) is None
    assert "no worker completed a round in 30 s" in cannot_work(131.0, workers, alive, 30.0)
    assert "deliver-1" in cannot_work(110.0, workers, {**alive, "deliver-1": False}, 30.0)
    late = {**workers, "deliver-0": 140.0}
    assert "fan-out" in cannot_work(140.0, late, alive, 30.0)


def test_email_says_the_event_in_words() -> None:
    """An email's subject and text name the column and the unit in the rule's own units
    (until issue 33: "[ALERT] Frost: tair < 32 F ..."); its JSON part keeps the machine
    fields, the stored title among them."""
    rule = {"id": "r", "name": "Frost", "kind": "threshold", "table": "calibrated",
            "column": "tair", "condition": {"op": "<", "threshold": 32.0}, "for": 900,
            "clear": {"op": ">=", "threshold": 33.8}, "clear_for": 0, "units": {"temp": "f"}}
    now = datetime(2026, 11, 25, 4, 15, tzinfo=UTC)
    event = {"id": "8f0e", "kind": "firing", "rule_id": "r", "device": "dev-1",
             "location_id": None, "column_name": "tair", "value": -0.4, "unit": "C", "at": now,
             "title": "Frost: tair < 32 F for 15 min at dev-1", "created_at": now,
             "body": {"rule": rule, "state": "firing"}}
    subject, text = email_text(event)
    assert subject == "[ALERT] Frost: Air temperature below 32 °F for 15 min at dev-1"
    # As a mail reader reads it: one space before the symbol, however long the subject.
    resolved = {**event, "kind": "resolved", "device": "a-device-with-a-long-name"}
    raw = mail.message(Settings(smtp_from="alerts@farm.example"), resolved,
                       ["g@farm.example"]).as_string()
    assert email.message_from_string(raw, policy=email.policy.default)["subject"] == (
        "[RESOLVED] Resolved: Frost: Air temperature at or above 33.8 °F at "
        "a-device-with-a-long-name")
    words, _, json_part = text.partition("The event as JSON:")
    assert words.splitlines()[:6] == [
        "Frost: Air temperature below 32 °F for 15 min at dev-1", "", "Kind: firing",
        "Device: dev-1", "Air temperature: 31.28 °F", "At: 2026-11-25 04:15 UTC"]
    assert "tair" not in words
    assert '"title": "Frost: tair < 32 F for 15 min at dev-1"' in json_part
    assert '"column": "tair"' in json_part and '"unit": "C"' in json_part
    # A silent device's rule, and a reminder: said too.
    silent = {**event, "column_name": None, "value": 45.0, "unit": "min",
              "title": "Still firing: Quiet: silent > 6 intervals at dev-1",
              "body": {"rule": {"name": "Quiet", "kind": "silent", "condition": {
                  "op": ">", "threshold": 6}, "clear": {"op": "<=", "threshold": 6},
                  "units": {}}, "repeat": True}}
    subject, text = email_text(silent)
    assert subject == "[ALERT] Still firing: Quiet: no reading for more than 30 min at dev-1"
    assert "Device silent: 45 min" in text
    # An event without a rule keeps its title.
    assert email_text({**event, "kind": "test", "body": {"test": True}, "column_name": None,
                       "value": None, "title": "Test of channel grower"})[0] == (
        "[TEST] Test of channel grower")
