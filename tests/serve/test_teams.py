"""`/api/v2/teams` against the real database: create, list, read, rename, delete; members,
devices and locations added and removed; writes for administrators only; scopes; another
organisation's team, user, device or location as the same 404 as a missing one; bad input as
a 400 naming what was wrong; every change in the audit log."""

from __future__ import annotations

import base64
from typing import Any
from uuid import uuid4

import psycopg
import pytest
from flask.testing import FlaskClient

from people import accounts
from tests.support.data_world import World

URL = "/api/v2/teams"


@pytest.fixture(scope="module")
def keys(world: World) -> dict[str, Any]:
    """API keys: admin a1 (read+write, read only), plain member a2; admin b1 of org B."""
    with psycopg.connect(world.url) as conn:
        users = dict(conn.execute("SELECT email, id FROM users").fetchall())
        a1, b1 = users["a1@a.example"], users["b1@b.example"]
        conn.execute("UPDATE memberships SET role = 'admin' WHERE user_id IN (%s, %s)", (a1, b1))
        a2 = accounts.create_user(conn, org=world.org_a, email="a2@a.example",
                                  password="a2-password")
        made: dict[str, Any] = {
            "a": accounts.create_api_key(conn, user=a1, scopes=[
                "teams:read", "teams:write"])["apikey"],
            "a_read": accounts.create_api_key(conn, user=a1, scopes=["teams:read"])["apikey"],
            "a2": accounts.create_api_key(conn, user=a2, scopes=["teams:read"])["apikey"],
            "b": accounts.create_api_key(conn, user=b1, scopes=[
                "teams:read", "teams:write"])["apikey"],
            "ids": {"a1": a1, "a2": a2, "b1": b1},
        }
        conn.commit()
    return made


def _h(keys: dict[str, Any], who: str = "a") -> dict[str, str]:
    if who == "a2_basic":  # the member signed in with a password: every scope of a member
        token = base64.b64encode(b"a2@a.example:a2-password").decode()
        return {"Authorization": f"Basic {token}"}
    return {"Authorization": f"Apikey {keys[who]}"}


def _ok(response: Any, code: int = 200) -> Any:
    assert response.status_code == code, response.get_data(as_text=True)
    return response.get_json()


def _error(response: Any, code: int) -> str:
    assert response.status_code == code, response.get_data(as_text=True)
    assert response.content_type == "application/json"
    return str(response.get_json()["message"])


def _audit(world: World, action: str) -> list[dict[str, Any]]:
    with psycopg.connect(world.url) as conn:
        rows = conn.execute("SELECT actor, details FROM audit_log WHERE action = %s"
                            " ORDER BY id", (action,)).fetchall()
    return [{"actor": r[0], **r[1]} for r in rows]


def test_create_list_get_rename_delete(client: FlaskClient, keys: dict[str, Any],
                                       world: World) -> None:
    made = _ok(client.post(URL, json={"name": " Field crew "}, headers=_h(keys)), 201)
    assert made["name"] == "Field crew" and made["members"] == made["devices"] == 0
    assert _ok(client.get(f"{URL}/{made['id']}", headers=_h(keys, "a_read")))["member_list"] == []
    listed = _ok(client.get(URL, headers=_h(keys, "a2")))  # any member may read
    assert [t["name"] for t in listed["items"]] == ["Field crew"] and listed["total"] == 1
    assert _error(client.post(URL, json={"name": "Field crew"}, headers=_h(keys)), 409)
    renamed = _ok(client.patch(f"{URL}/{made['id']}", json={"name": "Crew"}, headers=_h(keys)))
    assert renamed["name"] == "Crew"
    assert _ok(client.get(URL, headers=_h(keys, "b")))["items"] == []  # org B has none
    assert client.delete(f"{URL}/{made['id']}", headers=_h(keys)).status_code == 204
    _error(client.get(f"{URL}/{made['id']}", headers=_h(keys)), 404)
    assert [e["name"] for e in _audit(world, "team.create")][-1] == "Field crew"
    assert _audit(world, "team.rename")[-1]["to"] == "Crew"
    assert _audit(world, "team.delete")[-1]["actor"] == "a1@a.example"


def test_members_devices_locations(client: FlaskClient, keys: dict[str, Any],
                                   world: World) -> None:
    team = _ok(client.post(URL, json={"name": "North"}, headers=_h(keys)), 201)
    base = f"{URL}/{team['id']}"
    a2 = str(keys["ids"]["a2"])
    added = _ok(client.put(f"{base}/members/{a2}", headers=_h(keys)))
    assert added["added"] is True and added["member"]["label"] == "a2@a.example"
    assert _ok(client.put(f"{base}/members/{a2}", headers=_h(keys)))["added"] is False
    _ok(client.put(f"{base}/devices/D2", headers=_h(keys)))
    _ok(client.put(f"{base}/locations/{world.la}", headers=_h(keys)))
    got = _ok(client.get(base, headers=_h(keys, "a_read")))
    assert (got["members"], got["devices"], got["locations"]) == (1, 1, 1)
    assert [m["email"] for m in got["member_list"]] == ["a2@a.example"]
    assert [d["name"] for d in got["device_list"]] == ["D2"]
    assert [loc["id"] for loc in got["location_list"]] == [str(world.la)]
    assert _ok(client.get(f"{base}/devices", headers=_h(keys)))["total"] == 1

    assert client.delete(f"{base}/devices/D2", headers=_h(keys)).status_code == 204
    _error(client.delete(f"{base}/devices/D2", headers=_h(keys)), 404)  # not in it any more
    assert client.delete(f"{base}/members/{a2}", headers=_h(keys)).status_code == 204
    assert _ok(client.get(f"{base}/members", headers=_h(keys)))["items"] == []
    assert _audit(world, "team.member_add")[-1]["member"] == "a2@a.example"
    assert _audit(world, "team.device_remove")[-1]["device"] == "D2"
    assert _audit(world, "team.location_add")[-1]["location_id"] == str(world.la)


