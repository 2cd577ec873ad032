"""Mass assignment on API keys (reliability plan S4).

`PUT /api/v2/apikeys/{id}` may change `scopes`, `name`, `exp` and `active` only, and `POST
/api/v2/apikeys` may set nothing else either. A body naming any other field, read-only (`id`,
`user_id`, `org_id`, `digest`, ...) or unknown under the names other services use
(`organization_id`, `key_hash`, `created_at`, ...), or asking for a scope that does not exist, is
a 400 whose body names every rejected field, and the key's row is unchanged column by column,
even when the body also carries a legitimate change. tests/access/test_apikeys.py covers one
field at a time; this module covers the mixtures, the naming of each field and the widening of
scopes beyond the scope map.
"""

from __future__ import annotations

from typing import Any

import psycopg
import pytest
from flask.testing import FlaskClient
from psycopg.rows import dict_row

from tests.support.access_world import World, basic

A1 = basic("a1@a.example")
ZERO = "00000000-0000-4000-8000-000000000000"
OTHER_ORG = "11111111-1111-4111-8111-111111111111"

# Fields the service stores or shows but never takes from a client, and names of the same
# ideas in other APIs; each must be refused by name.
FORBIDDEN: dict[str, Any] = {
    "id": ZERO,
    "apikey": "sdsk_AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA00000000",
    "user_id": ZERO,
    "org_id": OTHER_ORG,
    "organization_id": OTHER_ORG,
    "digest": "00" * 32,
    "key_hash": "00" * 32,
    "prefix": "sdsk_",
    "key_prefix": "sdsk_",
    "last4": "abcd",
    "created": "2001-01-01T00:00:00Z",
    "created_at": "2001-01-01T00:00:00Z",
    "updated": "2001-01-01T00:00:00Z",
    "last_seen": "2001-01-01T00:00:00Z",
    "last_used_at": "2001-01-01T00:00:00Z",
    "created_by": ZERO,
    "deactivated_at": "2001-01-01T00:00:00Z",
    "expires_at": "2999-01-01T00:00:00Z",
    "is_admin": True,
    "role": "admin",
}
# Scopes wider than the scope map: invented ones and wildcard spellings.
WIDER_SCOPES = [["admin"], ["*"], ["data:*"], ["data:read", "data:write"], ["devices:admin"],
                ["apikeys:write"], ["DATA:READ"], ["data:read "]]


def _row(url: str, key_id: str) -> dict[str, Any]:
    with psycopg.connect(url) as conn, conn.cursor(row_factory=dict_row) as cur:
        row = cur.execute("SELECT * FROM api_keys WHERE id = %s", (key_id,)).fetchone()
    assert row is not None
    return row


def _named_fields(body: dict[str, Any]) -> set[str]:
    """Field names a 400 body names in its `errors` (any nesting under 'json')."""
    errors = body.get("errors") or {}
    named = set(errors.get("json", {})) if isinstance(errors.get("json"), dict) else set()
    return named | {k for k in errors if k != "json"}


def _new_key(client: FlaskClient) -> dict[str, Any]:
    r = client.post("/api/v2/apikeys", headers=A1, json={"scopes": ["data:read"], "name": "fixed"})
    assert r.status_code == 200, r.get_json()
    return r.get_json()


def _assert_refused(r: Any, fields: set[str]) -> None:
    assert r.status_code == 400, (r.status_code, r.get_json())
    body = r.get_json()
    assert body["code"] == 400 and r.mimetype == "application/json"
    named = _named_fields(body)
    missing = fields - named
    assert not missing, f"400 does not name {sorted(missing)}: {body}"
    for name in fields:
        assert name in body["message"], f"message does not name {name}: {body['message']}"


