"""Webhook channel formats (Slack-compatible, Teams, Telegram, ntfy, PagerDuty): each rendered
body fits the shape its service documents (checked by testbed.service_receiver's own rules),
the API's validation of `format` and `options`, and delivery through the real deliverer process
to the service stand-in on loopback (no traffic leaves the machine), the receiver's answer kept
as the channel's `last_delivery`."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import psycopg
import pytest
from flask.testing import FlaskClient

from alerts.delivery import formats, payload
from testbed import service_receiver
from testbed.receivers import Receiver
from testbed.receivers import service_receiver as start_service_receiver
from tests.support.delivery import (
    DelivererProcess,
    Org,
    deliverer_env,
    insert_event,
)
from tests.support.ingesting import wait_for

TOKEN = "123456:ABC-DEF1234ghIkl-zyx57W2v1u123ew11"  # the form of Telegram's documented example
ROUTING_KEY = "R015ZUV3RLSR8UO9Q2UJ1XLAWZMGBHW3"  # 32 characters, as PagerDuty's keys are
# (format, path at the stand-in, options)
CASES = [
    ("slack", "/slack/services/T000/B000/XXXX", {}),
    ("teams", "/teams/workflows/abc", {}),
    ("telegram", f"/bot{TOKEN}/sendMessage", {"chat_id": "-1001234567890"}),
    ("ntfy", "/frost-alerts", {}),
    ("pagerduty", "/v2/enqueue", {"routing_key": ROUTING_KEY}),
]

ORG_NAME = "farm-f"
"""The name of the test's organisation (the `org` fixture, tests/support/delivery.py)."""


def _event(kind: str = "firing") -> dict[str, Any]:
    now = datetime(2026, 11, 25, 4, 15, tzinfo=UTC)
    return {"id": uuid.uuid4(), "kind": kind, "rule_id": uuid.uuid4(), "device": "dev-1",
            "location_id": None, "column_name": "tair", "value": -0.4, "unit": "C", "at": now,
            "title": "Frost: tair < 0 C for 15 min at dev-1", "created_at": now,
            "body": {"state": kind}}


def _service_path(url: str) -> str:
    return url.split("127.0.0.1:9", 1)[1] or "/"


@pytest.mark.parametrize(("fmt", "path", "options"), CASES)
@pytest.mark.parametrize("kind", ["firing", "resolved", "test"])
def test_each_format_fits_its_services_documented_shape(fmt: str, path: str,
                                                        options: dict[str, str],
                                                        kind: str) -> None:
    url, body = formats.render(fmt, "http://127.0.0.1:9" + path, options, _event(kind))
    target = _service_path(url)
    service = service_receiver.service_of(target)
    assert service == fmt
    doc = json.loads(body)
    assert service_receiver.problems_of(service, target, doc, "application/json") == []
    if (fmt, kind) != ("pagerduty", "resolved"):  # a resolve carries the dedup_key alone
        assert "Frost" in body.decode()


# A rule written in °F, as its record rides in an event's body.
RULE_F = {"id": "2b1c0000-0000-4000-8000-000000000001", "name": "Frost", "kind": "threshold",
          "table": "calibrated", "column": "tair", "scope": {"device": "dev-1"},
          "condition": {"op": "<", "threshold": 32.0}, "for": 900,
          "clear": {"op": ">=", "threshold": 33.8}, "clear_for": 0, "units": {"temp": "f"},
          "unit": "F"}
WORDS = {"firing": "Frost: Air temperature below 32 °F for 15 min at dev-1",
         "resolved": "Resolved: Frost: Air temperature at or above 33.8 °F at dev-1"}


def _human_text(fmt: str, doc: dict[str, Any]) -> str:
    """What a person reads of a format's message."""
    if fmt == "teams":
        card = doc["attachments"][0]["content"]["body"]
        return "\n".join([card[0]["text"]] + [f"{f['title']}: {f['value']}"
                                               for f in card[1]["facts"]])
    if fmt == "ntfy":
        return f"{doc['title']}\n{doc['message']}"
    if fmt == "pagerduty":
        return str(doc["payload"]["summary"])
    return str(doc["text"])


