"""Delivery end to end on real processes: channels made through the API, events inserted as
the evaluator inserts them, the deliverer (`python -m alerts.delivery`) as a child process, a
webhook receiver and an SMTP server (aiosmtpd) as separate processes on loopback.

Signed webhooks verified with the specification's own algorithm (standardwebhooks'
Webhook.verify); the all-clear; a failing endpoint disabled and its admins told by email; an
email channel; the SSRF guard at delivery.
"""

from __future__ import annotations

import json
import threading
import uuid
from pathlib import Path
from typing import Any

import psycopg
import pytest
from flask.testing import FlaskClient
from standardwebhooks.webhooks import Webhook, WebhookVerificationError

from alerts.delivery.service import CHANNEL, wait_for_notify
from testbed.receivers import Receiver, smtp_sink, webhook_receiver
from tests.support.delivery import (
    DelivererProcess,
    Org,
    insert_event,
    start_deliverer,
)
from tests.support.ingesting import wait_for


def _webhook(client: FlaskClient, org: Org, url: str, name: str = "hook") -> dict[str, Any]:
    r = client.post("/api/v2/channels", json={"name": name, "kind": "webhook", "url": url},
                    headers=org.auth)
    assert r.status_code == 201, r.get_json()
    return r.get_json()


def test_signed_webhook_arrives_and_verifies_then_the_all_clear(
        channels_client: FlaskClient, org: Org, conn: psycopg.Connection, database_url: str,
        tmp_path: Path, receivers: list[Receiver], deliverers: list[DelivererProcess]) -> None:
    hook = webhook_receiver(tmp_path)
    receivers.append(hook)
    channel = _webhook(channels_client, org, hook.url)
    secret = channel["secret"]
    assert secret.startswith("whsec_")
    start_deliverer(deliverers, tmp_path, database_url)

    firing = insert_event(conn, org.id, kind="firing")
    got = wait_for(lambda: hook.received(), 30, what="the firing webhook")
    first = got[0]
    payload = Webhook(secret).verify(first["body"], first["headers"])
    assert first["headers"]["webhook-id"] == str(firing)
    assert payload["type"] == "alert.firing"
    assert payload["data"]["id"] == str(firing)
    assert payload["data"]["device"] == "dev-1" and payload["data"]["value"] == -0.5
    # A wrong secret or a changed body does not verify: the check is real.
    with pytest.raises(WebhookVerificationError):
        Webhook("whsec_" + "A" * 44).verify(first["body"], first["headers"])
    with pytest.raises(WebhookVerificationError):
        Webhook(secret).verify(first["body"].replace("-0.5", "5.0"), first["headers"])

    resolved = insert_event(conn, org.id, kind="resolved", value=1.5)
    got = wait_for(lambda: [r for r in hook.received()
                            if r["headers"]["webhook-id"] == str(resolved)], 30,
                   what="the all-clear webhook")
    assert Webhook(secret).verify(got[0]["body"], got[0]["headers"])["type"] == "alert.resolved"

    def recorded() -> Any:  # the receiver logs the POST before it answers: wait for the commit
        conn.rollback()
        return conn.execute("SELECT state, attempts, last_status FROM alert_deliveries"
                            " WHERE event_id = %s AND state <> 'pending'", (resolved,)).fetchone()

    assert wait_for(recorded, 30, what="the delivery recorded") == ("delivered", 1, 200)


def test_failing_endpoint_is_disabled_and_the_admins_are_told(
        channels_client: FlaskClient, org: Org, conn: psycopg.Connection, database_url: str,
        tmp_path: Path, receivers: list[Receiver], deliverers: list[DelivererProcess]) -> None:
    broken = webhook_receiver(tmp_path, status=500)
    mail = smtp_sink(tmp_path)
    receivers += [broken, mail]
    channel = _webhook(channels_client, org, broken.url, "broken")
    start_deliverer(deliverers, tmp_path, database_url, channel_max_failures=3,
               smtp_host="127.0.0.1", smtp_port=mail.port, smtp_security="none",
               smtp_from="alerts@sds.example")
    event = insert_event(conn, org.id)

    def disabled() -> Any:
        conn.rollback()
        return conn.execute("SELECT disabled_at, disabled_reason, consecutive_failures"
                            " FROM alert_channels WHERE id = %s",
                            (channel["id"],)).fetchone()[0]

    wait_for(disabled, 60, what="the channel disabled")
    r = channels_client.get(f"/api/v2/channels/{channel['id']}", headers=org.auth).get_json()
    assert r["disabled_at"] and "3 failed deliveries in a row" in r["disabled_reason"]
    assert "HTTP 500" in r["disabled_reason"]
    assert len(broken.received()) == 3  # the same event, tried three times
    assert {x["headers"]["webhook-id"] for x in broken.received()} == {str(event)}
    notice = conn.execute("SELECT id, admins_only, title FROM alert_events"
                          " WHERE kind = 'channel_disabled' AND org_id = %s",
                          (org.id,)).fetchall()
    assert len(notice) == 1 and notice[0][1] is True and "broken" in notice[0][2]
    mails = wait_for(lambda: mail.received(), 30, what="the admins' email")
    assert mails[0]["rcpt_tos"] == [org.admin_email]
    assert "[CHANNEL DISABLED]" in mails[0]["data"] and str(notice[0][0]) in mails[0]["data"]
    # Disabled: it receives nothing, a test included (issue 33: its failure count climbed
    # 17 -> 46 on tests). A test queued just before it was disabled waits with the rest.
    before = len(broken.received())
    queued = insert_event(conn, org.id, kind="test", channels=[uuid.UUID(channel["id"])])
    insert_event(conn, org.id, device="dev-2")
    r = channels_client.post(f"/api/v2/channels/{channel['id']}/test", headers=org.auth)
    assert r.status_code == 409, r.get_json()
    assert "enable it first" in r.get_json()["message"]
    # A later event to a working channel shows the deliverer has passed over those two.
    hook = webhook_receiver(tmp_path)
    receivers.append(hook)
    _webhook(channels_client, org, hook.url, "working")
    last = insert_event(conn, org.id, device="dev-3")
    wait_for(lambda: any(x["headers"]["webhook-id"] == str(last) for x in hook.received()), 30,
             what="an event at the working channel")
    assert broken.received()[before:] == []
    assert conn.execute("SELECT consecutive_failures FROM alert_channels WHERE id = %s",
                        (channel["id"],)).fetchone()[0] == 3
    assert str(queued) not in {x["headers"]["webhook-id"] for x in hook.received()}


