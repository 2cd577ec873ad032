"""The dashboard's invitations and teams pages in-process (issue 23): the invite form on the
members page (the link shown once when not mailed, the pending list, revoke), an
administrator's reset link for a member, and the teams pages (list, create, rename, delete; a
team's members, devices and locations added and removed). Every write needs the session's
CSRF value and goes through the API, whose rules decide: a member sees teams read-only and
gets the API's 403 message; another organisation's team, device or user is the same 404 as a
missing one; bad input is a 4xx page saying what was wrong."""

from __future__ import annotations

import html
import re
from pathlib import Path
from typing import Any

import psycopg
from flask.testing import FlaskClient

from people import accounts, links
from serve.web.peoplepages import invite_body
from testbed.receivers import Receiver
from tests.support.apps import close_app, make_app
from tests.support.dashboard import World, csrf_of, shows, sign_in
from tests.support.delivery import SEAL_KEY
from tests.support.ingesting import wait_for
from tests.support.invites import mail_sink, smtp_settings

MISSING = "00000000-0000-0000-0000-000000000000"


def _text(response: Any) -> str:
    return str(response.get_data(as_text=True))


def _said(response: Any) -> str:
    """The page's error line (the API's message), or the error page's message."""
    found = re.search(r'<p class="error" id="[a-z-]+">([^<]*)</p>', _text(response))
    assert found, _text(response)[:2000]
    return found.group(1)


def _value(page: str, element: str) -> str:
    found = re.search(rf'id="{element}" readonly value="([^"]+)"', page)
    assert found, page[:3000]
    return found.group(1)


def _b(world: World, sql: str) -> str:
    with psycopg.connect(world.url) as conn:
        return str(conn.execute(sql, (world.org_b,)).fetchone()[0])


def test_invite_body_passes_the_form_on_as_typed() -> None:
    assert invite_body({"email": " a@b.example ", "role": "viewer", "teams_only": "on"}) == {
        "email": "a@b.example", "role": "viewer", "teams_only": True}
    assert invite_body({})["teams_only"] is False and invite_body({})["email"] == ""


def test_invite_form_shows_the_link_once_lists_and_revokes(client: FlaskClient,
                                                          world: World) -> None:
    sign_in(client, "admin@a.example")
    page = _text(client.get("/dashboard/members"))
    assert 'id="invite-form"' in page and 'id="invitations"' in page
    csrf = csrf_of(page)
    assert client.post("/dashboard/invitations", data={
        "email": "new@a.example", "role": "viewer"}).status_code == 400  # no CSRF
    done = client.post("/dashboard/invitations", data={
        "csrf": csrf, "email": "new@a.example", "role": "viewer", "teams_only": "on"})
    assert done.status_code == 200, _text(done)[:2000]
    shown = _text(done)
    link = _value(shown, "invite-link")
    assert links.ACCEPT_PATH in link and 'id="invite-not-mailed"' in shown
    assert 'data-copy="invite-link"' in shown and "js/copy.js" in shown
    listed = _text(client.get("/dashboard/members"))
    assert 'data-email="new@a.example"' in listed and link not in listed  # shown once
    invitation = re.search(r'<tr data-id="([0-9a-f-]+)" data-email="new@a.example"',
                           listed).group(1)  # type: ignore[union-attr]
    # The API's refusals, with what was typed kept.
    bad = client.post("/dashboard/invitations", data={"csrf": csrf, "email": "x@a.example",
                                                      "role": "king"})
    assert bad.status_code == 400 and "role" in _said(bad)
    assert 'value="x@a.example"' in _text(bad)
    # Revoke: the link stops working.
    gone = client.post(f"/dashboard/invitations/{invitation}/revoke", data={"csrf": csrf})
    assert gone.status_code == 303
    assert 'data-email="new@a.example"' not in _text(client.get("/dashboard/members"))
    refused = client.post("/api/v2/auth/accept", json={
        "token": link.rsplit("/", 1)[1], "password": "a-new-password-1"})
    assert refused.status_code == 400
    for which in (invitation, MISSING, "nope"):
        assert client.post(f"/dashboard/invitations/{which}/revoke",
                           data={"csrf": csrf}).status_code == 404, which


def test_with_smtp_the_page_says_mailed_and_shows_no_link(world: World, tmp_path: Path,
                                                         processes: None) -> None:
    with mail_sink(world, tmp_path) as sink:
        _mailed_page(world, sink)


def _mailed_page(world: World, sink: Receiver) -> None:
    app = make_app(world.url, public_url="http://sds.example", apikey_seal_keys=SEAL_KEY,
                   **smtp_settings(sink.port))
    try:
        client = app.test_client()
        sign_in(client, "admin@a.example")
        csrf = csrf_of(_text(client.get("/dashboard/members")))
        done = client.post("/dashboard/invitations", data={
            "csrf": csrf, "email": "mailed@a.example", "role": "member"})
        shown = _text(done)
        assert done.status_code == 200 and 'id="invite-mailed"' in shown
        assert "mailed to mailed@a.example" in shown and 'id="invite-link"' not in shown
        mails = wait_for(sink.received, 20, what="the invitation email")
        assert mails[0]["rcpt_tos"] == ["mailed@a.example"]
        assert "http://sds.example" + links.ACCEPT_PATH in mails[0]["data"]
        assert 'data-email="mailed@a.example"' in _text(client.get("/dashboard/members"))
    finally:
        close_app(app)