@pytest.mark.parametrize(("fmt", "path", "options"), CASES)
@pytest.mark.parametrize("kind", ["firing", "resolved"])
def test_titles_say_the_column_and_unit_in_words(fmt: str, path: str, options: dict[str, str],
                                                 kind: str) -> None:
    """The column's registry name and the unit's symbol in the rule's own units, where the
    stored title says "tair < 32 F" (until issue 33 every format carried it); the machine
    fields (PagerDuty's custom_details: the envelope's data) unchanged."""
    event = {**_event(kind), "title": "Frost: tair < 32 F for 15 min at dev-1",
             "body": {"rule": RULE_F, "state": kind}}
    if (fmt, kind) == ("pagerduty", "resolved"):  # a resolve carries the dedup_key alone
        return
    _url, body = formats.render(fmt, "http://127.0.0.1:9" + path, options, event)
    doc = json.loads(body)
    text = _human_text(fmt, doc)
    assert WORDS[kind] in text, text
    assert "tair" not in text and " F " not in text, text
    if fmt != "pagerduty":  # PagerDuty's summary is the title alone
        assert "Air temperature: 31.28 °F" in text, text  # -0.4 C in the rule's °F
        assert "Device: dev-1" in text and "At: 2026-11-25 04:15 UTC" in text
    if fmt == "pagerduty":
        details = doc["payload"]["custom_details"]
        assert details == json.loads(json.dumps(payload.envelope(event)["data"], default=str))
        assert (details["title"], details["column"], details["value"], details["unit"]) == (
            "Frost: tair < 32 F for 15 min at dev-1", "tair", -0.4, "C")


def test_the_standard_envelope_keeps_its_machine_fields() -> None:
    event = {**_event("firing"), "title": "Frost: tair < 32 F for 15 min at dev-1",
             "body": {"rule": RULE_F, "state": "firing"}}
    data = json.loads(payload.encode(event))["data"]
    assert (data["title"], data["column"], data["value"], data["unit"]) == (
        "Frost: tair < 32 F for 15 min at dev-1", "tair", -0.4, "C")


def test_the_stand_in_refuses_what_does_not_fit() -> None:
    # The checks are real: a generic envelope or a missing field is refused per service.
    generic = {"type": "alert.firing", "data": {}}
    for service, path in (("slack", "/slack/x"), ("teams", "/teams/x"),
                          ("telegram", f"/bot{TOKEN}/sendMessage"), ("ntfy", "/"),
                          ("pagerduty", "/v2/enqueue")):
        assert service_receiver.problems_of(service, path, generic, "application/json")
    _, body = formats.render("pagerduty", "http://h/v2/enqueue",
                             {"routing_key": ROUTING_KEY}, _event())
    doc = json.loads(body)
    del doc["payload"]["severity"]
    assert service_receiver.problems_of("pagerduty", "/v2/enqueue", doc, "application/json")


def test_pagerduty_resolves_what_it_triggered() -> None:
    fired = _event("firing")
    cleared = {**_event("resolved"), "rule_id": fired["rule_id"]}
    _, a = formats.render("pagerduty", "http://h/v2/enqueue", {"routing_key": ROUTING_KEY},
                          fired)
    _, b = formats.render("pagerduty", "http://h/v2/enqueue", {"routing_key": ROUTING_KEY},
                          cleared)
    first, second = json.loads(a), json.loads(b)
    assert (first["event_action"], second["event_action"]) == ("trigger", "resolve")
    assert first["dedup_key"] == second["dedup_key"]
    assert first["payload"]["severity"] == "warning"


# ---- the API -----------------------------------------------------------------------------


