"""The audit log (shared/audit.py, GET /api/v2/audit): changes made through the API are
written with who, how, from where and what; failed changes write nothing; administrators read
their organisation's entries only; the API role cannot rewrite the log; old entries go."""

from __future__ import annotations

from typing import Any

import psycopg
import pytest
from flask.testing import FlaskClient
from psycopg_pool import ConnectionPool

from aggregate import jobs
from shared import audit
from shared.config import Settings
from tests.support.access_world import World, apikey, basic

A1 = basic("a1@a.example")
A2 = basic("a2@a.example")
B1 = basic("b1@b.example")


pytestmark = pytest.mark.usefixtures("admins")  # tests/support/access_world.py


def _entries(client: FlaskClient, headers: dict[str, str], query: str = "") -> dict[str, Any]:
    r = client.get(f"/api/v2/audit?{query or 'limit=1000'}", headers=headers)
    assert r.status_code == 200, r.get_json()
    return r.get_json()


def test_api_changes_are_logged_with_actor_address_and_details(
        client: FlaskClient, world: World) -> None:
    made = client.post("/api/v2/apikeys", headers=A1,
                       json={"scopes": ["data:read"], "name": "logger"}).get_json()
    assert client.put(f"/api/v2/apikeys/{made['id']}", headers=A1,
                      json={"active": False}).status_code == 200
    assert client.delete(f"/api/v2/apikeys/{made['id']}", headers=A1).status_code == 204
    assert client.patch(f"/api/v2/locations/{world.loc_a}", headers=A1,
                        json={"crop": "maize", "elev": 300}).status_code == 200

    page = _entries(client, A1)
    actions = [e["action"] for e in page["items"]]
    # Newest first.
    assert actions[:4] == ["location.update", "apikey.delete", "apikey.update", "apikey.create"]
    create = page["items"][3]
    assert create["actor"] == {"label": "a1@a.example", "user_id": str(world.a1),
                               "key_id": None, "via": "basic", "address": "127.0.0.1"}
    assert create["target"] == {"type": "apikey", "id": made["id"]}
    assert create["details"] == {"name": "logger", "scopes": ["data:read"]}
    assert made["apikey"] not in str(page)  # never the key value
    assert page["items"][2]["details"] == {"active": False}
    loc = page["items"][0]
    assert loc["target"] == {"type": "location", "id": str(world.loc_a)}
    assert loc["details"]["changed"] == ["crop", "elev"]
    assert loc["details"]["rollup_buckets_marked"] > 0  # the world has readings there


def test_a_change_made_with_a_key_names_the_key(client: FlaskClient, world: World) -> None:
    key = client.post("/api/v2/apikeys", headers=A1,
                      json={"scopes": ["locations:write", "orgs:read"]}).get_json()
    r = client.patch(f"/api/v2/locations/{world.loc_a}", headers=apikey(key["apikey"]),
                     json={"notes": "written by a script"})
    assert r.status_code == 200
    (entry,) = _entries(client, apikey(key["apikey"]),
                        "action=location.update&limit=1")["items"]
    assert entry["actor"]["via"] == "apikey" and entry["actor"]["key_id"] == key["id"]


def test_failed_changes_write_nothing(client: FlaskClient, world: World) -> None:
    before = _entries(client, A1)["total"]
    assert client.patch(f"/api/v2/locations/{world.loc_a}", headers=A1,
                        json={"kc": 9}).status_code == 400
    assert client.patch(f"/api/v2/locations/{world.loc_a}", headers=A2,
                        json={"crop": "rye"}).status_code == 403
    assert client.patch(f"/api/v2/locations/{world.loc_b}", headers=A1,
                        json={"crop": "rye"}).status_code == 404
    assert client.post("/api/v2/apikeys", headers=A1, json={"scopes": []}).status_code == 400
    # Setting a value it already holds changes nothing, so it is no entry either.
    current = client.get(f"/api/v2/locations/{world.loc_a}", headers=A1).get_json()
    assert client.patch(f"/api/v2/locations/{world.loc_a}", headers=A1,
                        json={"tz_name": current["tz_name"]}).status_code == 200
    assert _entries(client, A1)["total"] == before


def test_only_administrators_read_and_only_their_organisation(
        client: FlaskClient, world: World) -> None:
    client.patch(f"/api/v2/locations/{world.loc_a}", headers=A1, json={"crop": "barley"})
    assert client.get("/api/v2/audit", headers=A2).status_code == 403
    theirs = _entries(client, B1)
    assert str(world.loc_a) not in str(theirs) and "a1@a.example" not in str(theirs)
    # A key needs orgs:read (and its owner must be an administrator).
    reader = client.post("/api/v2/apikeys", headers=A1,
                         json={"scopes": ["locations:read"]}).get_json()
    assert client.get("/api/v2/audit", headers=apikey(reader["apikey"])).status_code == 403


@pytest.mark.parametrize(("query", "field"), [("&since=yesterday", "since"),
                                              ("&until=2026-13-01", "until"),
                                              ("&limit=0", "limit")])
def test_bad_filters_are_400(client: FlaskClient, query: str, field: str) -> None:
    r = client.get(f"/api/v2/audit?{query.lstrip('&')}", headers=A1)
    assert r.status_code == 400 and field in r.get_json()["message"]


