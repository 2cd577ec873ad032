"""Memberships (issue 23): a user in several organisations with a role in each, on a real
PostgreSQL. The role matrix of the routes the roles change, the token's organisation rule,
keys capped by their user's role at every request, removal from one organisation revoking that
organisation's credentials at once (and deactivating a user with none left), the owner rules,
adding an existing user, and the audit entries of each change."""

from __future__ import annotations

from datetime import timedelta
from typing import Any
from uuid import UUID, uuid4

import psycopg
import pytest
from flask.testing import FlaskClient

from people import accounts, roles
from shared import db
from tests.support.access_world import (
    PASSWORDS,
    World,
    apikey,
    basic,
    bearer,
    insert_token,
    reset_memberships,
)

A1, A2, B1 = basic("a1@a.example"), basic("a2@a.example"), basic("b1@b.example")


@pytest.fixture(autouse=True)
def memberships(world: World) -> None:
    """Before each test: a1 administers org A, a2 is a member of it, b1 administers org B."""
    with psycopg.connect(world.url) as conn:
        reset_memberships(conn, world)


def _set(world: World, user: UUID, org: UUID, role: str, teams_only: bool = False) -> None:
    with psycopg.connect(world.url) as conn:
        conn.execute("INSERT INTO memberships (user_id, org_id, role, teams_only)"
                     " VALUES (%s, %s, %s, %s) ON CONFLICT (user_id, org_id) DO UPDATE"
                     " SET role = excluded.role, teams_only = excluded.teams_only",
                     (user, org, role, teams_only))


def _json(r: Any, status: int = 200) -> Any:
    assert r.status_code == status, (r.status_code, r.get_data(as_text=True)[:300])
    return r.get_json()


def _token(client: FlaskClient, email: str, org: UUID | None = None) -> str:
    body: dict[str, Any] = {"email": email, "password": PASSWORDS[email]}
    if org is not None:
        body["org"] = str(org)
    answer = _json(client.post("/api/v2/auth/token", json=body))
    return str(answer["token"])


# Route -> what each role gets as a password caller: (method, path, body, {role: status}).
def _matrix(world: World) -> list[tuple[str, str, dict[str, Any] | None, dict[str, int]]]:
    everyone = {"owner": 200, "admin": 200, "member": 200, "viewer": 200}
    managers = {"owner": 200, "admin": 200, "member": 403, "viewer": 403}
    return [
        ("GET", "/api/v2/devices", None, everyone),
        ("GET", f"/api/v2/orgs/{world.org_a}/users", None, everyone),
        ("PATCH", "/api/v2/users/me", {"name": "Two"}, everyone),
        ("GET", "/api/v2/users", None, managers),
        ("GET", "/api/v2/audit", None, managers),
        ("PATCH", f"/api/v2/orgs/{world.org_a}", {"name": "Org A"}, managers),
        ("PATCH", f"/api/v2/locations/{world.loc_a}", {"notes": "dry"}, managers),
        ("GET", f"/api/v2/users/{world.a1}", None,
         {"owner": 200, "admin": 200, "member": 404, "viewer": 404}),
        ("POST", "/api/v2/annotations",
         {"location": str(world.loc_a), "start_time": "2026-01-01T00:00:00Z", "text": "t"},
         {"owner": 201, "admin": 201, "member": 201, "viewer": 403}),
    ]


@pytest.mark.parametrize("role", roles.ROLES)
def test_role_matrix_of_a_password_caller(client: FlaskClient, world: World, role: str) -> None:
    _set(world, world.a2, world.org_a, role)
    for method, path, body, expected in _matrix(world):
        r = client.open(path, method=method, json=body, headers=A2)
        assert r.status_code == expected[role], (role, method, path, r.get_data(as_text=True))
        if r.status_code == 403:
            assert f"({role})" in r.get_json()["message"] or "administrators" in \
                r.get_json()["message"]


