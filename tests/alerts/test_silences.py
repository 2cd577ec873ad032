"""Silences and quiet hours (docs/alerts.md "Silences and quiet hours"): `/api/v2/silences` on
a real database (create, list, expire, delete, audited; bad input a 400 naming the field;
viewers refused), the weekly window function on fixed instants, and the effect on delivery
through the real deliverer process and webhook receiver: a silenced or muted event is in the
inbox but reaches no channel, an event outside them is delivered."""

from __future__ import annotations

import base64
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

import psycopg
import pytest
from flask.testing import FlaskClient
from psycopg.types.json import Jsonb

from people import accounts
from testbed.receivers import Receiver, webhook_receiver
from tests.support.delivery import (
    PASSWORD,
    DelivererProcess,
    Org,
    deliverer_env,
    make_org,
)
from tests.support.ingesting import wait_for

RULE = {"name": "Frost", "table": "calibrated", "column": "tair",
        "scope": {"organisation": True}, "condition": {"op": "<", "threshold": 0}}


def _rule(channels_client: FlaskClient, org: Org, name: str) -> str:
    r = channels_client.post("/api/v2/alerts", headers=org.auth, json=RULE | {"name": name})
    assert r.status_code == 201, r.get_json()
    return str(r.get_json()["id"])


def _device(conn: psycopg.Connection, org: Org, name: str) -> None:
    conn.execute("INSERT INTO devices (name, org_id) VALUES (%s, %s)", (name, org.id))
    conn.commit()


def _event(conn: psycopg.Connection, org: Org, rule: str, device: str = "dev-1") -> uuid.UUID:
    """A firing event of `rule` as the evaluator writes it (committed); its id. Its
    created_at is now(): the start of a new transaction, not of one left open before."""
    conn.rollback()
    row = conn.execute(
        "INSERT INTO alert_events (org_id, kind, rule_id, device, column_name, value, unit, at,"
        " title, body) VALUES (%s, 'firing', %s, %s, 'tair', -0.5, 'C', now(), %s, %s)"
        " RETURNING id", (org.id, rule, device, f"Frost at {device}",
                          Jsonb({"state": "firing"}))).fetchone()
    conn.commit()
    assert row is not None
    return uuid.UUID(str(row[0]))


def test_silences_api_create_list_expire_delete_audited(
        channels_client: FlaskClient, org: Org, conn: psycopg.Connection) -> None:
    rule = _rule(channels_client, org, "Frost")
    _device(conn, org, "dev-1")
    r = channels_client.post("/api/v2/silences", headers=org.auth,
                    json={"rule": rule, "device": "dev-1", "duration": 3600,
                          "comment": "frost cloth on"})
    assert r.status_code == 201, r.get_json()
    made = r.get_json()
    assert made["kind"] == "silence" and made["state"] == "active"
    assert made["rule_id"] == rule and made["device"] == "dev-1"
    span = (datetime.fromisoformat(made["ends_at"].replace("Z", "+00:00"))
            - datetime.fromisoformat(made["starts_at"].replace("Z", "+00:00")))
    assert span == timedelta(hours=1)
    r = channels_client.post("/api/v2/silences", headers=org.auth,
                    json={"kind": "mute", "rule": rule, "weekdays": [1, 2, 3, 4, 5],
                          "from": "22:00", "to": "06:00", "time_zone": "Europe/Paris"})
    assert r.status_code == 201, r.get_json()
    mute = r.get_json()
    assert (mute["state"], mute["from"], mute["to"]) == ("recurring", "22:00", "06:00")

    listed = channels_client.get("/api/v2/silences?active=true", headers=org.auth).get_json()
    assert {s["id"] for s in listed["items"]} == {made["id"], mute["id"]}
    r = channels_client.post(f"/api/v2/silences/{made['id']}/expire", headers=org.auth)
    assert r.status_code == 200 and r.get_json()["state"] == "expired"
    listed = channels_client.get("/api/v2/silences?active=true", headers=org.auth).get_json()
    assert [s["id"] for s in listed["items"]] == [mute["id"]]
    assert channels_client.get("/api/v2/silences?active=false",
                      headers=org.auth).get_json()["total"] == 1
    r = channels_client.post(f"/api/v2/silences/{mute['id']}/expire", headers=org.auth)
    assert r.status_code == 400 and "DELETE" in r.get_json()["message"]
    assert channels_client.delete(f"/api/v2/silences/{mute['id']}",
                                  headers=org.auth).status_code == 204
    assert channels_client.get(f"/api/v2/silences/{mute['id']}",
                               headers=org.auth).status_code == 404
    actions = [a for (a,) in conn.execute(
        "SELECT action FROM audit_log WHERE org_id = %s AND action LIKE 'alert.silence%%'"
        " ORDER BY id", (org.id,)).fetchall()]
    assert actions == ["alert.silence", "alert.silence", "alert.silence_expire",
                       "alert.silence_delete"]