def test_reset_link_for_a_member_and_the_same_404_for_others(client: FlaskClient,
                                                             world: World) -> None:
    sign_in(client, "admin@a.example")
    csrf = csrf_of(_text(client.get("/dashboard/members")))
    with psycopg.connect(world.url) as conn:
        user = conn.execute("SELECT id FROM users WHERE email = 'user@a.example'").fetchone()[0]
    made = client.post(f"/dashboard/members/{user}/reset-link", data={"csrf": csrf})
    assert made.status_code == 200
    assert links.ACCEPT_PATH in _value(_text(made), "reset-link")
    assert "Password-reset link for user@a.example" in _text(made)
    b_user = _b(world, "SELECT user_id FROM memberships WHERE org_id = %s")
    for who in (MISSING, "nope", b_user):
        assert client.post(f"/dashboard/members/{who}/reset-link",
                           data={"csrf": csrf}).status_code == 404, who


def test_members_cannot_invite(client: FlaskClient, world: World) -> None:
    sign_in(client, "user@a.example")
    page = _text(client.get("/dashboard/members"))
    assert 'id="invite-form"' not in page and 'id="invitations"' not in page
    refused = client.post("/dashboard/invitations", data={
        "csrf": csrf_of(page), "email": "sneaky@a.example", "role": "owner"})
    assert refused.status_code == 403 and "orgs:write" in _said(refused)


def test_admin_makes_renames_fills_empties_and_deletes_a_team(client: FlaskClient,
                                                             world: World) -> None:
    sign_in(client, "admin@a.example")
    page = _text(client.get("/dashboard/teams"))
    assert 'id="team-form"' in page and 'href="/dashboard/teams"' in page  # the nav link
    csrf = csrf_of(page)
    assert client.post("/dashboard/teams", data={"name": "Crew"}).status_code == 400  # no CSRF
    made = client.post("/dashboard/teams", data={"csrf": csrf, "name": "Crew"})
    assert made.status_code == 303
    team = made.headers["Location"].rsplit("/", 1)[1]
    taken = client.post("/dashboard/teams", data={"csrf": csrf, "name": "Crew"})
    assert taken.status_code == 409 and 'value="Crew"' in _text(taken)
    empty = client.post("/dashboard/teams", data={"csrf": csrf, "name": ""})
    assert empty.status_code == 400 and "name" in _said(empty)
    shown = _text(client.get(f"/dashboard/teams/{team}"))
    assert 'id="add-devices"' in shown and '<option value="A2">A2</option>' in shown
    assert not shows(shown, "B1")  # another organisation's device is never offered
    with psycopg.connect(world.url) as conn:
        user = str(conn.execute("SELECT id FROM users WHERE email = 'user@a.example'"
                                ).fetchone()[0])
    for kind, target in (("devices", "A2"), ("members", user), ("locations", str(world.north))):
        assert client.post(f"/dashboard/teams/{team}/{kind}/add",
                           data={"csrf": csrf, "target": target}).status_code == 303, kind
    shown = _text(client.get(f"/dashboard/teams/{team}"))
    assert 'data-label="A2"' in shown and 'data-label="user@a.example"' in shown
    assert 'data-label="North field"' in shown and '<option value="A2">' not in shown
    record = client.get(f"/api/v2/teams/{team}").get_json()
    assert (record["devices"], record["members"], record["locations"]) == (1, 1, 1)
    # Another organisation's device, user or location, and a missing one: the same 404.
    for kind, target in (("devices", "B1"), ("devices", "Z9"), ("members", MISSING),
                         ("members", _b(world, "SELECT user_id FROM memberships"
                                                " WHERE org_id = %s")),
                         ("locations", str(world.b_field))):
        assert client.post(f"/dashboard/teams/{team}/{kind}/add",
                           data={"csrf": csrf, "target": target}).status_code == 404, target
    none = client.post(f"/dashboard/teams/{team}/devices/add", data={"csrf": csrf})
    assert none.status_code == 400 and "target" in _said(none)
    assert client.post(f"/dashboard/teams/{team}/pets/add",
                       data={"csrf": csrf, "target": "A1"}).status_code == 404
    assert client.post(f"/dashboard/teams/{team}/pets/A1/remove",
                       data={"csrf": csrf}).status_code == 404
    assert client.post(f"/dashboard/teams/{team}/devices/A2/remove",
                       data={"csrf": csrf}).status_code == 303
    assert client.get(f"/api/v2/teams/{team}").get_json()["devices"] == 0
    assert client.post(f"/dashboard/teams/{team}/devices/A2/remove",
                       data={"csrf": csrf}).status_code == 404  # not in it any more
    renamed = client.post(f"/dashboard/teams/{team}/rename", data={"csrf": csrf,
                                                                   "name": "Field crew"})
    assert renamed.status_code == 303 and "renamed=1" in renamed.headers["Location"]
    assert 'data-name="Field crew"' in _text(client.get("/dashboard/teams"))
    assert client.post(f"/dashboard/teams/{team}/delete", data={"csrf": csrf}).status_code == 303
    assert client.get(f"/dashboard/teams/{team}").status_code == 404
    assert client.post(f"/dashboard/teams/{team}/delete", data={"csrf": csrf}).status_code == 404