def test_a_token_acts_in_the_organisation_it_names(client: FlaskClient, world: World) -> None:
    _set(world, world.a2, world.org_b, "viewer")
    home = bearer(_token(client, "a2@a.example"))
    in_b = bearer(_token(client, "a2@a.example", world.org_b))
    assert _json(client.get("/api/v2/users/me", headers=home))["org_id"] == str(world.org_a)
    me_b = _json(client.get("/api/v2/users/me", headers=in_b))
    assert (me_b["org_id"], me_b["role"]) == (str(world.org_b), "viewer")
    names = {d["name"] for d in _json(client.get("/api/v2/devices", headers=in_b))["items"]}
    assert names == {world.dev_b}
    # The viewer role in B caps the token there; the member role in A does not.
    note = {"location": str(world.loc_b), "start_time": "2026-01-01T00:00:00Z", "text": "t"}
    assert _json(client.post("/api/v2/annotations", json=note, headers=in_b), 403)
    # Both organisations are listed with the role in each; changes name the request's one.
    orgs = _json(client.get(f"/api/v2/users/{world.a2}/orgs", headers=home))
    assert sorted((o["name"], o["role"]) for o in orgs) == [("Org A", "member"),
                                                           ("Org B", "viewer")]
    page = _json(client.get("/api/v2/orgs", headers=in_b))
    assert [o["name"] for o in page["items"]] == ["Org A", "Org B"]
    assert _json(client.get(f"/api/v2/orgs/{world.org_b}", headers=home))["role"] == "viewer"
    _set(world, world.a2, world.org_a, "admin")
    other = client.patch(f"/api/v2/orgs/{world.org_b}", headers=home, json={"name": "X"})
    assert _json(other, 403) and "auth/token" in other.get_json()["message"]
    # Not a member there (or no such organisation): the same 401.
    for org in (uuid4(), world.org_b):
        if org == world.org_b:
            with psycopg.connect(world.url) as conn:
                conn.execute("DELETE FROM memberships WHERE user_id = %s AND org_id = %s",
                             (world.a2, world.org_b))
        r = client.post("/api/v2/auth/token", json={
            "email": "a2@a.example", "password": PASSWORDS["a2@a.example"], "org": str(org)})
        assert _json(r, 401)["message"] == "not a member of that organisation"
    assert _json(client.post("/api/v2/auth/token", json={
        "email": "a2@a.example", "password": PASSWORDS["a2@a.example"], "org": "B"}), 400)


def test_a_demoted_users_key_is_capped_at_the_next_request(
        client: FlaskClient, world: World) -> None:
    _set(world, world.a2, world.org_a, "admin")
    made = _json(client.post("/api/v2/apikeys", headers=A2, json={
        "scopes": ["locations:read", "locations:write"], "name": "field tool"}))
    key = apikey(made["apikey"])
    path = f"/api/v2/locations/{world.loc_a}"
    assert _json(client.patch(path, headers=key, json={"notes": "wet"}))["notes"] == "wet"
    assert _json(client.put(f"/api/v2/orgs/{world.org_a}/users/{world.a2}", headers=A1,
                            json={"role": "member"}))["role"] == "member"
    refused = _json(client.patch(path, headers=key, json={"notes": "dry"}), 403)
    assert "(member)" in refused["message"]
    assert _json(client.get(path, headers=key))["notes"] == "wet"  # reading stays
    # A viewer may not mint a key for what the role does not allow, but reads and own keys.
    _set(world, world.a2, world.org_a, "viewer")
    assert _json(client.post("/api/v2/apikeys", headers=A2,
                             json={"scopes": ["annotations:write"]}), 403)
    assert _json(client.post("/api/v2/apikeys", headers=A2, json={"scopes": ["data:read"]}))
    assert _json(client.patch("/api/v2/users/me", headers=A2, json={"name": "V"}))["name"] == "V"


