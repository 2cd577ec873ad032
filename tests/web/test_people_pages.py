"""The dashboard's people pages in-process (issue 23): API keys (scopes offered by the API's
rule, the value shown once, deactivate, reactivate, delete), members (roles from the API's
OpenAPI document, role change, removal behind a confirm step, read-only for members), the
preferences form (PATCH /users/me), a location's form (PATCH /locations/{id}, the rollups
marked, read-only for members) and the audit log (administrators, filtered, paged). Every write
needs the session's CSRF value; another organisation's objects are the same 404 as missing ones;
bad input is a 4xx page saying what was wrong. The pure parts are tested alone."""

from __future__ import annotations

import re
from typing import Any

import psycopg
import pytest
from flask.testing import FlaskClient

from people import accounts
from serve.web.peoplepages import account_body, masked, roles_in
from serve.web.placepages import audit_query, location_body, parse_schedule, schedule_text
from shared.errors import BadRequest
from tests.support.dashboard import World, csrf_of, sign_in

MISSING = "00000000-0000-0000-0000-000000000000"


def _text(response: Any) -> str:
    return str(response.get_data(as_text=True))


def _said(response: Any) -> str:
    """The page's error line (the API's message), or the error page's message."""
    found = re.search(r'<p class="error" id="[a-z-]+">([^<]*)</p>', _text(response))
    assert found, _text(response)[:2000]
    return found.group(1)


def _csrf(client: FlaskClient, page: str = "/dashboard/keys") -> str:
    return csrf_of(_text(client.get(page)))


def _person(world: World, email: str, *, admin: bool = False) -> str:
    with psycopg.connect(world.url) as conn:
        return str(accounts.create_user(conn, org=world.org_a, email=email,
                                        password="people-pass-1",
                                        role="admin" if admin else "member"))


# ---- pure parts --------------------------------------------------------------------------


def test_schedule_lines_round_trip_and_a_bad_line_is_named() -> None:
    entries = parse_schedule("2026-05-01 0.3\n\n2026-06-15, 1.15\n2026-09-01=0.5\n")
    assert entries == [{"start_date": "2026-05-01", "kc": 0.3},
                       {"start_date": "2026-06-15", "kc": 1.15},
                       {"start_date": "2026-09-01", "kc": 0.5}]
    assert schedule_text(entries) == "2026-05-01 0.3\n2026-06-15 1.15\n2026-09-01 0.5"
    # A value that is not a number goes to the API as typed (its 400 names the field).
    assert parse_schedule("2026-05-01 high") == [{"start_date": "2026-05-01", "kc": "high"}]
    with pytest.raises(BadRequest, match="line 2"):
        parse_schedule("2026-05-01 0.3\n2026-06-15")


def test_location_body_sends_only_what_changed() -> None:
    current = {"name": "N", "tz_name": "UTC", "gps": [10.0, 50.0], "elev": 300.0, "kc": None,
               "crop": None, "notes": None, "kc_schedule": []}
    same = {"name": "N", "tz_name": "UTC", "lat": "50", "lon": "10", "elev": "300",
            "kc": "", "crop": "", "notes": "", "kc_schedule": ""}
    assert location_body(same, current) == {}
    changed = location_body({**same, "tz_name": "Europe/Paris", "elev": "", "lat": "",
                             "lon": "", "crop": "maize"}, current)
    assert changed == {"tz_name": "Europe/Paris", "elev": None, "gps": None, "crop": "maize"}
    assert location_body({**same, "elev": "high"}, current) == {"elev": "high"}


def test_roles_come_from_the_openapi_document_and_the_members() -> None:
    doc = {"paths": {"/api/v2/orgs/{org_id}/users/{user_id}": {"put": {"requestBody": {
        "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Role"}}}}}}},
        "components": {"schemas": {"Role": {"properties": {"role": {
            "enum": ["owner", "admin", "member"]}}}}}}
    assert roles_in(doc, ["member", "viewer"]) == ["owner", "admin", "member", "viewer"]
    assert roles_in({}, ["member", "admin", "member"]) == ["member", "admin"]