@pytest.mark.parametrize(("body", "field"), [
    ({"format": "sms"}, "format"),
    ({"format": "telegram", "url": f"http://127.0.0.1/bot{TOKEN}/sendMessage"}, "options"),
    ({"format": "telegram", "url": "http://127.0.0.1/other", "options": {"chat_id": "42"}},
     "url"),
    ({"format": "pagerduty", "url": "http://127.0.0.1/v2/enqueue",
      "options": {"routing_key": "short"}}, "options"),
    ({"format": "ntfy", "url": "http://127.0.0.1/bad topic!"}, "url"),
    ({"format": "slack", "url": "http://127.0.0.1/s", "options": {"chat_id": "1"}}, "options"),
    ({"options": {"routing_key": ROUTING_KEY}}, "options"),
])
def test_bad_format_or_options_is_a_400_naming_the_field(channels_client: FlaskClient, org: Org,
                                                         body: dict[str, Any],
                                                         field: str) -> None:
    full = {"name": "x", "kind": "webhook", "url": "http://127.0.0.1/hook", **body}
    r = channels_client.post("/api/v2/channels", headers=org.auth, json=full)
    assert r.status_code == 400, r.get_json()
    assert field in r.get_json()["errors"]["json"], r.get_json()
    r = channels_client.post("/api/v2/channels", headers=org.auth,
                    json={"name": "m", "kind": "mqtt", "format": "slack"})
    assert r.status_code == 400 and "format" in r.get_json()["errors"]["json"]


def test_a_format_channel_has_no_secret_and_the_standard_one_is_unchanged(
        channels_client: FlaskClient, org: Org) -> None:
    r = channels_client.post("/api/v2/channels", headers=org.auth, json={
        "name": "chat", "kind": "webhook", "format": "slack",
        "url": "http://127.0.0.1/slack/x"})
    assert r.status_code == 201, r.get_json()
    made = r.get_json()
    assert made["format"] == "slack" and "secret" not in made and "secret_hint" not in made
    plain = channels_client.post("/api/v2/channels", headers=org.auth, json={
        "name": "plain", "kind": "webhook", "url": "http://127.0.0.1/hook"}).get_json()
    assert plain["format"] == "standard" and plain["secret"].startswith("whsec_")
    r = channels_client.patch(f"/api/v2/channels/{made['id']}", headers=org.auth,
                     json={"options": {"chat_id": "1"}})
    assert r.status_code == 400 and "options" in r.get_json()["errors"]["json"]


