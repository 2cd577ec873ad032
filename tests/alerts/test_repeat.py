"""The repeat interval (docs/alerts.md "Repeat interval"): a rule that stays firing is
announced again every `repeat_interval` seconds, by the real evaluator process's sweep; the
API validates the field; a rule without it is announced once."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any
from uuid import UUID

import psycopg
import pytest
from flask import Flask
from flask.testing import FlaskClient
from psycopg.types.json import Jsonb

from alerts.evaluator import repeats
from shared.config import Settings
from tests.support.alerting import EvaluatorProcess
from tests.support.apps import close_app, make_app
from tests.support.delivery import Org
from tests.support.ingesting import wait_for

RULE = {"name": "Frost", "table": "calibrated", "column": "tair",
        "scope": {"organisation": True}, "condition": {"op": "<", "threshold": 0}}

ORG_NAME = "farm-r"
"""The name of the test's organisation (the `org` fixture, tests/support/delivery.py)."""


@pytest.fixture
def client(database_url: str) -> Iterator[FlaskClient]:
    app: Flask = make_app(database_url)
    try:
        yield app.test_client()
    finally:
        close_app(app)


def _firing_since(conn: psycopg.Connection, org: Org, rule: str, device: str,
                  minutes: int) -> UUID:
    """A firing state of `rule` at `device` whose firing event was written `minutes` ago."""
    row = conn.execute(
        "INSERT INTO alert_events (org_id, kind, rule_id, device, column_name, value, unit, at,"
        " title, body, created_at) VALUES (%s, 'firing', %s, %s, 'tair', -1.5, 'C',"
        " now() - make_interval(mins => %s), %s, %s, now() - make_interval(mins => %s))"
        " RETURNING id", (org.id, rule, device, minutes, f"Frost at {device}",
                          Jsonb({"state": "firing"}), minutes)).fetchone()
    assert row is not None
    conn.execute("INSERT INTO alert_states (rule_id, device, org_id, status, since, value, at,"
                 " event_id) VALUES (%s, %s, %s, 'firing', now() - make_interval(mins => %s),"
                 " -1.5, now(), %s)", (rule, device, org.id, minutes, row[0]))
    conn.commit()
    return UUID(str(row[0]))


def _reminders(conn: psycopg.Connection, rule: str) -> list[tuple[Any, ...]]:
    conn.rollback()
    return conn.execute("SELECT device, title, body FROM alert_events WHERE rule_id = %s"
                        " AND body ? 'repeat' ORDER BY created_at", (rule,)).fetchall()


def test_repeat_interval_is_validated_and_shown(client: FlaskClient, org: Org) -> None:
    r = client.post("/api/v2/alerts", headers=org.auth, json=RULE | {"repeat_interval": 3600})
    assert r.status_code == 201 and r.get_json()["repeat_interval"] == 3600
    rid = r.get_json()["id"]
    for bad in (10, 8 * 86400, "1h", True, 300.5):
        r = client.patch(f"/api/v2/alerts/{rid}", headers=org.auth, json={"repeat_interval": bad})
        assert r.status_code == 400 and "repeat_interval" in r.get_json()["errors"]["json"], bad
    r = client.patch(f"/api/v2/alerts/{rid}", headers=org.auth, json={"repeat_interval": None})
    assert r.status_code == 200 and r.get_json()["repeat_interval"] is None
    r = client.post("/api/v2/alerts", headers=org.auth, json=RULE | {"name": "Plain"})
    assert r.get_json()["repeat_interval"] is None


def test_remind_once_per_interval(client: FlaskClient, org: Org,
                                  conn: psycopg.Connection) -> None:
    every = client.post("/api/v2/alerts", headers=org.auth,
                        json=RULE | {"repeat_interval": 600}).get_json()["id"]
    once = client.post("/api/v2/alerts", headers=org.auth,
                       json=RULE | {"name": "Once"}).get_json()["id"]
    first = _firing_since(conn, org, every, "dev-1", 15)
    _firing_since(conn, org, every, "dev-2", 5)  # not yet 10 minutes
    _firing_since(conn, org, once, "dev-1", 60)
    assert repeats.remind(conn) == 1
    conn.commit()
    assert repeats.remind(conn) == 0  # the next one is due 10 minutes after this one
    conn.commit()
    got = _reminders(conn, every)
    assert [(d, t) for d, t, _b in got] == [("dev-1", "Still firing: Frost at dev-1")]
    assert got[0][2]["repeat"] is True and got[0][2]["first_event"] == str(first)
    assert _reminders(conn, once) == []


def test_the_evaluator_sweep_sends_reminders(processes: Any, client: FlaskClient, org: Org,
                                             conn: psycopg.Connection, settings: Settings,
                                             tmp_path: Path) -> None:
    rule = client.post("/api/v2/alerts", headers=org.auth,
                       json=RULE | {"repeat_interval": 300}).get_json()["id"]
    _firing_since(conn, org, rule, "dev-1", 6)
    proc = EvaluatorProcess(settings.replace(alert_sweep_interval=0.5), tmp_path / "ev.log")
    try:
        proc.start()
        wait_for(lambda: _reminders(conn, rule), 60, what="the reminder")
        # The evaluator kept the state firing and noted the reminder.
        state = conn.execute("SELECT status, notified_at IS NOT NULL FROM alert_states"
                             " WHERE rule_id = %s", (rule,)).fetchone()
        assert state == ("firing", True)
    finally:
        assert proc.stop() == 0
    assert len(_reminders(conn, rule)) == 1