@pytest.mark.parametrize(("body", "field"), [
    ({"duration": 3600}, "rule"),                                      # matches nothing named
    ({"device": "nope", "duration": 3600}, "device"),                  # not the org's device
    ({"rule": str(uuid.uuid4()), "duration": 3600}, "rule"),           # not the org's rule
    ({"device": "dev-1"}, "ends_at"),                                  # no end
    ({"device": "dev-1", "duration": 10}, "duration"),                 # too short
    ({"device": "dev-1", "ends_at": "2001-01-01T00:00:00Z"}, "ends_at"),  # in the past
    ({"device": "dev-1", "duration": 3600, "weekdays": [1]}, "weekdays"),
    ({"kind": "mute", "weekdays": [1], "from": "22:00", "to": "06:00"}, "time_zone"),
    ({"kind": "mute", "weekdays": [8], "from": "22:00", "to": "06:00",
      "time_zone": "UTC"}, "weekdays"),
    ({"kind": "mute", "weekdays": [1], "from": "25:00", "to": "06:00",
      "time_zone": "UTC"}, "from"),
    ({"kind": "mute", "weekdays": [1], "from": "06:00", "to": "06:00",
      "time_zone": "UTC"}, "to"),
    ({"kind": "mute", "weekdays": [1], "from": "22:00", "to": "06:00",
      "time_zone": "Mars/Olympus"}, "time_zone"),
    ({"kind": "mute", "weekdays": [1], "from": "22:00", "to": "06:00", "time_zone": "UTC",
      "duration": 3600}, "duration"),
])
def test_bad_silences_are_a_400_naming_the_field(
        channels_client: FlaskClient, org: Org, conn: psycopg.Connection, body: dict[str, Any],
        field: str) -> None:
    _device(conn, org, "dev-1")
    r = channels_client.post("/api/v2/silences", headers=org.auth, json=body)
    assert r.status_code == 400, r.get_json()
    assert field in r.get_json()["errors"]["json"], r.get_json()
    assert conn.execute("SELECT count(*) FROM alert_silences").fetchone() == (0,)


def test_viewers_read_but_cannot_silence_and_other_orgs_see_nothing(
        channels_client: FlaskClient, org: Org, conn: psycopg.Connection) -> None:
    _device(conn, org, "dev-1")
    accounts.create_user(conn, org=org.id, email="viewer@farm-a.example", password=PASSWORD,
                         role="viewer")
    conn.commit()
    viewer = {"Authorization": "Basic " + base64.b64encode(
        f"viewer@farm-a.example:{PASSWORD}".encode()).decode()}
    r = channels_client.post("/api/v2/silences", headers=viewer, json={"device": "dev-1",
                                                              "duration": 3600})
    assert r.status_code == 403
    made = channels_client.post("/api/v2/silences", headers=org.auth,
                       json={"device": "dev-1", "duration": 3600}).get_json()
    assert channels_client.get("/api/v2/silences", headers=viewer).get_json()["total"] == 1
    assert channels_client.post(f"/api/v2/silences/{made['id']}/expire",
                       headers=viewer).status_code == 403
    other = make_org(conn, "farm-b")
    assert channels_client.get(f"/api/v2/silences/{made['id']}",
                               headers=other.auth).status_code == 404
    assert channels_client.get("/api/v2/silences", headers=other.auth).get_json()["total"] == 0
    # another organisation's device is the same 400 as a missing one
    r = channels_client.post("/api/v2/silences", headers=other.auth,
                    json={"device": "dev-1", "duration": 3600})
    assert r.status_code == 400 and "device" in r.get_json()["errors"]["json"]