def test_small_parts() -> None:
    assert masked("sdsk_abcdefghijklmnopqrstuvwxyz") == "sdsk_abcd...wxyz"
    assert masked("sdsk_xxxx...abcd") == "sdsk_xxxx...abcd" and masked(None) == ""
    assert account_body({"name": " Ada ", "temp": "f", "zone": "Europe/Paris"}) == {
        "name": "Ada", "preferences": {"units": {"temp": "f"}, "zone": "Europe/Paris"}}
    assert account_body({"name": ""})["name"] is None
    assert audit_query({"action": " member. ", "page": "2", "other": "x"}) == {
        "action": "member.", "page": "2"}


# ---- API keys ----------------------------------------------------------------------------


def test_keys_page_makes_shows_once_deactivates_reactivates_and_deletes(
        client: FlaskClient) -> None:
    sign_in(client, "user@a.example")
    page = _text(client.get("/dashboard/keys"))
    offered = set(re.findall(r'name="scopes" value="([^"]+)"', page))
    # A member is offered the scopes the API lets them grant: not the administrators' ones.
    assert "data:read" in offered and "devices:read" in offered
    assert not offered & {"orgs:write", "users:write", "teams:write"}
    made = client.post("/dashboard/keys", data={
        "csrf": csrf_of(page), "name": "script", "scopes": ["data:read", "devices:read"]})
    assert made.status_code == 200, _text(made)
    value = re.search(r'id="new-key" readonly value="([^"]+)"', _text(made)).group(1)
    headers = {"Authorization": f"Apikey {value}"}
    assert client.application.test_client().get("/api/v2/devices",
                                                headers=headers).status_code == 200
    listed = _text(client.get("/dashboard/keys"))
    assert value not in listed and masked(value) in listed  # shown once, then masked
    key_id = next(k["id"] for k in client.get("/api/v2/apikeys").get_json()
                  if k["name"] == "script")
    csrf = csrf_of(listed)
    api = client.application.test_client()
    assert client.post(f"/dashboard/keys/{key_id}/active",
                       data={"active": "false"}).status_code == 400  # no CSRF value
    assert client.post(f"/dashboard/keys/{key_id}/active",
                       data={"csrf": csrf, "active": "false"}).status_code == 303
    assert api.get("/api/v2/devices", headers=headers).status_code == 401
    assert "Reactivate" in _text(client.get("/dashboard/keys"))
    assert client.post(f"/dashboard/keys/{key_id}/active",
                       data={"csrf": csrf, "active": "true"}).status_code == 303
    assert api.get("/api/v2/devices", headers=headers).status_code == 200
    assert client.post(f"/dashboard/keys/{key_id}/active",
                       data={"csrf": csrf, "active": "maybe"}).status_code == 400
    # Delete asks first (issue 34: it took effect at once, with no word): nothing is deleted
    # until the confirm form is sent, and then the page says so.
    asked = client.post(f"/dashboard/keys/{key_id}/delete", data={"csrf": csrf})
    assert asked.status_code == 200 and 'id="key-confirm-delete"' in _text(asked)
    assert "script" in _text(asked) and 'name="confirm" value="yes"' in _text(asked)
    assert api.get("/api/v2/devices", headers=headers).status_code == 200
    gone = client.post(f"/dashboard/keys/{key_id}/delete", data={"csrf": csrf, "confirm": "yes"})
    assert gone.status_code == 303
    assert gone.headers["Location"].endswith("/dashboard/keys?deleted=1")
    assert api.get("/api/v2/devices", headers=headers).status_code == 401
    assert "Key deleted" in _text(client.get("/dashboard/keys?deleted=1"))
    # Deleted, missing and another user's keys are the same 404, asked or confirmed.
    assert client.post(f"/dashboard/keys/{key_id}/delete", data={"csrf": csrf}).status_code == 404
    assert client.post(f"/dashboard/keys/{key_id}/delete",
                       data={"csrf": csrf, "confirm": "yes"}).status_code == 404
    other = client.application.test_client()
    sign_in(other, "user@b.example")
    theirs = other.post("/dashboard/keys", data={"csrf": _csrf(other), "name": "b",
                                                 "scopes": ["data:read"]})
    b_key = next(k["id"] for k in other.get("/api/v2/apikeys").get_json() if k["name"] == "b")
    assert theirs.status_code == 200
    assert client.post(f"/dashboard/keys/{b_key}/delete", data={"csrf": csrf}).status_code == 404
    assert client.post(f"/dashboard/keys/{b_key}/delete",
                       data={"csrf": csrf, "confirm": "yes"}).status_code == 404


