"""Issue 33's silences in the inbox, in-process: "Silence 1 h" on an event silences its rule at
its device through POST /api/v2/silences (CSRF checked), the inbox lists it with Expire, which
ends it; bad input a 400; a viewer is shown neither button and the API refuses them."""

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


def _text(response: Any) -> str:
    return str(response.get_data(as_text=True))


def _event(url: str, org: UUID, rule: dict[str, Any], *, value: float, column: str,
           unit: str, device: str = "A1") -> str:
    with psycopg.connect(url) as conn:
        row = conn.execute(
            "INSERT INTO alert_events (org_id, kind, rule_id, device, column_name, value, unit,"
            " at, title, body) VALUES (%s, 'firing', %s, %s, %s, %s, %s, now(), 'raw title',"
            " %s) RETURNING id", (org, rule["id"], device, column, value, unit,
                                  orjson.dumps({"rule": rule}).decode())).fetchone()
    assert row is not None
    return str(row[0])


def _row(page: str, event_id: str) -> str:
    found = re.search(rf'<tr class="\w+" data-id="{event_id}".*?</tr>', page, re.S)
    assert found, page
    return found.group(0)


def _silences(page: str) -> list[str]:
    return re.findall(r'<li class="silence" data-id="([0-9a-f-]{36})">', page)


def test_silence_from_the_inbox_then_expire(client: FlaskClient, world: World) -> None:
    rule = client.post("/api/v2/alerts", headers=USER, json={
        "name": "Hush", "table": "calibrated", "column": "tair", "scope": {"device": "A1"},
        "condition": {"op": "<", "threshold": 0}}).get_json()
    event = _event(world.url, world.org_a, rule, value=-2.0, column="tair", unit="C")
    sign_in(client, "user@a.example")
    page = _text(client.get("/dashboard/notifications"))
    row = _row(page, event)
    value = f"{rule['id']} A1 3600"
    assert f'name="silence" value="{value}"' in row and "Silence 1 d" in row
    csrf = csrf_of(page)
    assert client.post("/dashboard/silences", data={"silence": value}).status_code == 400
    assert client.post("/dashboard/silences",
                       data={"csrf": csrf, "silence": f"{rule['id']} A1 5"}).status_code == 400
    done = client.post("/dashboard/silences", data={"csrf": csrf, "silence": value,
                                                    "back": "/dashboard/notifications"})
    assert done.status_code == 303
    made = [s for s in client.get(f"/api/v2/silences?rule={rule['id']}&active=true",
                                  headers=USER).get_json()["items"]]
    assert len(made) == 1 and made[0]["device"] == "A1" and made[0]["state"] == "active"
    page = _text(client.get("/dashboard/notifications"))
    assert made[0]["id"] in _silences(page)
    assert client.post(f"/dashboard/silences/{made[0]['id']}/expire",
                       data={"csrf": csrf}).status_code == 303
    assert client.get(f"/api/v2/silences/{made[0]['id']}",
                      headers=USER).get_json()["state"] == "expired"
    assert made[0]["id"] not in _silences(_text(client.get("/dashboard/notifications")))


def test_viewer_sees_no_silence_buttons(client: FlaskClient, world: World) -> None:
    rule = client.post("/api/v2/alerts", headers=USER, json={
        "name": "Hush2", "table": "calibrated", "column": "tair", "scope": {"device": "A1"},
        "condition": {"op": "<", "threshold": 0}}).get_json()
    event = _event(world.url, world.org_a, rule, value=-2.0, column="tair", unit="C")
    made: Any = client.post("/api/v2/silences", headers=USER,
                            json={"rule": rule["id"], "duration": 3600}).get_json()
    with psycopg.connect(world.url) as conn:
        if not conn.execute("SELECT 1 FROM users WHERE email = 'viewer3@a.example'").fetchone():
            accounts.create_user(conn, org=world.org_a, email="viewer3@a.example",
                                 password="viewer-a-password", role="viewer")
    viewer = _auth("viewer3@a.example", "viewer-a-password")
    assert client.post("/api/v2/silences", headers=viewer,
                       json={"rule": rule["id"], "duration": 3600}).status_code == 403
    sign_in(client, "viewer3@a.example", "viewer-a-password")
    page = _text(client.get("/dashboard/notifications"))
    assert 'name="silence"' not in _row(page, event)
    assert made["id"] in _silences(page) and 'class="expire"' not in page
