"""API key management: creation rules, masked listings, updates limited to four fields,
deletion that takes effect at once, the scope map, and last_seen written at most once a
minute (reliability plan S4, S5, S11)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
import pytest
from flask.testing import FlaskClient
from psycopg.rows import dict_row

from people import credentials
from tests.support.access_world import World, apikey, basic, bearer
from tests.support.apps import close_app, make_app

A1 = basic("a1@a.example")
RECORD_KEYS = ["id", "apikey", "name", "scopes", "exp", "active", "created", "updated",
               "created_by", "last_seen"]


def _create(client: FlaskClient, body: dict[str, Any], headers: dict[str, str] = A1) -> Any:
    return client.post("/api/v2/apikeys", json=body, headers=headers)


def _row(url: str, key_id: str) -> dict[str, Any] | None:
    with psycopg.connect(url) as conn, conn.cursor(row_factory=dict_row) as cur:
        return cur.execute("SELECT * FROM api_keys WHERE id = %s", (key_id,)).fetchone()


def test_create_returns_the_key_once_and_lists_it_masked(client: FlaskClient,
                                                         world: World) -> None:
    exp = (datetime.now(UTC) + timedelta(days=30)).replace(microsecond=0)
    r = _create(client, {"scopes": ["devices:read", "data:read"], "name": "logger",
                         "exp": exp.strftime("%Y-%m-%dT%H:%M:%SZ"), "active": True})
    assert r.status_code == 200, r.get_json()
    record = r.get_json()
    assert list(record) == RECORD_KEYS
    assert credentials.well_formed(record["apikey"], credentials.API_KEY_PREFIX)
    assert record["scopes"] == ["data:read", "devices:read"]
    assert record["name"] == "logger" and record["active"] is True
    assert record["exp"] == exp.strftime("%Y-%m-%dT%H:%M:%SZ")
    assert record["created_by"] == str(world.a1) and record["last_seen"] is None
    datetime.fromisoformat(record["created"])  # ISO 8601 with microseconds and offset
    assert record["created"].endswith("+00:00") and "." in record["created"]
    # The new key works at once, within its scopes only.
    assert client.get("/api/v2/devices", headers=apikey(record["apikey"])).status_code == 200
    assert client.get("/api/v2/locations", headers=apikey(record["apikey"])).status_code == 403
    listed = client.get("/api/v2/apikeys", headers=A1)
    assert listed.status_code == 200
    mine = [k for k in listed.get_json() if k["id"] == record["id"]]
    assert len(mine) == 1
    assert mine[0]["apikey"] != record["apikey"]
    assert mine[0]["apikey"] == credentials.mask(record["apikey"][:9], record["apikey"][-4:])
    assert record["apikey"] not in listed.get_data(as_text=True)


def test_bearer_may_create_an_api_key_may_not(client: FlaskClient, world: World) -> None:
    body = {"scopes": ["data:read"]}
    assert _create(client, body, bearer(world.tokens["live"])).status_code == 200
    refused = _create(client, body, apikey(world.keys["all"]))
    assert refused.status_code == 403
    assert "basic or bearer" in refused.get_json()["message"]


@pytest.mark.parametrize("body, field", [
    ({}, "scopes"),
    ({"scopes": []}, "scopes"),
    ({"scopes": "data:read"}, "scopes"),
    ({"scopes": ["data:read", "root:all"]}, "scopes"),
    ({"scopes": [1]}, "scopes"),
    ({"scopes": ["data:read"], "exp": "2001-01-01T00:00:00Z"}, "exp"),
    ({"scopes": ["data:read"], "exp": "next tuesday"}, "exp"),
    ({"scopes": ["data:read"], "exp": 1700000000}, "exp"),
    ({"scopes": ["data:read"], "active": "maybe"}, "active"),
    ({"scopes": ["data:read"], "name": "x" * 201}, "name"),
    ({"scopes": ["data:read"], "name": "nul\x00byte"}, "name"),
    ({"scopes": ["data:read\x00"]}, "scopes"),
    ({"scopes": ["data:read"], "colour": "blue"}, "colour"),
    ({"scopes": ["data:read"], "id": "00000000-0000-4000-8000-000000000000"}, "id"),
    ({"scopes": ["data:read"], "apikey": "sdsk_mine"}, "apikey"),
    ({"scopes": ["data:read"], "created_by": "someone"}, "created_by"),
    ({"scopes": ["data:read"], "last_seen": "2030-01-01T00:00:00Z"}, "last_seen"),
], ids=["no-scopes", "empty-scopes", "scopes-not-list", "unknown-scope", "scope-not-string",
        "exp-past", "exp-malformed", "exp-number", "active-not-bool", "name-too-long",
        "name-nul", "scope-nul",
        "unknown-field", "read-only-id", "read-only-apikey", "read-only-created_by",
        "read-only-last_seen"])
def test_bad_create_bodies_are_400_naming_the_field(client: FlaskClient, world: World,
                                                    body: dict[str, Any], field: str) -> None:
    with psycopg.connect(world.url) as conn:
        before = conn.execute("SELECT count(*) FROM api_keys").fetchone()
    r = _create(client, body)
    assert r.status_code == 400, r.get_json()
    payload = r.get_json()
    assert payload["code"] == 400 and field in payload["message"]
    with psycopg.connect(world.url) as conn:
        assert conn.execute("SELECT count(*) FROM api_keys").fetchone() == before


def test_unknown_scope_message_lists_valid_ones(client: FlaskClient) -> None:
    r = _create(client, {"scopes": ["root:all"]})
    assert "root:all" in str(r.get_json()) and "data:read" in str(r.get_json())


@pytest.mark.parametrize("data, content_type, status", [
    ('{"scopes": ["data:read"]}', "text/plain", 415),
    ("scopes=data:read", "application/x-www-form-urlencoded", 415),
    ('{"scopes": ["data:read"]}', None, 415),
    ('{"scopes": ["data:read"', "application/json", 400),
    ('["data:read"]', "application/json", 400),
])
def test_body_must_be_a_json_object(client: FlaskClient, data: str, content_type: str | None,
                                    status: int) -> None:
    headers = dict(A1)
    if content_type:
        headers["Content-Type"] = content_type
    r = client.post("/api/v2/apikeys", data=data, headers=headers)
    assert r.status_code == status
    assert r.get_json()["code"] == status


def test_update_changes_only_the_four_fields(client: FlaskClient, world: World) -> None:
    created = _create(client, {"scopes": ["data:read"], "name": "before"}).get_json()
    key_id, value = created["id"], created["apikey"]
    exp = (datetime.now(UTC) + timedelta(days=3)).strftime("%Y-%m-%dT%H:%M:%SZ")
    r = client.put(f"/api/v2/apikeys/{key_id}", headers=A1,
                   json={"scopes": ["devices:read"], "name": "after", "exp": exp})
    assert r.status_code == 200, r.get_json()
    updated = r.get_json()
    assert list(updated) == RECORD_KEYS
    assert updated["scopes"] == ["devices:read"] and updated["name"] == "after"
    assert updated["exp"] == exp and updated["updated"] > created["updated"]
    assert updated["apikey"] != value  # masked
    assert client.get("/api/v2/devices", headers=apikey(value)).status_code == 200
    assert client.get("/api/v2/locations", headers=apikey(value)).status_code == 403
    # exp null removes the expiry.
    cleared = client.put(f"/api/v2/apikeys/{key_id}", headers=A1, json={"exp": None})
    assert cleared.get_json()["exp"] is None


@pytest.mark.parametrize("body", [
    {"user_id": "00000000-0000-4000-8000-000000000000"},
    {"org_id": "00000000-0000-4000-8000-000000000000"},
    {"created": "2001-01-01T00:00:00Z"},
    {"last_seen": "2001-01-01T00:00:00Z"},
    {"digest": "00"},
    {"apikey": "sdsk_x"},
    {"name": "ok", "prefix": "sdsk_"},
    {"scopes": ["nope:nope"]},
    {"scopes": []},
    {"exp": "1999-01-01"},
    {"active": None},
    {"name": None},
], ids=lambda b: ",".join(b))
def test_mass_assignment_is_refused_and_changes_nothing(client: FlaskClient, world: World,
                                                        body: dict[str, Any]) -> None:
    created = _create(client, {"scopes": ["data:read"], "name": "fixed"}).get_json()
    before = _row(world.url, created["id"])
    r = client.put(f"/api/v2/apikeys/{created['id']}", headers=A1, json=body)
    assert r.status_code == 400, r.get_json()
    assert _row(world.url, created["id"]) == before


def test_deactivate_then_reactivate(client: FlaskClient) -> None:
    created = _create(client, {"scopes": ["devices:read"]}).get_json()
    key = apikey(created["apikey"])
    assert client.get("/api/v2/devices", headers=key).status_code == 200
    off = client.put(f"/api/v2/apikeys/{created['id']}", headers=A1, json={"active": False})
    assert off.status_code == 200 and off.get_json()["active"] is False
    refused = client.get("/api/v2/devices", headers=key)
    assert refused.status_code == 401
    assert refused.headers["WWW-Authenticate"].startswith("Apikey")
    # Still listed while deactivated.
    assert created["id"] in {k["id"] for k in client.get("/api/v2/apikeys", headers=A1).get_json()}
    on = client.put(f"/api/v2/apikeys/{created['id']}", headers=A1, json={"active": True})
    assert on.status_code == 200
    assert client.get("/api/v2/devices", headers=key).status_code == 200


def test_delete_is_204_and_final(client: FlaskClient, world: World) -> None:
    created = _create(client, {"scopes": ["devices:read"]}).get_json()
    key = apikey(created["apikey"])
    assert client.get("/api/v2/devices", headers=key).status_code == 200
    r = client.delete(f"/api/v2/apikeys/{created['id']}", headers=A1)
    assert r.status_code == 204 and r.get_data() == b""
    assert client.get("/api/v2/devices", headers=key).status_code == 401
    assert client.delete(f"/api/v2/apikeys/{created['id']}", headers=A1).status_code == 404
    assert _row(world.url, created["id"]) is None


@pytest.mark.parametrize("key_id", ["not-a-uuid", "00000000-0000-4000-8000-000000000000", "1"])
def test_unknown_or_malformed_ids_are_404(client: FlaskClient, key_id: str) -> None:
    for method in ("PUT", "DELETE"):
        r = client.open(f"/api/v2/apikeys/{key_id}", method=method, headers=A1,
                        json={"name": "x"} if method == "PUT" else None)
        assert r.status_code == 404 and r.get_json()["code"] == 404


def test_scope_map(client: FlaskClient, world: World) -> None:
    r = client.get("/api/v2/apikeys/scopes", headers=A1)
    assert r.status_code == 200 and r.get_json() == credentials.SCOPES
    assert client.get("/api/v2/apikeys/scopes",
                      headers=apikey(world.keys["apikeys"])).status_code == 200


def test_api_key_with_apikeys_read_lists_its_users_keys(client: FlaskClient,
                                                        world: World) -> None:
    r = client.get("/api/v2/apikeys", headers=apikey(world.keys["apikeys"]))
    assert r.status_code == 200
    ids = {k["id"] for k in r.get_json()}
    assert str(world.key_ids["apikeys"]) in ids and str(world.key_ids["b_all"]) not in ids
    assert all(not credentials.well_formed(k["apikey"], credentials.API_KEY_PREFIX)
               for k in r.get_json())


def test_last_seen_written_at_most_once_a_minute(fresh_world: World, figures: Any) -> None:
    """S11: 1000 requests with one key from two app instances -> one UPDATE of its row
    (counted by a trigger)."""
    with psycopg.connect(fresh_world.url) as conn:
        conn.execute("CREATE TABLE key_updates (id uuid, at timestamptz DEFAULT clock_timestamp())")
        conn.execute(
            # SECURITY DEFINER: the API's credential checks run as a role (sds_auth) that
            # may not write this test table.
            "CREATE FUNCTION count_key_update() RETURNS trigger LANGUAGE plpgsql"
            " SECURITY DEFINER AS $$"
            " BEGIN INSERT INTO key_updates (id) VALUES (NEW.id); RETURN NEW; END $$")
        conn.execute("CREATE TRIGGER count_key_update AFTER UPDATE ON api_keys FOR EACH ROW"
                     " EXECUTE FUNCTION count_key_update()")
        conn.commit()
    app = make_app(fresh_world.url)
    try:
        client = app.test_client()
        key = apikey(fresh_world.keys["devices"])
        for _ in range(800):
            assert client.get("/api/v2/devices", headers=key).status_code == 200
        # A second app (another gunicorn worker) sharing the database.
        other = make_app(fresh_world.url)
        try:
            for _ in range(200):
                assert other.test_client().get("/api/v2/devices", headers=key).status_code == 200
        finally:
            close_app(other)
    finally:
        close_app(app)
    with psycopg.connect(fresh_world.url) as conn:
        updates = conn.execute("SELECT count(*) FROM key_updates").fetchone()
        seen = conn.execute("SELECT last_seen FROM api_keys WHERE id = %s",
                            (fresh_world.key_ids["devices"],)).fetchone()
        # Pretend the minute has passed: the next request writes again, once.
        conn.execute("UPDATE api_keys SET last_seen = now() - interval '61 seconds'"
                     " WHERE id = %s", (fresh_world.key_ids["devices"],))
        conn.execute("DELETE FROM key_updates")
        conn.commit()
    figures.record("s11_last_seen_writes_per_1000", updates[0] if updates else None,
                   section="security",
                   title="S11 last_seen UPDATEs for 1000 requests with one key from two app "
                         "instances within a minute (trigger count)",
                   target="<= 1 per minute", source="tests/access/test_apikeys.py")
    assert updates == (1,)
    assert seen is not None and seen[0] is not None
    app = make_app(fresh_world.url)
    try:
        for _ in range(20):
            app.test_client().get("/api/v2/devices", headers=key)
    finally:
        close_app(app)
    with psycopg.connect(fresh_world.url) as conn:
        assert conn.execute("SELECT count(*) FROM key_updates").fetchone() == (1,)


def test_creation_answer_is_not_cacheable(client: FlaskClient) -> None:
    r = _create(client, {"scopes": ["data:read"]})
    assert r.status_code == 200 and r.headers["Cache-Control"] == "no-store"


def test_one_400_names_read_only_unknown_and_invalid_fields_together(client: FlaskClient,
                                                                     world: World) -> None:
    created = _create(client, {"scopes": ["data:read"], "name": "fixed"}).get_json()
    before = _row(world.url, created["id"])
    body = {"id": "x", "created_by": "y", "colour": "blue", "scopes": ["root:all"], "name": "z"}
    for r in (_create(client, body),
              client.put(f"/api/v2/apikeys/{created['id']}", headers=A1, json=body)):
        assert r.status_code == 400
        named = r.get_json()["errors"]["json"]
        assert {"id", "created_by", "colour", "scopes"} <= set(named)
        assert named["id"] == ["read-only field"]
        for field in ("id", "created_by", "colour", "scopes", "root:all"):
            assert field in r.get_json()["message"]
    assert _row(world.url, created["id"]) == before