def test_keys_page_shows_the_api_refusals(client: FlaskClient) -> None:
    sign_in(client, "user@a.example")
    csrf = _csrf(client)
    none = client.post("/dashboard/keys", data={"csrf": csrf, "name": "nothing"})
    assert none.status_code == 400 and "at least one scope" in _said(none)
    assert 'value="nothing"' in _text(none)  # what was typed is kept
    admin_only = client.post("/dashboard/keys", data={"csrf": csrf, "name": "x",
                                                      "scopes": ["orgs:write"]})
    assert admin_only.status_code == 403 and "orgs:write" in _said(admin_only)
    past = client.post("/dashboard/keys", data={"csrf": csrf, "name": "x", "exp": "2001-01-01",
                                                 "scopes": ["data:read"]})
    assert past.status_code == 400 and "future" in _said(past)
    admin = client.application.test_client()
    sign_in(admin, "admin@a.example")
    assert 'value="orgs:write"' in _text(admin.get("/dashboard/keys"))


# ---- members -----------------------------------------------------------------------------


def test_members_page_changes_roles_and_removes_after_a_confirm_step(
        client: FlaskClient, world: World) -> None:
    target = _person(world, "helper@a.example")
    sign_in(client, "admin@a.example")
    page = _text(client.get("/dashboard/members"))
    assert "helper@a.example" in page and 'class="remove-member"' in page
    # The role choices are the API's (its OpenAPI document): admin and member today.
    assert '<option value="admin"' in page and '<option value="member"' in page
    csrf = csrf_of(page)
    assert client.post(f"/dashboard/members/{target}/role",
                       data={"csrf": csrf, "role": "admin"}).status_code == 303
    assert client.get(f"/api/v2/users/{target}").get_json()["role"] == "admin"
    bad = client.post(f"/dashboard/members/{target}/role", data={"csrf": csrf, "role": "king"})
    assert bad.status_code == 400 and "role" in _said(bad) and "admin" in _said(bad)
    assert client.post(f"/dashboard/members/{target}/role",
                       data={"csrf": csrf, "role": "member"}).status_code == 303
    # The helper signs in; removal ends that session at once.
    helper = client.application.test_client()
    sign_in(helper, "helper@a.example", "people-pass-1")
    assert helper.get("/dashboard/members").status_code == 200
    confirm = client.get(f"/dashboard/members/{target}/remove")
    assert confirm.status_code == 200 and "confirm-remove" in _text(confirm)
    assert client.get(f"/dashboard/members/{target}/remove").status_code == 200  # GET: nothing
    assert client.post(f"/dashboard/members/{target}/remove").status_code == 400  # no CSRF
    gone = client.post(f"/dashboard/members/{target}/remove", data={"csrf": csrf})
    assert gone.status_code == 303
    assert "helper@a.example" not in _text(client.get("/dashboard/members"))
    assert "/dashboard/login" in helper.get("/dashboard/members").headers["Location"]
    # Removed, missing, malformed and another organisation's people: the same 404.
    with psycopg.connect(world.url) as conn:
        b_user = conn.execute("SELECT id FROM users WHERE email = 'user@b.example'").fetchone()[0]
    for who in (target, MISSING, "nope", str(b_user)):
        assert client.get(f"/dashboard/members/{who}/remove").status_code == 404, who
        assert client.post(f"/dashboard/members/{who}/remove",
                           data={"csrf": csrf}).status_code == 404, who