@pytest.mark.parametrize("field", sorted(FORBIDDEN))
def test_put_refuses_each_field_by_name_and_changes_nothing(
        client: FlaskClient, world: World, field: str) -> None:
    key = _new_key(client)
    before = _row(world.url, key["id"])
    # A legitimate change rides along: it must not be applied either.
    r = client.put(f"/api/v2/apikeys/{key['id']}", headers=A1,
                   json={"name": "changed", field: FORBIDDEN[field]})
    _assert_refused(r, {field})
    after = _row(world.url, key["id"])
    for column, value in before.items():
        assert after[column] == value, f"{column} changed by a refused body with {field}"


@pytest.mark.parametrize("method", ["PUT", "POST"])
def test_one_400_names_every_rejected_field(client: FlaskClient, world: World,
                                            method: str) -> None:
    key = _new_key(client)
    before = _row(world.url, key["id"])
    body = {**FORBIDDEN, "name": "changed", "scopes": ["admin"]}
    path = f"/api/v2/apikeys/{key['id']}" if method == "PUT" else "/api/v2/apikeys"
    r = client.open(path, method=method, headers=A1, json=body)
    _assert_refused(r, set(FORBIDDEN) | {"scopes"})
    assert _row(world.url, key["id"]) == before


def test_put_with_only_read_only_fields_names_them_all(client: FlaskClient, world: World) -> None:
    """All read-only fields at once (the check the service makes first): each one named."""
    from serve.api.apikeys import READ_ONLY

    key = _new_key(client)
    before = _row(world.url, key["id"])
    body = {name: FORBIDDEN.get(name, "x") for name in READ_ONLY}
    _assert_refused(client.put(f"/api/v2/apikeys/{key['id']}", headers=A1, json=body),
                    set(READ_ONLY))
    assert _row(world.url, key["id"]) == before


@pytest.mark.parametrize("scopes", WIDER_SCOPES, ids=lambda s: ",".join(s))
def test_scopes_beyond_the_map_are_refused(client: FlaskClient, world: World,
                                           scopes: list[str]) -> None:
    key = _new_key(client)
    before = _row(world.url, key["id"])
    r = client.put(f"/api/v2/apikeys/{key['id']}", headers=A1, json={"scopes": scopes})
    _assert_refused(r, {"scopes"})
    assert _row(world.url, key["id"]) == before
    created = client.post("/api/v2/apikeys", headers=A1, json={"scopes": scopes})
    _assert_refused(created, {"scopes"})


@pytest.mark.parametrize("field", sorted(FORBIDDEN))
def test_post_refuses_each_field_by_name_and_creates_nothing(
        client: FlaskClient, world: World, field: str) -> None:
    with psycopg.connect(world.url) as conn:
        count = conn.execute("SELECT count(*) FROM api_keys").fetchone()
    r = client.post("/api/v2/apikeys", headers=A1,
                    json={"scopes": ["data:read"], "name": "new", field: FORBIDDEN[field]})
    _assert_refused(r, {field})
    with psycopg.connect(world.url) as conn:
        assert conn.execute("SELECT count(*) FROM api_keys").fetchone() == count


def test_other_users_key_with_forbidden_fields_changes_nothing(
        client: FlaskClient, world: World) -> None:
    """a1 aiming at a2's key (same org) and at b1's (other org): refused, rows unchanged, and
    the answer is the same as for a key that does not exist."""
    targets = [str(world.key_ids["a2_all"]), str(world.key_ids["b_all"]), ZERO]
    before = {t: _row(world.url, t) for t in targets[:2]}
    answers = []
    for target in targets:
        for body in ({"user_id": str(world.a1)}, {"name": "taken", "active": False}):
            r = client.put(f"/api/v2/apikeys/{target}", headers=A1, json=body)
            assert r.status_code in (400, 404), r.get_json()
            answers.append((r.status_code, r.get_data(as_text=True).replace(target, "ID")))
    assert answers[0:2] == answers[2:4] == answers[4:6]
    assert {t: _row(world.url, t) for t in targets[:2]} == before
