"""The daily digest (docs/alerts.md "Daily digest"): `/api/v2/digest` validated and audited,
and one email a day to the organisation's administrators through the real deliverer process
and an SMTP sink, listing the day's events, not counted as unread."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
from flask import Flask
from flask.testing import FlaskClient

from alerts.delivery import digests
from testbed.receivers import smtp_sink
from tests.support.apps import close_app, make_app
from tests.support.delivery import (
    DelivererProcess,
    Org,
    deliverer_env,
    insert_event,
    make_org,
)
from tests.support.ingesting import wait_for

ORG_NAME = "farm-d"
"""The name of the test's organisation (the `org` fixture, tests/support/delivery.py)."""


@pytest.fixture
def client(database_url: str) -> Iterator[FlaskClient]:
    app: Flask = make_app(database_url)
    try:
        yield app.test_client()
    finally:
        close_app(app)


def test_digest_setting_validated_and_audited(client: FlaskClient, org: Org,
                                              conn: psycopg.Connection) -> None:
    got = client.get("/api/v2/digest", headers=org.auth).get_json()
    assert got == {"active": False, "hour": 7, "time_zone": "UTC", "last_day": None}
    for body, field in (({"hour": 24}, "hour"), ({"time_zone": "Mars/Olympus"}, "time_zone"),
                        ({"hour": "7"}, "hour"), ({"last_day": "2026-01-01"}, "last_day"),
                        ({"colour": "red"}, "colour")):
        r = client.put("/api/v2/digest", headers=org.auth, json=body)
        assert r.status_code == 400 and field in r.get_json()["errors"]["json"], body
    r = client.put("/api/v2/digest", headers=org.auth,
                   json={"hour": 6, "time_zone": "Europe/Paris"})
    assert r.status_code == 200
    assert r.get_json() == {"active": True, "hour": 6, "time_zone": "Europe/Paris",
                            "last_day": None}
    r = client.put("/api/v2/digest", headers=org.auth, json={"active": False})
    assert r.get_json()["active"] is False and r.get_json()["hour"] == 6
    assert conn.execute("SELECT count(*) FROM audit_log WHERE org_id = %s"
                        " AND action = 'alert.digest'", (org.id,)).fetchone() == (2,)


def test_one_digest_email_a_day_to_the_administrators(
        processes: object, client: FlaskClient, org: Org, conn: psycopg.Connection,
        database_url: str, tmp_path: Path) -> None:
    mail = smtp_sink(tmp_path)
    proc = None
    try:
        insert_event(conn, org.id, title="Frost: tair < 0 C at dev-1")
        insert_event(conn, org.id, kind="resolved", title="Resolved: Frost at dev-1")
        other = make_org(conn, "farm-quiet")  # no digest asked for: none written
        insert_event(conn, other.id, title="Frost at elsewhere")
        # Hour 0 in UTC: due at once today.
        assert client.put("/api/v2/digest", headers=org.auth,
                          json={"hour": 0, "time_zone": "UTC"}).status_code == 200
        proc = DelivererProcess(deliverer_env(
            database_url, smtp_host="127.0.0.1", smtp_port=mail.port, smtp_security="none",
            smtp_from="alerts@sds.example"), tmp_path / "deliverer.log").start()
        got = wait_for(lambda: [m for m in mail.received() if "[DIGEST]" in m["data"]], 60,
                       what="the digest email")
        assert got[0]["rcpt_tos"] == [org.admin_email]
        text = got[0]["data"]
        assert "1 firing, 1 resolved" in text
        assert "firing: Frost: tair < 0 C at dev-1" in text
        assert "resolved: Resolved: Frost at dev-1" in text and "elsewhere" not in text
        conn.rollback()
        assert digests.write_due(conn) == 0  # today's is written: not again
        rows = conn.execute("SELECT org_id, acknowledged_at IS NOT NULL FROM alert_events"
                            " WHERE kind = 'digest'").fetchall()
        assert rows == [(org.id, True)]  # not unread in the inbox
        unread = client.get("/api/v2/notifications?acknowledged=false",
                            headers=org.auth).get_json()["total"]
        assert unread == 2
    finally:
        if proc is not None:
            proc.stop()
        mail.stop()
