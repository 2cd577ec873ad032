"""Issue 33's inbox in-process: values in the signed-in user's units with the column's name,
durations for people, a link to the device chart at the event's moment with the threshold in
the same unit, bulk acknowledgement (ticked, all of a rule) through POST
/api/v2/notifications/ack with its bad input refused, "acknowledged by" shown and every
acknowledgement in the audit log. A viewer sees no acknowledge buttons."""

from __future__ import annotations

import base64
import re
from typing import Any
from uuid import UUID

import orjson
import psycopg
from flask.testing import FlaskClient

from people import accounts
from tests.support.dashboard import World, csrf_of, sign_in


def _auth(email: str, password: str) -> dict[str, str]:
    return {"Authorization": "Basic " + base64.b64encode(f"{email}:{password}".encode()).decode()}


USER = _auth("user@a.example", "user-a-password")
ADMIN = _auth("admin@a.example", "admin-a-password")
OTHER = _auth("user@b.example", "user-b-password")


def _text(response: Any) -> str:
    return str(response.get_data(as_text=True))


def _event(url: str, org: UUID, rule: dict[str, Any] | None, *, value: float, column: str,
           unit: str, at: str = "2026-03-07T04:15:00Z", device: str = "A1") -> str:
    with psycopg.connect(url) as conn:
        row = conn.execute(
            "INSERT INTO alert_events (org_id, kind, rule_id, device, column_name, value, unit,"
            " at, title, body) VALUES (%s, 'firing', %s, %s, %s, %s, %s, %s, %s, %s) RETURNING id",
            (org, rule["id"] if rule else None, device, column, value, unit, at,
             "raw title", orjson.dumps({"rule": rule} if rule else {}).decode())).fetchone()
    assert row is not None
    return str(row[0])


def _row(page: str, event_id: str) -> str:
    found = re.search(rf'<tr class="\w+" data-id="{event_id}".*?</tr>', page, re.S)
    assert found, page
    return found.group(0)


def _words(html: str) -> str:
    return re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", html)).strip()


def test_inbox_in_the_users_units_with_chart_links(client: FlaskClient, world: World) -> None:
    rule = client.post("/api/v2/alerts", headers=USER, json={
        "name": "Frost", "table": "calibrated", "column": "tair", "scope": {"device": "A1"},
        "condition": {"op": "<", "threshold": 0}, "for": 900,
        "clear": {"op": ">=", "threshold": 1}}).get_json()
    silent = client.post("/api/v2/alerts", headers=USER, json={
        "name": "Quiet", "kind": "silent", "scope": {"device": "A2"},
        "condition": {"threshold": 3}}).get_json()
    frost_id = _event(world.url, world.org_a, rule, value=-2.0, column="tair", unit="C")
    silent_id = _event(world.url, world.org_a, silent, value=15.22149005, column="silent",
                       unit="min", device="A2")
    # The user reads temperatures in °F (their preferences).
    assert client.patch("/api/v2/users/me", headers=USER,
                        json={"preferences": {"units": {"temp": "f"}}}).status_code == 200
    sign_in(client, "user@a.example")
    page = _text(client.get("/dashboard/notifications"))
    frost = _row(page, frost_id)
    assert "Air temperature: 28.4 °F" in _words(frost) and "Frost" in _words(frost)
    link = re.search(r'<a class="chart-link" href="([^"]+)"', frost)
    assert link, frost
    href = link.group(1).replace("&amp;", "&")
    assert href.startswith("/dashboard/devices/A1?")
    for part in ("table=calibrated", "cols=tair", "end=2026-03-07",
                 "at=2026-03-07T04%3A15%3A00Z", "temp=f", "threshold=32"):
        assert part in href.split("?")[1].split("&"), (part, href)
    assert client.get(href).status_code == 200
    assert "15 min" in _words(_row(page, silent_id))
    assert "15.22" not in _row(page, silent_id)
    assert 'id="unread"' in page


def test_bulk_acknowledge_audited_and_shown(client: FlaskClient, world: World) -> None:
    rule = client.post("/api/v2/alerts", headers=USER, json={
        "name": "Wind", "table": "calibrated", "column": "wind_speed",
        "scope": {"device": "A1"}, "condition": {"op": ">", "threshold": 5}}).get_json()
    ids = [_event(world.url, world.org_a, rule, value=6.0 + i, column="wind_speed",
                  unit="m/s") for i in range(5)]
    sign_in(client, "user@a.example")
    page = _text(client.get(f"/dashboard/notifications?rule={rule['id']}"))
    assert all(f'name="ids" value="{i}"' in page for i in ids)
    csrf = csrf_of(page)
    back = f"/dashboard/notifications?rule={rule['id']}"
    assert client.post("/dashboard/notifications/ack", data={"ids": ids[:2]}).status_code == 400
    assert client.post("/dashboard/notifications/ack",
                       data={"csrf": csrf, "back": back}).status_code == 400  # nothing ticked
    done = client.post("/dashboard/notifications/ack",
                       data={"csrf": csrf, "back": back, "ids": ids[:2]})
    assert done.status_code == 303 and done.headers["Location"].endswith(back)
    listed = client.get(f"/api/v2/notifications?rule={rule['id']}&acknowledged=false",
                        headers=USER).get_json()
    assert sorted(e["id"] for e in listed["items"]) == sorted(ids[2:])
    # "All of this rule" acknowledges the rest.
    assert client.post("/dashboard/notifications/ack", data={
        "csrf": csrf, "back": back, "rule": rule["id"]}).status_code == 303
    page = _text(client.get(back))
    for i in ids:
        assert "by user@a.example" in _words(_row(page, i))
        assert f'value="{i}"' not in page  # no tick box on an acknowledged event
    audit = client.get("/api/v2/audit?action=alert.acknowledge&limit=1000",
                       headers=ADMIN).get_json()["items"]
    assert {a["target"]["id"] for a in audit} >= set(ids)


def test_bulk_acknowledge_api_refuses_bad_input(client: FlaskClient, world: World) -> None:
    event = _event(world.url, world.org_a, None, value=1.0, column="tair", unit="C")
    for body in ({}, {"ids": []}, {"ids": ["nope"]}, {"ids": [event], "rule": event},
                 {"rule": 5}, {"rule": "nope"}, {"ids": "x"}, [event], {"ids": [1]},
                 {"ids": [event] * 501}):
        answer = client.post("/api/v2/notifications/ack", headers=USER, json=body)
        assert answer.status_code == 400 and answer.get_json()["message"], body
    # Another organisation's event is passed over, not acknowledged.
    theirs = client.post("/api/v2/notifications/ack", headers=OTHER, json={"ids": [event]})
    assert theirs.status_code == 200 and theirs.get_json()["acknowledged"] == 0
    with psycopg.connect(world.url) as conn:
        if not conn.execute("SELECT 1 FROM users WHERE email = 'viewer2@a.example'").fetchone():
            accounts.create_user(conn, org=world.org_a, email="viewer2@a.example",
                                 password="viewer-a-password", role="viewer")
    viewer = _auth("viewer2@a.example", "viewer-a-password")
    assert client.post("/api/v2/notifications/ack", headers=viewer,
                       json={"ids": [event]}).status_code == 403
    sign_in(client, "viewer2@a.example", "viewer-a-password")
    page = _text(client.get("/dashboard/notifications"))
    assert event in page and "button" not in _row(page, event) and 'name="ids"' not in page
    mine = client.application.test_client().post(
        "/api/v2/notifications/ack", headers=USER, json={"ids": [event, event]})
    assert mine.get_json() == {"acknowledged": 1, "ids": [event], "remaining": 0}
