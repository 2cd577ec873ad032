"""People (issue 23): /users/me, /users, /users/{id}, /users/{id}/orgs, /orgs, /orgs/{id},
/orgs/{id}/users with roles; a removed member's tokens and keys stop at once; a demoted
administrator's key loses the administrators' routes at once; the last administrator stays."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import psycopg
import pytest
from flask.testing import FlaskClient

from people import accounts
from tests.support.access_world import (
    PASSWORDS,
    World,
    apikey,
    basic,
    bearer,
    insert_token,
    reset_memberships,
)

A1 = basic("a1@a.example")
A2 = basic("a2@a.example")
B1 = basic("b1@b.example")


@pytest.fixture(autouse=True)
def roles(world: World) -> None:
    """Before each test: a1 administers org A, a2 is a member, b1 administers org B, all
    active (tests change these)."""
    with psycopg.connect(world.url) as conn:
        reset_memberships(conn, world)


def _json(r: Any, status: int = 200) -> Any:
    assert r.status_code == status, (r.status_code, r.get_data(as_text=True)[:300])
    return r.get_json()


def test_me_reads_and_changes_name_and_preferences(client: FlaskClient, world: World) -> None:
    me = _json(client.get("/api/v2/users/me", headers=A2))
    assert (me["id"], me["email"], me["role"], me["org_id"]) == (
        str(world.a2), "a2@a.example", "member", str(world.org_a))
    changed = _json(client.patch("/api/v2/users/me", headers=A2, json={
        "name": "Ada Two", "preferences": {"units": {"temp": "f"}, "zone": "Europe/Paris"}}))
    assert changed["name"] == "Ada Two"
    assert changed["preferences"]["units"] == {"temp": "f"}
    again = _json(client.patch("/api/v2/users/me", headers=A2,
                               json={"preferences": {"zone": "device"}}))
    assert again["preferences"] == {"units": {"temp": "f"}, "zone": "device"}  # merged by key


@pytest.mark.parametrize(("body", "field"), [
    ({"password": "a-new-password-123"}, "password"),
    ({"email": "x@y.example"}, "email"),
    ({"role": "admin"}, "role"),
    ({"preferences": {"units": {"temp": "kelvin"}}}, "temp"),
    ({"preferences": {"zone": "Mars/Base"}}, "zone"),
    ({"name": "n" * 201}, "name"),
])
def test_me_refuses_what_it_may_not_change(client: FlaskClient, body: dict[str, Any],
                                           field: str) -> None:
    r = client.patch("/api/v2/users/me", headers=A2, json=body)
    assert r.status_code == 400 and field in r.get_json()["message"]


def test_users_are_listed_for_administrators_only(client: FlaskClient, world: World) -> None:
    page = _json(client.get("/api/v2/users", headers=A1))
    assert {u["email"] for u in page["items"]} == {"a1@a.example", "a2@a.example"}
    assert _json(client.get("/api/v2/users", headers=A2), 403)["code"] == 403
    # One's own record always; another member's only for an administrator (else the same 404
    # as a stranger's).
    assert _json(client.get(f"/api/v2/users/{world.a2}", headers=A2))["email"] == "a2@a.example"
    assert _json(client.get(f"/api/v2/users/{world.a1}", headers=A2), 404)
    assert _json(client.get(f"/api/v2/users/{world.a2}", headers=A1))["role"] == "member"
    assert _json(client.get(f"/api/v2/users/{world.b1}", headers=A1), 404)
    orgs = _json(client.get(f"/api/v2/users/{world.a2}/orgs", headers=A1))
    assert [(o["id"], o["role"]) for o in orgs] == [(str(world.org_a), "member")]


def test_orgs_and_members(client: FlaskClient, world: World) -> None:
    page = _json(client.get("/api/v2/orgs", headers=A2))
    assert [(o["name"], o["role"], o["members"]) for o in page["items"]] == [("Org A", "member",
                                                                              2)]
    assert _json(client.get(f"/api/v2/orgs/{world.org_a}", headers=A1))["role"] == "admin"
    assert _json(client.get(f"/api/v2/orgs/{world.org_b}", headers=A1), 404)
    assert _json(client.get("/api/v2/orgs/not-an-id", headers=A1), 404)
    people = _json(client.get(f"/api/v2/orgs/{world.org_a}/users", headers=A2))
    assert [(u["email"], u["role"]) for u in people["items"]] == [
        ("a1@a.example", "admin"), ("a2@a.example", "member")]
    assert all("preferences" not in u for u in people["items"])
    renamed = client.patch(f"/api/v2/orgs/{world.org_a}", headers=A1, json={"name": "Org A2"})
    assert _json(renamed)["name"] == "Org A2"
    assert _json(client.patch(f"/api/v2/orgs/{world.org_a}", headers=A1,
                              json={"name": "Org B"}), 409)
    assert _json(client.patch(f"/api/v2/orgs/{world.org_a}", headers=A2,
                              json={"name": "Mine now"}), 403)
    client.patch(f"/api/v2/orgs/{world.org_a}", headers=A1, json={"name": "Org A"})


def test_roles_change_and_a_demoted_admins_key_loses_admin_routes_at_once(
        client: FlaskClient, world: World) -> None:
    with psycopg.connect(world.url) as conn:
        admin_key = accounts.create_api_key(conn, user=world.a1, scopes=["orgs:read",
                                                                         "orgs:write"])["apikey"]
    promoted = client.put(f"/api/v2/orgs/{world.org_a}/users/{world.a2}", headers=A1,
                          json={"role": "admin"})
    assert _json(promoted)["role"] == "admin"
    # a2, now an administrator, demotes a1; a1's key is refused its administrators' route on
    # the very next request.
    assert _json(client.put(f"/api/v2/orgs/{world.org_a}/users/{world.a1}", headers=A2,
                            json={"role": "member"}))["role"] == "member"
    assert client.patch(f"/api/v2/orgs/{world.org_a}", headers=apikey(admin_key),
                        json={"name": "Org A"}).status_code == 403
    # The last administrator can be neither demoted nor removed.
    assert _json(client.put(f"/api/v2/orgs/{world.org_a}/users/{world.a2}", headers=A2,
                            json={"role": "member"}), 409)
    assert _json(client.delete(f"/api/v2/orgs/{world.org_a}/users/{world.a2}", headers=A2), 409)
    assert _json(client.put(f"/api/v2/orgs/{world.org_a}/users/{world.a2}", headers=A2,
                            json={"role": "boss"}), 400)
    assert _json(client.put(f"/api/v2/orgs/{world.org_a}/users/{world.a2}", headers=A2,
                            json={"role": "owner"}), 403)  # only an owner makes an owner
    assert _json(client.put(f"/api/v2/orgs/{world.org_a}/users/{world.b1}", headers=A2,
                            json={"role": "member"}), 404)


def test_removing_a_member_stops_their_token_and_key_at_once(
        client: FlaskClient, world: World) -> None:
    with psycopg.connect(world.url) as conn:
        token = insert_token(conn, world.a2, expires_in=timedelta(hours=1))
        key = accounts.create_api_key(conn, user=world.a2, scopes=["devices:read"])["apikey"]
    for headers in (bearer(token), apikey(key), A2):
        assert client.get("/api/v2/devices", headers=headers).status_code == 200
    assert client.delete(f"/api/v2/orgs/{world.org_a}/users/{world.a2}",
                         headers=A1).status_code == 204
    for headers in (bearer(token), apikey(key), A2):
        assert client.get("/api/v2/devices", headers=headers).status_code == 401
    members = _json(client.get(f"/api/v2/orgs/{world.org_a}/users", headers=A1))
    assert [u["email"] for u in members["items"]] == ["a1@a.example"]
    assert _json(client.delete(f"/api/v2/orgs/{world.org_a}/users/{world.a2}", headers=A1), 404)
    # The audit log names who did it and what it stopped.
    entry = _json(client.get("/api/v2/audit?action=member.remove", headers=A1))["items"][0]
    assert entry["details"] == {"email": "a2@a.example", "role": "member", "tokens_revoked": 1,
                                "keys_deactivated": 2}  # the world's a2_all and this test's
    assert PASSWORDS["a2@a.example"] not in str(entry)