def test_a_channels_format_can_be_changed(channels_client: FlaskClient, org: Org,
                                         conn: psycopg.Connection) -> None:
    """PATCH `format` (until issue 33 the format was fixed at creation): the new format's own
    fields are checked (a Telegram chat id, its sendMessage URL), the old format's options
    are dropped, a change to `standard` makes a new secret shown in that answer only, a
    change from it drops the secret; refused on a channel that is not a webhook."""
    made = channels_client.post("/api/v2/channels", headers=org.auth, json={
        "name": "chat", "kind": "webhook", "format": "slack",
        "url": "http://127.0.0.1/slack/x"}).get_json()
    path = f"/api/v2/channels/{made['id']}"
    telegram = f"http://127.0.0.1/bot{TOKEN}/sendMessage"
    for body, field in (({"format": "telegram", "url": telegram}, "options"),
                        ({"format": "telegram", "url": telegram,
                          "options": {"chat_id": "not a chat"}}, "options"),
                        ({"format": "telegram", "options": {"chat_id": "42"}}, "url"),
                        ({"format": "carrier-pigeon"}, "format")):
        r = channels_client.patch(path, headers=org.auth, json=body)
        assert r.status_code == 400 and field in r.get_json()["errors"]["json"], r.get_json()
    assert channels_client.get(path, headers=org.auth).get_json()["format"] == "slack"
    r = channels_client.patch(path, headers=org.auth, json={"format": "telegram", "url": telegram,
                                                   "options": {"chat_id": "-100123"}})
    assert r.status_code == 200, r.get_json()
    assert (r.get_json()["format"], r.get_json()["options"]) == ("telegram",
                                                                  {"chat_id": "-100123"})
    # To the signed envelope: a new secret, once; the Telegram option goes.
    r = channels_client.patch(path, headers=org.auth, json={"format": "standard",
                                                   "url": "http://127.0.0.1/hook"})
    assert r.status_code == 200, r.get_json()
    signed = r.get_json()
    assert signed["secret"].startswith("whsec_") and r.headers["Cache-Control"] == "no-store"
    assert signed["secret_hint"] == f"whsec_...{signed['secret'][-4:]}"
    assert "options" not in signed and "secret" not in channels_client.get(
        path, headers=org.auth).get_json()
    row = conn.execute("SELECT secret_sealed, options FROM alert_channels WHERE id = %s",
                       (made["id"],)).fetchone()
    assert row[0] is not None and row[1] == {}
    # And back to a service: the secret is dropped.
    r = channels_client.patch(path, headers=org.auth, json={"format": "ntfy",
                                                   "url": "http://127.0.0.1/frost"})
    assert r.status_code == 200 and "secret_hint" not in r.get_json()
    assert conn.execute("SELECT secret_sealed FROM alert_channels WHERE id = %s",
                        (made["id"],)).fetchone()[0] is None
    audit = channels_client.get("/api/v2/audit?limit=3", headers=org.auth).get_json()["items"]
    assert audit[0]["action"] == "channel.update" and audit[0]["details"]["format"] == "ntfy"
    mqtt = channels_client.post("/api/v2/channels", headers=org.auth,
                       json={"name": "m", "kind": "mqtt"}).get_json()
    r = channels_client.patch(f"/api/v2/channels/{mqtt['id']}", headers=org.auth,
                     json={"format": "slack"})
    assert r.status_code == 400 and "format" in r.get_json()["errors"]["json"]


# ---- delivery through the real deliverer ---------------------------------------------------


@pytest.fixture
def stand_in(tmp_path: Path, processes: None) -> Iterator[Receiver]:
    r = start_service_receiver(tmp_path)
    try:
        yield r
    finally:
        r.stop()


@pytest.fixture
def deliverer(database_url: str, tmp_path: Path, processes: None
              ) -> Iterator[DelivererProcess]:
    d = DelivererProcess(deliverer_env(database_url), tmp_path / "deliverer.log").start()
    try:
        yield d
    finally:
        d.stop()


def test_every_format_is_delivered_in_its_shape(
        channels_client: FlaskClient, org: Org, conn: psycopg.Connection, stand_in: Receiver,
        deliverer: DelivererProcess) -> None:
    base = f"http://127.0.0.1:{stand_in.port}"
    ids = {}
    for fmt, path, options in CASES:
        r = channels_client.post("/api/v2/channels", headers=org.auth, json={
            "name": fmt, "kind": "webhook", "format": fmt, "url": base + path,
            **({"options": options} if options else {})})
        assert r.status_code == 201, r.get_json()
        ids[fmt] = r.get_json()["id"]
    event = insert_event(conn, org.id)
    got = wait_for(lambda: (lambda seen: seen if len(seen) >= len(CASES) else None)(
        stand_in.received()), 60, what="one request per format")
    assert sorted(x["service"] for x in got) == sorted(f for f, _, _ in CASES)
    assert [x["problems"] for x in got] == [[] for _ in got]
    assert all("Frost" in x["body"] for x in got)
    assert all("webhook-signature" not in x["headers"] for x in got)

    def recorded() -> Any:
        channel = channels_client.get(f"/api/v2/channels/{ids['telegram']}",
                                      headers=org.auth).get_json()
        last = channel["last_delivery"]
        return last if last and last["state"] == "delivered" else None

    last = wait_for(recorded, 30, what="the delivery recorded")
    assert last["event_id"] == str(event) and last["status"] == 200
    assert last["answer"].startswith("HTTP 200 OK: ") and '"ok": true' in last["answer"]