def test_email_channel_message_arrives_at_the_smtp_server(
        channels_client: FlaskClient, org: Org, conn: psycopg.Connection, database_url: str,
        tmp_path: Path, receivers: list[Receiver], deliverers: list[DelivererProcess]) -> None:
    mail = smtp_sink(tmp_path)
    receivers.append(mail)
    r = channels_client.post("/api/v2/channels", headers=org.auth, json={
        "name": "grower", "kind": "email", "recipients": ["grower@farm.example"]})
    assert r.status_code == 201, r.get_json()
    start_deliverer(deliverers, tmp_path, database_url, smtp_host="127.0.0.1", smtp_port=mail.port,
               smtp_security="none", smtp_from="alerts@sds.example")
    event = insert_event(conn, org.id, title="Frost: tair < 0 C for 15 min at dev-1")
    got = wait_for(lambda: mail.received(), 30, what="the email")
    assert got[0]["rcpt_tos"] == ["grower@farm.example"]
    assert got[0]["mail_from"] == "alerts@sds.example"
    text = got[0]["data"]
    assert "Subject: [ALERT] Frost: tair < 0 C for 15 min at dev-1" in text
    assert f"X-SDS-Event-Id: {event}" in text and f"Message-ID: <{event}@sds.example>" in text


def test_delivery_refuses_a_loopback_target_unless_allowed(
        channels_client: FlaskClient, org: Org, conn: psycopg.Connection, database_url: str,
        tmp_path: Path, receivers: list[Receiver], deliverers: list[DelivererProcess]) -> None:
    # The API allowed it (this app allows private targets), the deliverer does not: the check
    # at delivery holds on its own, on the address it would connect to.
    hook = webhook_receiver(tmp_path)
    receivers.append(hook)
    _webhook(channels_client, org, hook.url.replace("127.0.0.1", "localhost"))
    start_deliverer(deliverers, tmp_path, database_url, webhook_allow_private="false")
    event = insert_event(conn, org.id)

    def attempted() -> Any:
        conn.rollback()
        return conn.execute("SELECT last_error FROM alert_deliveries WHERE event_id = %s"
                            " AND attempts > 0", (event,)).fetchone()

    row = wait_for(attempted, 30, what="a refused attempt")
    assert "refused" in row[0] and "non-public" in row[0]
    assert hook.received() == []


def test_payload_is_the_standard_envelope(conn: psycopg.Connection, org: Org) -> None:
    from alerts.delivery.payload import envelope

    event = insert_event(conn, org.id)
    row = conn.execute("SELECT * FROM alert_events WHERE id = %s", (event,)).fetchone()
    cols = [d.name for d in conn.execute("SELECT * FROM alert_events LIMIT 0").description]
    doc = envelope(dict(zip(cols, row, strict=True)))
    assert set(doc) == {"type", "timestamp", "data"}
    assert doc["timestamp"].endswith("Z")
    json.dumps(doc)  # plain JSON


@pytest.mark.timeout(120)
def test_a_stop_ends_the_deliverers_wait_for_a_notify(database_url: str) -> None:
    """The deliverer's main loop waits for a NOTIFY up to its sweep interval; a stop (SIGTERM
    sets the event) ends that wait instead of the interval (here 10 minutes: before, the wait
    ran it out and this test timed out). No NOTIFY comes: the wait returns on the stop alone."""
    with psycopg.connect(database_url, autocommit=True) as listen:
        listen.execute(f"LISTEN {CHANNEL}")
        stop, waiting = threading.Event(), threading.Event()
        done = threading.Event()

        def wait() -> None:
            waiting.set()
            wait_for_notify(listen, 600.0, stop)
            done.set()

        threading.Thread(target=wait, daemon=True).start()
        waiting.wait(30)
        assert not done.wait(0.5), "returned before the stop, with no NOTIFY"
        stop.set()
        assert done.wait(60), "the stop did not end the wait"