def test_removal_from_one_organisation_revokes_its_credentials_only(
        client: FlaskClient, world: World) -> None:
    _set(world, world.a2, world.org_b, "member")
    with psycopg.connect(world.url) as conn:  # earlier tests' tokens and keys of a2's
        conn.execute("UPDATE auth_tokens SET revoked_at = now() WHERE user_id = %s", (world.a2,))
        conn.execute("UPDATE api_keys SET active = false WHERE user_id = %s", (world.a2,))
    token_a = bearer(_token(client, "a2@a.example"))
    token_b = bearer(_token(client, "a2@a.example", world.org_b))
    with psycopg.connect(world.url) as conn:
        key_a = apikey(accounts.create_api_key(conn, user=world.a2, scopes=["devices:read"])
                       ["apikey"])
        key_b = apikey(accounts.create_api_key(conn, user=world.a2, scopes=["devices:read"],
                                               org=world.org_b)["apikey"])
    for headers in (token_a, token_b, key_a, key_b):
        assert client.get("/api/v2/devices", headers=headers).status_code == 200
    # b1 (admin of B) removes a2 from B: B's token and key stop at once, A's keep working.
    assert client.delete(f"/api/v2/orgs/{world.org_b}/users/{world.a2}",
                         headers=B1).status_code == 204
    assert [client.get("/api/v2/devices", headers=h).status_code
            for h in (token_a, token_b, key_a, key_b)] == [200, 401, 200, 401]
    entry = _json(client.get("/api/v2/audit?action=member.remove", headers=B1))["items"][0]
    assert entry["details"] == {"email": "a2@a.example", "role": "member",
                                "tokens_revoked": 1, "keys_deactivated": 1}
    # Removed from the home organisation too: no membership left, the account is deactivated.
    assert client.delete(f"/api/v2/orgs/{world.org_a}/users/{world.a2}",
                         headers=A1).status_code == 204
    assert client.get("/api/v2/devices", headers=A2).status_code == 401
    with psycopg.connect(world.url) as conn:
        assert conn.execute("SELECT active FROM users WHERE id = %s",
                            (world.a2,)).fetchone() == (False,)


def test_leaving_the_home_organisation_moves_the_home(client: FlaskClient, world: World) -> None:
    _set(world, world.a2, world.org_b, "viewer")
    assert client.delete(f"/api/v2/orgs/{world.org_a}/users/{world.a2}",
                         headers=A1).status_code == 204
    me = _json(client.get("/api/v2/users/me", headers=A2))  # Basic acts in the home one
    assert (me["org_id"], me["role"]) == (str(world.org_b), "viewer")


def test_owner_rules(client: FlaskClient, world: World) -> None:
    _set(world, world.a1, world.org_a, "owner")
    _set(world, world.a2, world.org_a, "admin")
    path = f"/api/v2/orgs/{world.org_a}/users"
    # An admin can neither unmake nor remove an owner, nor make one.
    assert _json(client.put(f"{path}/{world.a1}", headers=A2, json={"role": "admin"}), 403)
    assert _json(client.delete(f"{path}/{world.a1}", headers=A2), 403)
    assert _json(client.put(f"{path}/{world.a2}", headers=A2, json={"role": "owner"}), 403)
    # The last owner stays.
    assert "last owner" in _json(client.put(f"{path}/{world.a1}", headers=A1,
                                            json={"role": "admin"}), 409)["message"]
    assert _json(client.delete(f"{path}/{world.a1}", headers=A1), 409)
    # An owner makes another; then either may step down.
    assert _json(client.put(f"{path}/{world.a2}", headers=A1, json={"role": "owner"}))
    assert _json(client.put(f"{path}/{world.a1}", headers=A2,
                            json={"role": "viewer", "teams_only": True}))["teams_only"] is True
    assert _json(client.put(f"{path}/{world.a1}", headers=A2,
                            json={"role": "admin", "teams_only": True}), 400)
    roles = [(e["details"]["from"], e["details"]["to"]) for e in _json(
        client.get("/api/v2/audit?action=member.role", headers=A2))["items"]]
    assert roles[:2] == [("owner", "viewer"), ("admin", "owner")]