def test_a_team_route_parses_the_removed_id_with_the_converter(client: FlaskClient,
                                                               world: World) -> None:
    """A member's or a location's id in a team's removal route goes through the `objid`
    converter like every object route (serve/ids.py): a malformed one is the unknown object's
    404 page once the visitor is signed in, before the form is looked at (the CSRF value
    too), as on every other object page; well-formed ids are removed through the API."""
    sign_in(client, "admin@a.example")
    csrf = csrf_of(_text(client.get("/dashboard/teams")))
    team = client.post("/dashboard/teams", data={"csrf": csrf, "name": "Ids"}
                       ).headers["Location"].rsplit("/", 1)[1]
    with psycopg.connect(world.url) as conn:
        user = str(conn.execute("SELECT id FROM users WHERE email = 'user@a.example'"
                                ).fetchone()[0])
    for kind, target in (("members", user), ("locations", str(world.north))):
        assert client.post(f"/dashboard/teams/{team}/{kind}/add",
                           data={"csrf": csrf, "target": target}).status_code == 303, kind
    shown = _text(client.get(f"/dashboard/teams/{team}"))
    for path in (f"/dashboard/teams/{team}/members/{user}/remove",
                 f"/dashboard/teams/{team}/locations/{world.north}/remove"):
        assert f'action="{path}"' in shown, path  # the page's Remove buttons
    for kind, what in (("members", "user"), ("locations", "location")):
        for typed, named in (("not-a-uuid", "not-a-uuid"), ("1234", "1234"), ("%3F", "?")):
            r = client.post(f"/dashboard/teams/{team}/{kind}/{typed}/remove")  # no CSRF value
            said = html.unescape(_said(r))
            assert (r.status_code, said) == (404, f"unknown {what} {named!r}"), (kind, typed)
        assert client.post(f"/dashboard/teams/{team}/{kind}/{MISSING}/remove",
                           data={"csrf": csrf}).status_code == 404
    assert client.post(f"/dashboard/teams/{team}/members/{user}/remove",
                       data={"csrf": csrf}).status_code == 303
    assert client.post(f"/dashboard/teams/{team}/locations/{world.north}/remove",
                       data={"csrf": csrf}).status_code == 303
    record = client.get(f"/api/v2/teams/{team}").get_json()
    assert (record["members"], record["locations"]) == (0, 0)
    client.post("/dashboard/logout", data={"csrf": csrf})
    signed_out = client.post(f"/dashboard/teams/{team}/members/not-a-uuid/remove")
    assert signed_out.status_code == 302 and "/dashboard/login" in signed_out.headers["Location"]


def test_members_see_teams_read_only_and_others_teams_are_missing(client: FlaskClient,
                                                                  world: World) -> None:
    with psycopg.connect(world.url) as conn:
        a_team = str(conn.execute("INSERT INTO teams (org_id, name) VALUES (%s, 'Seen')"
                                  " RETURNING id", (world.org_a,)).fetchone()[0])
        b_team = str(conn.execute("INSERT INTO teams (org_id, name) VALUES (%s, 'B team')"
                                  " RETURNING id", (world.org_b,)).fetchone()[0])
        accounts.create_user(conn, org=world.org_a, email="watcher@a.example",
                             password="watcher-pass-1", role="member")
    sign_in(client, "watcher@a.example", "watcher-pass-1")
    page = _text(client.get("/dashboard/teams"))
    assert 'data-name="Seen"' in page and 'id="team-form"' not in page and "B team" not in page
    team = _text(client.get(f"/dashboard/teams/{a_team}"))
    assert 'id="team-title"' in team and "<form class=\"rule\"" not in team
    csrf = csrf_of(page)
    refused = client.post("/dashboard/teams", data={"csrf": csrf, "name": "Mine"})
    assert refused.status_code == 403 and "teams:write" in _said(refused)
    refused = client.post(f"/dashboard/teams/{a_team}/devices/add",
                          data={"csrf": csrf, "target": "A1"})
    assert refused.status_code == 403 and "teams:write" in _said(refused)
    missing = client.get(f"/dashboard/teams/{MISSING}")
    other = client.get(f"/dashboard/teams/{b_team}")
    assert missing.status_code == other.status_code == 404
    assert _said(other).replace(b_team, "X") == _said(missing).replace(MISSING, "X")
    assert client.get("/dashboard/teams/nope").status_code == 404