def test_the_last_administrator_stays_and_members_see_the_list_read_only(
        client: FlaskClient, world: World) -> None:
    sign_in(client, "admin@a.example")
    csrf = _csrf(client, "/dashboard/members")
    me = client.get("/api/v2/users/me").get_json()
    last = client.post(f"/dashboard/members/{me['id']}/role", data={"csrf": csrf,
                                                                    "role": "member"})
    assert last.status_code == 409 and "last owner" in _said(last)
    member = client.application.test_client()
    sign_in(member, "user@a.example")
    page = _text(member.get("/dashboard/members"))
    assert "admin@a.example" in page and "<select" not in page and "remove-member" not in page
    refused = member.post(f"/dashboard/members/{me['id']}/role",
                          data={"csrf": csrf_of(page), "role": "member"})
    assert refused.status_code == 403 and "orgs:write" in _said(refused)


# ---- preferences -------------------------------------------------------------------------


def test_preferences_form_saves_name_units_and_zone(client: FlaskClient) -> None:
    sign_in(client, "user@a.example")
    csrf = _csrf(client, "/dashboard/account")
    saved = client.post("/dashboard/account", data={
        "csrf": csrf, "name": "Ursula", "temp": "f", "pres": "kp", "size": "in",
        "ratio": "dec", "speed": "mph", "zone": "Europe/Paris"})
    assert saved.status_code == 303
    me = client.get("/api/v2/users/me").get_json()
    assert me["name"] == "Ursula" and me["preferences"]["zone"] == "Europe/Paris"
    assert me["preferences"]["units"] == {"temp": "f", "pres": "kp", "size": "in",
                                          "ratio": "dec", "speed": "mph"}
    page = _text(client.get("/dashboard/account?saved=1"))
    assert 'id="account-saved"' in page and '<option value="f" selected' in page
    # The device page opens in the saved units (the dashboard's defaults).
    assert '"temp": "f"' in _text(client.get("/dashboard/devices/A1")).replace("&#34;", '"')
    bad = client.post("/dashboard/account", data={"csrf": csrf, "name": "U", "zone": "Mars/Base"})
    assert bad.status_code == 400 and "Mars/Base" in _said(bad)
    assert 'value="Mars/Base"' in _text(bad)  # what was typed is kept
    worse = client.post("/dashboard/account", data={"csrf": csrf, "temp": "kelvin"})
    assert worse.status_code == 400 and "kelvin" in _said(worse)
    assert client.post("/dashboard/account", data={"name": "x"}).status_code == 400  # CSRF


# ---- a location --------------------------------------------------------------------------


def test_location_form_changes_zone_and_schedule_and_says_rollups_follow(
        client: FlaskClient, world: World) -> None:
    sign_in(client, "admin@a.example")
    page = _text(client.get(f"/dashboard/locations/{world.north}"))
    assert 'id="location-form"' in page and 'value="America/Chicago"' in page
    form = {"csrf": csrf_of(page), "name": "North field", "lat": "41.9", "lon": "-93.6",
            "elev": "300", "tz_name": "America/Denver", "crop": "maize", "kc": "",
            "kc_schedule": "2026-03-01 0.3\n2026-03-05 1.1", "notes": "east edge wet"}
    saved = client.post(f"/dashboard/locations/{world.north}", data=form)
    assert saved.status_code == 303, _text(saved)
    marked = int(re.search(r"marked=(\d+)", saved.headers["Location"]).group(1))
    assert marked > 0  # the week of readings: its local hours and days are re-cut
    shown = _text(client.get(saved.headers["Location"]))
    assert "will be recomputed" in shown and str(marked) in shown
    record = client.get(f"/api/v2/locations/{world.north}").get_json()
    assert record["tz_name"] == "America/Denver" and record["crop"] == "maize"
    assert record["kc_schedule"] == [{"start_date": "2026-03-01", "kc": 0.3},
                                     {"start_date": "2026-03-05", "kc": 1.1}]
    # Saving the same values changes nothing and marks nothing.
    again = client.post(f"/dashboard/locations/{world.north}",
                        data={**form, "csrf": csrf_of(shown)})
    assert "marked" not in again.headers["Location"]
    # The API's refusals, what was typed kept.
    bad_zone = client.post(f"/dashboard/locations/{world.north}",
                           data={**form, "tz_name": "Mars/Olympus"})
    assert bad_zone.status_code == 400 and "unknown time zone" in _said(bad_zone)
    assert 'value="Mars/Olympus"' in _text(bad_zone)
    bad_line = client.post(f"/dashboard/locations/{world.north}",
                           data={**form, "kc_schedule": "2026-03-01"})
    assert bad_line.status_code == 400 and "line 1" in _said(bad_line)
    bad_kc = client.post(f"/dashboard/locations/{world.north}",
                         data={**form, "kc_schedule": "2026-03-01 9"})
    assert bad_kc.status_code == 400 and "kc" in _said(bad_kc)
    assert client.post(f"/dashboard/locations/{world.north}",
                       data={**form, "csrf": ""}).status_code == 400
    for other in (world.b_field, MISSING, "nope"):
        assert client.get(f"/dashboard/locations/{other}").status_code == 404
        assert client.post(f"/dashboard/locations/{other}", data=form).status_code == 404