def test_writes_are_for_administrators(client: FlaskClient, keys: dict[str, Any],
                                       world: World) -> None:
    team = _ok(client.post(URL, json={"name": "Admins only"}, headers=_h(keys)), 201)
    who = "a2_basic"
    # A member's role does not allow teams:write (people.roles.ROLE_SCOPES).
    assert "teams:write" in _error(client.post(URL, json={"name": "x"},
                                               headers=_h(keys, who)), 403)
    _error(client.patch(f"{URL}/{team['id']}", json={"name": "y"}, headers=_h(keys, who)), 403)
    _error(client.delete(f"{URL}/{team['id']}", headers=_h(keys, who)), 403)
    _error(client.put(f"{URL}/{team['id']}/devices/D1", headers=_h(keys, who)), 403)
    _error(client.delete(f"{URL}/{uuid4()}/members/{uuid4()}", headers=_h(keys, who)), 403)
    assert _ok(client.get(f"{URL}/{team['id']}", headers=_h(keys, who)))["name"] == "Admins only"
    # A key without teams:write cannot write, whoever made it.
    assert "teams:write" in _error(client.post(URL, json={"name": "x"},
                                               headers=_h(keys, "a_read")), 403)


def test_other_organisations_objects_are_404(client: FlaskClient, keys: dict[str, Any],
                                             world: World) -> None:
    team = _ok(client.post(URL, json={"name": "Tenancy"}, headers=_h(keys)), 201)
    theirs = _ok(client.post(URL, json={"name": "Theirs"}, headers=_h(keys, "b")), 201)
    base = f"{URL}/{team['id']}"
    # Org B's team, device, location and user answer exactly as missing ones do.
    missing_team = str(uuid4())
    for suffix in ("", "/members", "/devices", "/locations"):
        one = _error(client.get(f"{URL}/{theirs['id']}{suffix}", headers=_h(keys)), 404)
        two = _error(client.get(f"{URL}/{missing_team}{suffix}", headers=_h(keys)), 404)
        assert one.replace(theirs["id"], "X") == two.replace(missing_team, "X")
    _error(client.patch(f"{URL}/{theirs['id']}", json={"name": "z"}, headers=_h(keys)), 404)
    _error(client.delete(f"{URL}/{theirs['id']}", headers=_h(keys)), 404)
    for missing, foreign in (("NOPE", "B1"), (str(uuid4()), str(world.bl)),
                             (str(uuid4()), str(keys["ids"]["b1"]))):
        kind = "devices" if foreign == "B1" else (
            "locations" if foreign == str(world.bl) else "members")
        one = client.put(f"{base}/{kind}/{foreign}", headers=_h(keys))
        two = client.put(f"{base}/{kind}/{missing}", headers=_h(keys))
        assert one.status_code == two.status_code == 404
        assert _error(one, 404).replace(foreign, "X") == _error(two, 404).replace(missing, "X")
    # Nothing of org B was linked, and org B's team is untouched.
    assert _ok(client.get(base, headers=_h(keys)))["devices"] == 0
    assert _ok(client.get(f"{URL}/{theirs['id']}", headers=_h(keys, "b")))["name"] == "Theirs"


def test_bad_input_is_a_400_naming_it(client: FlaskClient, keys: dict[str, Any]) -> None:
    for body in ({}, {"name": ""}, {"name": "   "}, {"name": "x" * 201}, {"name": 5},
                 {"name": "ok", "id": "mine"}, {"name": "ok", "extra": 1}):
        message = _error(client.post(URL, json=body, headers=_h(keys)), 400)
        assert "name" in message or "id" in message or "extra" in message, (body, message)
    _error(client.post(URL, data="{", headers={**_h(keys), "Content-Type": "application/json"}),
           400)
    _error(client.get(f"{URL}/not-a-uuid", headers=_h(keys)), 404)
    _error(client.get(URL, query_string={"limit": "0"}, headers=_h(keys)), 400)
    team = _ok(client.post(URL, json={"name": "Input"}, headers=_h(keys)), 201)
    _error(client.put(f"{URL}/{team['id']}/members/not-a-uuid", headers=_h(keys)), 404)
    _error(client.put(f"{URL}/{team['id']}/locations/not-a-uuid", headers=_h(keys)), 404)


def test_ending_a_membership_ends_its_team_memberships(client: FlaskClient,
                                                       keys: dict[str, Any],
                                                       world: World) -> None:
    """Migration 0155's trigger: removed from the organisation, a user leaves its teams, so a
    later membership there starts with none; a user who is no member cannot be added."""
    team = _ok(client.post(URL, json={"name": "Leavers"}, headers=_h(keys)), 201)
    with psycopg.connect(world.url) as conn:
        gone = accounts.create_user(conn, org=world.org_a, email="gone@a.example",
                                    password="gone-password")
        conn.commit()
    _ok(client.put(f"{URL}/{team['id']}/members/{gone}", headers=_h(keys)))
    with psycopg.connect(world.url) as conn:
        conn.execute("DELETE FROM memberships WHERE user_id = %s", (gone,))
        conn.execute("UPDATE users SET active = true WHERE id = %s", (gone,))
        conn.commit()
        assert conn.execute("SELECT count(*) FROM team_members WHERE user_id = %s",
                            (gone,)).fetchone() == (0,)
    _error(client.put(f"{URL}/{team['id']}/members/{gone}", headers=_h(keys)), 404)