@pytest.mark.parametrize(("local", "weekdays", "window", "inside"), [
    ("2026-11-30 23:30", [1], ("22:00", "06:00"), True),    # Monday night
    ("2026-12-01 05:59", [1], ("22:00", "06:00"), True),    # Tuesday early: Monday's window
    ("2026-12-01 06:00", [1], ("22:00", "06:00"), False),   # its end is not in it
    ("2026-11-30 05:00", [1], ("22:00", "06:00"), False),   # Monday early: Sunday's window
    ("2026-12-01 23:00", [1], ("22:00", "06:00"), False),   # Tuesday night: not chosen
    ("2026-11-29 12:00", [6, 7], ("00:00", "24:00"), True),  # all Sunday
    ("2026-03-29 03:30", [7], ("03:00", "04:00"), True),    # summer time
])
def test_weekly_window_in_the_zone(conn: psycopg.Connection, local: str, weekdays: list[int],
                                   window: tuple[str, str], inside: bool) -> None:
    zone = ZoneInfo("Europe/Paris")
    at = datetime.fromisoformat(local).replace(tzinfo=zone)
    # given in UTC: the function finds the local day and minute itself
    at = at.astimezone(UTC)
    start, end = (int(t[:2]) * 60 + int(t[3:]) for t in window)
    row = conn.execute("SELECT sds_in_weekly_window(%s, %s::smallint[], %s::smallint,"
                       " %s::smallint, 'Europe/Paris')",
                       (at, weekdays, start % 1440, end)).fetchone()
    assert row == (inside,)


def test_silenced_and_muted_events_are_recorded_but_not_delivered(
        processes: Any, channels_client: FlaskClient, org: Org, conn: psycopg.Connection,
        database_url: str, tmp_path: Path, receivers: list[Receiver],
        deliverers: list[DelivererProcess]) -> None:
    hook = webhook_receiver(tmp_path)
    receivers.append(hook)
    r = channels_client.post("/api/v2/channels", headers=org.auth,
                    json={"name": "hook", "kind": "webhook", "url": hook.url})
    assert r.status_code == 201, r.get_json()
    silenced_rule, muted_rule, loud_rule = (_rule(channels_client, org, n)
                                            for n in ("Frost", "Heat", "Wind"))
    _device(conn, org, "dev-1")
    silence = channels_client.post("/api/v2/silences", headers=org.auth,
                          json={"rule": silenced_rule, "device": "dev-1",
                                "duration": 3600}).get_json()
    # Quiet hours around now in Paris, every day: an hour either side (over midnight too).
    now = datetime.now(ZoneInfo("Europe/Paris"))
    start, end = now - timedelta(hours=1), now + timedelta(hours=1)
    r = channels_client.post("/api/v2/silences", headers=org.auth, json={
        "kind": "mute", "rule": muted_rule, "weekdays": [1, 2, 3, 4, 5, 6, 7],
        "from": start.strftime("%H:%M"), "to": end.strftime("%H:%M"),
        "time_zone": "Europe/Paris"})
    assert r.status_code == 201, r.get_json()
    mute = r.get_json()
    held = [_event(conn, org, silenced_rule), _event(conn, org, muted_rule)]
    other_device = _event(conn, org, silenced_rule, device="dev-2")  # the silence is dev-1's
    loud = _event(conn, org, loud_rule)
    deliverers.append(DelivererProcess(deliverer_env(database_url),
                                       tmp_path / "deliverer.log").start())

    ids = lambda: {x["headers"]["webhook-id"] for x in hook.received()}  # noqa: E731
    wait_for(lambda: {str(loud), str(other_device)} <= ids(), 30, what="the loud webhooks")

    def fanned() -> Any:
        conn.rollback()
        return conn.execute("SELECT event_id, silence_id FROM alert_event_fanout"
                            " WHERE event_id = ANY(%s)", (held + [loud],)).fetchall()

    marks = dict(wait_for(lambda: len(fanned()) == 3 and fanned(), 30, what="the fan-out"))
    assert marks[held[0]] == uuid.UUID(silence["id"])
    assert marks[held[1]] == uuid.UUID(mute["id"]) and marks[loud] is None
    assert conn.execute("SELECT count(*) FROM alert_deliveries WHERE event_id = ANY(%s)",
                        (held,)).fetchone() == (0,)
    # In the inbox all the same.
    listed = channels_client.get("/api/v2/notifications", headers=org.auth).get_json()
    assert {str(e) for e in held} <= {e["id"] for e in listed["items"]}
    # Expired, the rule's next event goes out again.
    assert channels_client.post(f"/api/v2/silences/{silence['id']}/expire",
                       headers=org.auth).status_code == 200
    after = _event(conn, org, silenced_rule)
    wait_for(lambda: str(after) in ids(), 30, what="the event after the silence expired")
    assert not {str(e) for e in held} & ids()