def test_adding_an_existing_user(client: FlaskClient, world: World) -> None:
    """POST /orgs/{id}/users invites the existing user (202, pending); they join by accepting
    it signed in (issue 30)."""
    path = f"/api/v2/orgs/{world.org_a}/users"
    added = _json(client.post(path, headers=A1, json={"email": "B1@b.example",
                                                      "role": "viewer"}), 202)
    assert (added["email"], added["role"], added["pending"]) == ("b1@b.example", "viewer", True)
    joined = _json(client.post(f"/api/v2/users/me/invitations/{added['id']}/accept",
                               headers=B1))
    assert (joined["user_id"], joined["role"], joined["org_id"]) == (str(world.b1), "viewer",
                                                                    str(world.org_a))
    assert _json(client.post(path, headers=A1, json={"email": "b1@b.example",
                                                     "role": "member"}), 409)
    assert _json(client.post(path, headers=A1, json={"email": "nobody@x.example",
                                                     "role": "member"}), 404)
    assert _json(client.post(path, headers=A1, json={"email": "b1@b.example",
                                                     "role": "owner"}), 403)
    assert _json(client.post(path, headers=A2, json={"email": "b1@b.example",
                                                     "role": "member"}), 403)
    assert _json(client.post(path, headers=A1, json={"role": "member"}), 400)
    # b1's home stays B; a token for A shows A's members including b1.
    orgs = _json(client.get(f"/api/v2/users/{world.b1}/orgs", headers=B1))
    assert sorted((o["name"], o["role"]) for o in orgs) == [("Org A", "viewer"),
                                                           ("Org B", "admin")]
    entry = _json(client.get("/api/v2/audit?action=invite.accept", headers=A1))["items"][0]
    assert (entry["actor"]["label"], entry["actor"]["via"]) == ("b1@b.example", "basic")
    assert (entry["details"]["role"], entry["details"]["account"]) == ("viewer", "existing")


def test_the_request_carries_user_and_teams_only(world: World) -> None:
    with psycopg.connect(world.url, autocommit=True) as conn:
        db.set_request_scope(conn, db.ROLE_API, world.org_a, world.a2, True)
        assert conn.execute("SELECT current_setting('app.org_id'), current_setting("
                            "'app.user_id'), current_setting('app.teams_only'),"
                            " sds_request_user()").fetchone() == (
            str(world.org_a), str(world.a2), "on", world.a2)
        db.set_request_scope(conn, db.ROLE_API, None)
        assert conn.execute("SELECT current_setting('app.user_id'),"
                            " current_setting('app.teams_only')").fetchone() == ("", "")
        # The API role sees the memberships of its organisation only.
        db.set_request_scope(conn, db.ROLE_API, world.org_b, world.b1)
        rows = conn.execute("SELECT org_id FROM memberships").fetchall()
        assert {r[0] for r in rows} == {world.org_b}


def test_a_token_without_membership_is_refused(client: FlaskClient, world: World) -> None:
    with psycopg.connect(world.url) as conn:
        token = bearer(insert_token(conn, world.a2, expires_in=timedelta(hours=1)))
    assert client.get("/api/v2/devices", headers=token).status_code == 200
    with psycopg.connect(world.url) as conn:
        # A membership deleted behind the API's back (psql): the lookup refuses the token too.
        conn.execute("INSERT INTO memberships (user_id, org_id, role) VALUES (%s, %s,"
                     " 'viewer')", (world.a2, world.org_b))
        conn.execute("DELETE FROM memberships WHERE user_id = %s AND org_id = %s",
                     (world.a2, world.org_a))
    assert client.get("/api/v2/devices", headers=token).status_code == 401