def test_members_see_a_location_read_only_and_cannot_save(
        client: FlaskClient, world: World) -> None:
    sign_in(client, "user@a.example")
    page = _text(client.get(f"/dashboard/locations/{world.north}"))
    assert 'id="location-facts"' in page and 'id="location-form"' not in page
    refused = client.post(f"/dashboard/locations/{world.north}", data={
        "csrf": csrf_of(_text(client.get("/dashboard/account"))), "name": "Mine",
        "tz_name": "UTC"})
    assert refused.status_code == 403
    assert "North field" in _text(client.get("/dashboard/locations"))


# ---- audit -------------------------------------------------------------------------------


def test_audit_page_lists_filters_and_pages_for_administrators(
        client: FlaskClient, world: World) -> None:
    sign_in(client, "admin@a.example")
    csrf = _csrf(client)
    for n in range(3):  # three key changes, and more than one page of entries with others
        client.post("/dashboard/keys", data={"csrf": csrf, "name": f"audited {n}",
                                             "scopes": ["data:read"]})
    page = _text(client.get("/dashboard/audit"))
    assert "apikey.create" in page and "admin@a.example" in page
    only = _text(client.get("/dashboard/audit?action=apikey."))
    actions = set(re.findall(r'<tr data-action="([^"]+)"', only))
    assert "apikey.create" in actions and actions <= {"apikey.create", "apikey.update",
                                                      "apikey.delete"}
    assert "audited 2" in only
    bad = client.get("/dashboard/audit?since=yesterday")
    assert bad.status_code == 400 and "since" in _text(bad) and "yesterday" in _text(bad)
    member = client.application.test_client()
    sign_in(member, "user@a.example")
    refused = member.get("/dashboard/audit")
    assert refused.status_code == 403 and 'id="audit-refused"' in _text(refused)
    b_admin = client.application.test_client()
    sign_in(b_admin, "user@b.example")
    assert "audited" not in _text(b_admin.get("/dashboard/audit"))


def test_audit_pages_through_older_entries(client: FlaskClient, app_overrides: Any) -> None:
    sign_in(client, "admin@a.example")
    csrf = _csrf(client, "/dashboard/account")
    for n in range(52):  # more than one page of 50
        client.post("/dashboard/account", data={"csrf": csrf, "name": f"Admin {n}"})
    first = _text(client.get("/dashboard/audit?action=user.update"))
    assert 'id="audit-older"' in first and 'id="audit-newer"' not in first
    older = re.search(r'id="audit-older" href="([^"]+)"', first).group(1).replace("&amp;", "&")
    second = _text(client.get(older))
    assert 'id="audit-newer"' in second and "user.update" in second