def test_filters(client: FlaskClient, world: World) -> None:
    client.post("/api/v2/apikeys", headers=A1, json={"scopes": ["data:read"]})
    keys = _entries(client, A1, "action=apikey.")["items"]
    assert keys and {e["action"].split(".")[0] for e in keys} == {"apikey"}
    future = _entries(client, A1, "since=2100-01-01")
    assert future["total"] == 0 and future["items"] == []
    located = _entries(client, A1, f"target_type=location&target_id={world.loc_a}")["items"]
    assert located and all(e["target"]["id"] == str(world.loc_a) for e in located)


def test_the_api_role_cannot_rewrite_the_log(world: World) -> None:
    with psycopg.connect(world.url) as conn:
        conn.execute("SET ROLE sds_api")
        conn.execute("SELECT set_config('app.org_id', %s, false)", (str(world.org_a),))
        for statement in ("UPDATE audit_log SET actor = 'someone else'", "DELETE FROM audit_log"):
            with pytest.raises(psycopg.errors.InsufficientPrivilege):
                with conn.transaction():
                    conn.execute(statement)


def test_entries_past_the_retention_are_removed(world: World, settings: Settings) -> None:
    with psycopg.connect(world.url) as conn:
        for days in (400, 10):
            audit.record(conn, org=world.org_a, actor=audit.OPERATOR, action="org.note",
                         target_type="org", details={"age_days": days})
            conn.execute("UPDATE audit_log SET at = now() - make_interval(days => %s)"
                         " WHERE id = (SELECT max(id) FROM audit_log)", (days,))
    with ConnectionPool(world.url, min_size=1, max_size=1, open=True) as pool:
        removed = jobs.run_audit_retention(pool, settings.replace(audit_retention_days=365))
    assert removed >= 1
    with psycopg.connect(world.url) as conn:
        ages = [r[0] for r in conn.execute(
            "SELECT details->>'age_days' FROM audit_log WHERE action = 'org.note'")]
    assert ages == ["10"]


def test_long_details_are_bounded_pure() -> None:
    bounded = audit._bounded({"notes": "x" * 5000, "list": list(range(500)), "ok": True})
    assert len(bounded["notes"]) == audit.MAX_DETAIL_TEXT + 1
    assert len(bounded["list"]) == 100 and bounded["ok"] is True


def test_alert_rules_and_channels_are_logged(client: FlaskClient, world: World) -> None:
    rule = client.post("/api/v2/alerts", headers=A1, json={
        "name": "Frost", "table": "calibrated", "column": "tair", "scope": {"organisation": True},
        "condition": {"op": "<", "threshold": 0}})
    assert rule.status_code == 201, rule.get_json()
    rid = rule.get_json()["id"]
    assert client.patch(f"/api/v2/alerts/{rid}", headers=A1,
                        json={"name": "Hard frost"}).status_code == 200
    assert client.delete(f"/api/v2/alerts/{rid}", headers=A1).status_code == 204
    channel = client.post("/api/v2/channels", headers=A1,
                          json={"name": "ops mail", "kind": "mqtt"})
    assert channel.status_code == 201, channel.get_json()
    cid = channel.get_json()["id"]
    assert client.delete(f"/api/v2/channels/{cid}", headers=A1).status_code == 204
    items = _entries(client, A1, "limit=5")["items"]
    assert [e["action"] for e in items] == ["channel.delete", "channel.create",
                                            "alert_rule.delete", "alert_rule.update",
                                            "alert_rule.create"]
    assert items[4]["details"]["rule"]["condition"] == {"op": "<", "threshold": 0}
    assert items[3]["details"] == {"changes": {"name": "Hard frost"}}


def test_annotations_and_acknowledgements_are_logged(client: FlaskClient, world: World) -> None:
    """Issue 34: annotations (create, delete) and alert acknowledgements leave entries; a
    repeated acknowledgement changes nothing and logs nothing."""
    made = client.post("/api/v2/annotations", headers=A1, json={
        "device": world.dev_a, "start_time": "2026-06-01T00:00:00Z", "text": "pump serviced",
        "tags": ["maintenance"]})
    assert made.status_code == 201, made.get_json()
    aid = made.get_json()["id"]
    assert client.delete(f"/api/v2/annotations/{aid}", headers=A1).status_code == 204
    with psycopg.connect(world.url) as conn:
        row = conn.execute("INSERT INTO alert_events (org_id, kind, device, at, title) VALUES"
                           " (%s, 'firing', %s, now(), 'audit') RETURNING id",
                           (world.org_a, world.dev_a)).fetchone()
    assert row is not None
    for _ in range(2):
        assert client.post(f"/api/v2/notifications/{row[0]}/ack", headers=A1,
                           json={}).status_code == 200
    items = _entries(client, A1, "limit=3")["items"]
    assert [e["action"] for e in items] == ["alert.acknowledge", "annotation.delete",
                                            "annotation.create"]
    assert items[0]["target"] == {"type": "alert_event", "id": str(row[0])}
    assert items[1]["target"] == {"type": "annotation", "id": aid}
    assert items[1]["details"] == {"text": "pump serviced"}
    assert items[2]["details"]["device"] == world.dev_a
    assert items[2]["details"]["tags"] == ["maintenance"]
