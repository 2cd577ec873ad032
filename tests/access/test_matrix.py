"""The authorization matrix (reliability plan S1): every /api/v2 route and method against
every kind of caller, each cell with its expected status. (S2, other organisation's object vs
a missing one, is test_existence_oracle.py.)

Callers: none, wrong password, basic, bearer, expired and revoked tokens, API keys with and
without the needed scope, expired, deactivated and deleted keys, org B's user and key
(another organisation), and a signed-in dashboard session cookie of org A's and of org B's
user (serve.web.session: it counts for GET and HEAD only, never for a write). The roles of
memberships (issue 23): a1 is a `member` of org A; an owner, an admin and a viewer of org A;
a user at home in org B who is also a viewer of org A, acting in B with Basic
(`other_org_multi`: another organisation's caller, who may list A among their own) and in A
with a token bound to it (`multi_token_a`: a viewer). A test also
checks that the table covers every route the app serves, so a new endpoint cannot ship without
its row.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from typing import Any
from uuid import UUID, uuid4

import psycopg
import pytest
from flask import Flask
from flask.testing import FlaskClient

from people import accounts, credentials, links, roles
from people.principal import USER_ONLY
from shared import alertrules, alertstore, audit
from shared.config import Settings
from tests.support.access_world import (
    PASSWORDS,
    World,
    apikey,
    basic,
    bearer,
    insert_token,
    new_key,
)
from tests.support.apps import plain_rule

OK_STATUSES = (200, 204)


@dataclass(frozen=True)
class Route:
    """One endpoint: method, path (from the world), body, the scope decision 11 requires, its
    success status, and whether the path names one of org A's objects."""

    name: str
    method: str
    rule: str  # the url_map rule it exercises
    path: Callable[[World, psycopg.Connection], str]
    scope: str | None  # None: public
    ok: int = 200
    body: dict[str, Any] | Callable[[World], dict[str, Any]] | None = None
    a_object: bool = False  # another organisation gets 404 here
    basic_status: int | None = None  # when basic differs from bearer
    other_org_status: int | None = None  # when another organisation's caller differs
    admin_only: bool = False  # owners and administrators of the organisation only
    owner_only: bool = False  # owners of the organisation only (the email settings)
    own_object: bool = False  # the object is a1's own (their key): other users of A get 404


def _a_rule(world: World, conn: psycopg.Connection) -> str:
    """A new alert rule of org A (one per cell: DELETE removes it)."""
    rid = alertstore.create(conn, world.org_a, alertrules.parse(RULE_BODY))
    conn.commit()
    return str(rid)


def _a_silence(world: World, conn: psycopg.Connection) -> str:
    """A new silence of org A's device (one per cell: DELETE removes it)."""
    row = conn.execute("INSERT INTO alert_silences (org_id, kind, device, starts_at, ends_at)"
                       " VALUES (%s, 'silence', %s, now(), now() + interval '1 hour')"
                       " RETURNING id", (world.org_a, world.dev_a)).fetchone()
    conn.commit()
    assert row is not None
    return str(row[0])


def _a_device(world: World, conn: psycopg.Connection) -> str:
    """A new device of org A (one per cell: retiring it is once only)."""
    name = f"mx-{uuid4().hex[:12]}"
    conn.execute("INSERT INTO devices (org_id, name) VALUES (%s, %s)", (world.org_a, name))
    conn.commit()
    return name


@pytest.fixture(scope="module")
def app_overrides(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """The access world's settings, and a scratch broker password file for the fleet's
    device writes (no broker runs: the reload is skipped)."""
    return {"login_max_failures": 10_000, "login_address_max_failures": 10_000,
            "broker_passwd_file": str(tmp_path_factory.mktemp("matrix-broker") / "passwd")}


def _a_event(world: World, conn: psycopg.Connection) -> str:
    """A new event of org A."""
    row = conn.execute("INSERT INTO alert_events (org_id, kind, device, at, title) VALUES"
                       " (%s, 'firing', %s, now(), 'matrix') RETURNING id",
                       (world.org_a, world.dev_a)).fetchone()
    conn.commit()
    return str(row[0]) if row else ""


RULE_BODY = {"name": "Matrix", "table": "calibrated", "column": "tair",
             "scope": {"organisation": True}, "condition": {"op": "<", "threshold": 0}}


def _fresh_a1_key(world: World, conn: psycopg.Connection) -> str:
    key_id, _value = new_key(conn, world.a1, ["data:read"])
    conn.commit()
    return str(key_id)


def _fresh_annotation(world: World, conn: psycopg.Connection) -> str:
    row = conn.execute("INSERT INTO annotations (org_id, location_id, start_time, text)"
                       " VALUES (%s, %s, now(), 'matrix') RETURNING id",
                       (world.org_a, world.loc_a)).fetchone()
    conn.commit()
    return str(row[0]) if row else ""


def _restored_credentials(world: World, conn: psycopg.Connection) -> str:
    """The sign-out-everywhere path, after bringing back what an earlier cell of it ended:
    the world's keys that are meant to work (its tokens are minted per cell)."""
    alive = [v for k, v in world.key_ids.items() if k not in ("inactive", "deleted")]
    conn.execute("UPDATE api_keys SET active = true WHERE id = ANY(%s)", (alive,))
    conn.commit()
    return "/api/v2/users/me/credentials/revoke"


def _a_channel(world: World, conn: psycopg.Connection, name: str = "matrix-a") -> str:
    """The id of org A's delivery channel `name` (made on first use)."""
    row = conn.execute("SELECT id FROM alert_channels WHERE org_id = %s AND name = %s",
                       (world.org_a, name)).fetchone()
    if row is None:
        row = conn.execute("INSERT INTO alert_channels (org_id, name, kind) VALUES"
                           " (%s, %s, 'mqtt') RETURNING id", (world.org_a, name)).fetchone()
        conn.commit()
    return str(row[0])


MATRIX_OUTSIDER = "matrix@b.example"  # a user of org B whom org A's managers add to A


def _no_matrix_member(world: World, conn: psycopg.Connection) -> str:
    """The members path of org A, after ending the membership in A an earlier cell added."""
    conn.execute("DELETE FROM memberships WHERE org_id = %s AND user_id = (SELECT id FROM"
                 " users WHERE email = %s)", (world.org_a, MATRIX_OUTSIDER))
    conn.commit()
    return f"/api/v2/orgs/{world.org_a}/users"


def _fresh_member(world: World, conn: psycopg.Connection) -> str:
    """A new member of org A (DELETE removes one per cell)."""
    uid = accounts.create_user(conn, org=world.org_a, email=f"gone-{uuid4().hex[:12]}@a.example",
                               password=ROLE_PASSWORD)
    conn.commit()
    return f"/api/v2/orgs/{world.org_a}/users/{uid}"


def _fresh_invite(world: World, conn: psycopg.Connection) -> str:
    """A new pending invitation of org A (DELETE revokes one per cell)."""
    made = links.invite(conn, Settings(), org=world.org_a, email=f"{uuid4().hex[:12]}@a.example",
                        role="member", teams_only=False, actor=audit.OPERATOR, by_owner=True)
    conn.commit()
    return f"/api/v2/orgs/{world.org_a}/invitations/{made.id}"


def _no_matrix_channel(world: World, conn: psycopg.Connection) -> str:
    """The channels path, after removing the channel an earlier cell created (names are unique
    per organisation)."""
    conn.execute("DELETE FROM alert_channels WHERE name = 'matrix'")
    conn.commit()
    return "/api/v2/channels"


def _a_team(world: World, conn: psycopg.Connection, name: str = "matrix-team") -> str:
    """The id of org A's team `name` (made on first use; DELETE cells use their own name)."""
    row = conn.execute("SELECT id FROM teams WHERE org_id = %s AND name = %s",
                       (world.org_a, name)).fetchone()
    if row is None:
        row = conn.execute("INSERT INTO teams (org_id, name) VALUES (%s, %s) RETURNING id",
                           (world.org_a, name)).fetchone()
        conn.commit()
    return str(row[0]) if row else ""


def _no_new_team(world: World, conn: psycopg.Connection) -> str:
    """The teams path, after removing the team an earlier cell created (names are unique)."""
    conn.execute("DELETE FROM teams WHERE org_id = %s AND name = 'matrix-new'", (world.org_a,))
    conn.commit()
    return "/api/v2/teams"


def _linked(world: World, conn: psycopg.Connection, plural: str, target: str) -> str:
    """Org A's team path with `target` in its `plural` list (a DELETE cell takes it out)."""
    team = _a_team(world, conn)
    column, value = {"members": ("user_id", target), "locations": ("location_id", target),
                     "devices": ("device_id", None)}[plural]
    if plural == "devices":
        row = conn.execute("SELECT id FROM devices WHERE name = %s", (target,)).fetchone()
        value = str(row[0]) if row else None
    conn.execute(f"INSERT INTO team_{plural} (team_id, org_id, {column}) VALUES (%s, %s, %s)"
                 " ON CONFLICT DO NOTHING", (team, world.org_a, value))
    conn.commit()
    return f"/api/v2/teams/{team}/{plural}/{target}"


def _team_routes() -> list[Route]:
    """Teams (issue 23): reads for any member, writes for administrators only."""
    team = "/api/v2/teams/<team_id>"
    links = (("members", "user_id", lambda w: w.a2), ("devices", "device_name", lambda w: w.dev_a),
             ("locations", "location_id", lambda w: w.loc_a))
    routes = [
        Route("teams", "GET", "/api/v2/teams", lambda w, c: "/api/v2/teams", "teams:read"),
        Route("teams-create", "POST", "/api/v2/teams", _no_new_team,
              "teams:write", ok=201, body={"name": "matrix-new"}, admin_only=True),
        Route("team", "GET", team, lambda w, c: f"/api/v2/teams/{_a_team(w, c)}", "teams:read",
              a_object=True),
        Route("team-rename", "PATCH", team, lambda w, c: f"/api/v2/teams/{_a_team(w, c)}",
              "teams:write", body={"name": "matrix-team"}, a_object=True, admin_only=True),
        Route("team-delete", "DELETE", team,
              lambda w, c: f"/api/v2/teams/{_a_team(w, c, 'matrix-gone')}", "teams:write",
              ok=204, a_object=True, admin_only=True),
    ]
    for plural, arg, target in links:
        routes.append(Route(f"team-{plural}", "GET", f"{team}/{plural}",
                            lambda w, c, p=plural: f"/api/v2/teams/{_a_team(w, c)}/{p}",
                            "teams:read", a_object=True))
        routes.append(Route(
            f"team-{plural}-put", "PUT", f"{team}/{plural}/<{arg}>",
            lambda w, c, p=plural, t=target: f"/api/v2/teams/{_a_team(w, c)}/{p}/{t(w)}",
            "teams:write", a_object=True, admin_only=True))
        routes.append(Route(
            f"team-{plural}-delete", "DELETE", f"{team}/{plural}/<{arg}>",
            lambda w, c, p=plural, t=target: _linked(w, c, p, str(t(w))), "teams:write",
            ok=204, a_object=True, admin_only=True))
    return routes


ROUTES = [
    *_team_routes(),
    Route("devices", "GET", "/api/v2/devices", lambda w, c: "/api/v2/devices", "devices:read"),
    Route("quarantine", "GET", "/api/v2/quarantine", lambda w, c: "/api/v2/quarantine",
          "devices:read"),
    Route("device", "GET", "/api/v2/devices/<name>",
          lambda w, c: f"/api/v2/devices/{w.dev_a}", "devices:read", a_object=True),
    Route("device-deployments", "GET", "/api/v2/devices/<name>/deployments",
          lambda w, c: f"/api/v2/devices/{w.dev_a}/deployments", "devices:read",
          a_object=True),
    Route("device-move", "POST", "/api/v2/devices/<name>/deployments",
          lambda w, c: f"/api/v2/devices/{w.dev_a}/deployments", "locations:write",
          ok=201, body=lambda w: {"location": str(w.loc_a)}, a_object=True,
          admin_only=True),  # moves A's device to where it is, from now: a new deployment
    # The fleet (issue 34): each cell adds a device or location of its own, or re-keys and
    # retires a device made for it (the module's app writes logins into a scratch file).
    Route("device-add", "POST", "/api/v2/devices", lambda w, c: "/api/v2/devices",
          "locations:write", ok=201, admin_only=True,
          body=lambda w: {"name": f"mx-{uuid4().hex[:12]}", "location": str(w.loc_a)}),
    Route("device-password", "POST", "/api/v2/devices/<name>/password",
          lambda w, c: f"/api/v2/devices/{_a_device(w, c)}/password", "locations:write",
          a_object=True, admin_only=True),
    Route("device-retire", "POST", "/api/v2/devices/<name>/retire",
          lambda w, c: f"/api/v2/devices/{_a_device(w, c)}/retire", "locations:write",
          body={}, a_object=True, admin_only=True),
    Route("location-create", "POST", "/api/v2/locations", lambda w, c: "/api/v2/locations",
          "locations:write", ok=201, admin_only=True,
          body=lambda w: {"name": f"mx-{uuid4().hex[:12]}", "tz_name": "UTC"}),
    Route("locations", "GET", "/api/v2/locations", lambda w, c: "/api/v2/locations",
          "locations:read"),
    Route("location", "GET", "/api/v2/locations/<location_id>",
          lambda w, c: f"/api/v2/locations/{w.loc_a}", "locations:read", a_object=True),
    Route("location-update", "PATCH", "/api/v2/locations/<location_id>",
          lambda w, c: f"/api/v2/locations/{w.loc_a}", "locations:write",
          body={"crop": "matrix"}, a_object=True, admin_only=True),
    # The root-zone water balance (issue 35).
    Route("location-water", "GET", "/api/v2/locations/<location_id>/water",
          lambda w, c: f"/api/v2/locations/{w.loc_a}/water", "locations:read", a_object=True),
    Route("location-water-put", "PUT", "/api/v2/locations/<location_id>/water",
          lambda w, c: f"/api/v2/locations/{w.loc_a}/water", "locations:write",
          body={"soil": "loam", "root_depth": 0.5, "p": 0.5}, a_object=True, admin_only=True),
    Route("irrigation-create", "POST", "/api/v2/locations/<location_id>/irrigation",
          lambda w, c: f"/api/v2/locations/{w.loc_a}/irrigation", "locations:write",
          ok=201, body={"day": "2024-07-01", "depth_mm": 20}, a_object=True, admin_only=True),
    Route("irrigation-delete", "DELETE",
          "/api/v2/locations/<location_id>/irrigation/<event_id>",
          lambda w, c: f"/api/v2/locations/{w.loc_a}/irrigation/" + str(c.execute(
              "INSERT INTO irrigation_events (location_id, day, depth_mm) VALUES"
              " (%s, '2024-07-01', 10) RETURNING id", (w.loc_a,)).fetchone()[0]),
          "locations:write", ok=204,
          a_object=True, admin_only=True),
    Route("audit", "GET", "/api/v2/audit", lambda w, c: "/api/v2/audit", "orgs:read",
          admin_only=True),
    # People (issue 23); no caller of the matrix is an administrator.
    Route("users-me", "GET", "/api/v2/users/me", lambda w, c: "/api/v2/users/me", "users:read"),
    Route("users-me-update", "PATCH", "/api/v2/users/me", lambda w, c: "/api/v2/users/me",
          "users:write", body={"name": "matrix"}),
    Route("users", "GET", "/api/v2/users", lambda w, c: "/api/v2/users", "users:read",
          admin_only=True),
    Route("user", "GET", "/api/v2/users/<user_id>", lambda w, c: f"/api/v2/users/{w.a1}",
          "users:read", a_object=True),
    Route("user-orgs", "GET", "/api/v2/users/<user_id>/orgs",
          lambda w, c: f"/api/v2/users/{w.a1}/orgs", "users:read", a_object=True),
    Route("orgs", "GET", "/api/v2/orgs", lambda w, c: "/api/v2/orgs", "orgs:read"),
    Route("org", "GET", "/api/v2/orgs/<org_id>", lambda w, c: f"/api/v2/orgs/{w.org_a}",
          "orgs:read", a_object=True),
    Route("org-update", "PATCH", "/api/v2/orgs/<org_id>",
          lambda w, c: f"/api/v2/orgs/{w.org_a}", "orgs:write", body={"name": "Org A"},
          a_object=True, admin_only=True),
    Route("org-members", "GET", "/api/v2/orgs/<org_id>/users",
          lambda w, c: f"/api/v2/orgs/{w.org_a}/users", "orgs:read", a_object=True),
    Route("org-member-role", "PUT", "/api/v2/orgs/<org_id>/users/<user_id>",
          lambda w, c: f"/api/v2/orgs/{w.org_a}/users/{w.a2}", "orgs:write",
          body={"role": "member"}, a_object=True, admin_only=True),
    Route("org-member-remove", "DELETE", "/api/v2/orgs/<org_id>/users/<user_id>",
          _fresh_member, "orgs:write", ok=204, a_object=True, admin_only=True),
    # An existing user is invited, not added: 202, pending their signed-in consent.
    Route("org-member-add", "POST", "/api/v2/orgs/<org_id>/users", _no_matrix_member,
          "orgs:write", ok=202, body={"email": MATRIX_OUTSIDER, "role": "viewer"},
          a_object=True, admin_only=True),
    # The caller's own invitations (issue 30): consent and signing out everywhere are the
    # account's, never a key's. The invitation is nobody's of the matrix: 404 to every caller.
    Route("my-invitations", "GET", "/api/v2/users/me/invitations",
          lambda w, c: "/api/v2/users/me/invitations", "users:read"),
    Route("my-invitation-accept", "POST", "/api/v2/users/me/invitations/<invitation_id>/accept",
          lambda w, c: f"{_fresh_invite(w, c).replace(f'/orgs/{w.org_a}', '/users/me')}/accept",
          USER_ONLY, ok=404),
    Route("my-credentials-revoke", "POST", "/api/v2/users/me/credentials/revoke",
          _restored_credentials, USER_ONLY),
    # Invitations and password reset (issue 23): administrators, and two public routes.
    Route("invitations", "GET", "/api/v2/orgs/<org_id>/invitations",
          lambda w, c: f"/api/v2/orgs/{w.org_a}/invitations", "orgs:read", a_object=True,
          admin_only=True),
    Route("invitation-create", "POST", "/api/v2/orgs/<org_id>/invitations",
          lambda w, c: f"/api/v2/orgs/{w.org_a}/invitations", "orgs:write", ok=201,
          body={"email": "matrix@a.example", "role": "member"}, a_object=True,
          admin_only=True),
    Route("invitation-revoke", "DELETE", "/api/v2/orgs/<org_id>/invitations/<invitation_id>",
          _fresh_invite, "orgs:write", ok=204,
          a_object=True, admin_only=True),
    Route("reset-link", "POST", "/api/v2/orgs/<org_id>/users/<user_id>/reset-link",
          lambda w, c: f"/api/v2/orgs/{w.org_a}/users/{w.a2}/reset-link", "orgs:write",
          ok=201, a_object=True, admin_only=True),
    # Public: a made-up link is the one 400 whoever asks; a reset request is always 202.
    Route("link-accept", "POST", "/api/v2/auth/accept", lambda w, c: "/api/v2/auth/accept",
          None, ok=400, body={"token": "sdsl_matrix", "password": "matrix-password"}),
    Route("password-reset", "POST", "/api/v2/auth/password-reset",
          lambda w, c: "/api/v2/auth/password-reset", None, ok=202,
          body={"email": "nobody@a.example"}),
    Route("summary", "GET", "/api/v2/locations/summary",
          lambda w, c: "/api/v2/locations/summary?temp=f", "locations:read"),
    Route("apikeys-list", "GET", "/api/v2/apikeys", lambda w, c: "/api/v2/apikeys",
          "apikeys:read"),
    Route("apikeys-scopes", "GET", "/api/v2/apikeys/scopes",
          lambda w, c: "/api/v2/apikeys/scopes", "apikeys:read"),
    Route("apikeys-create", "POST", "/api/v2/apikeys", lambda w, c: "/api/v2/apikeys",
          USER_ONLY, body={"scopes": ["data:read"], "name": "matrix"}),
    Route("apikeys-update", "PUT", "/api/v2/apikeys/<key_id>",
          lambda w, c: f"/api/v2/apikeys/{w.key_ids['data']}", USER_ONLY,
          body={"name": "renamed"}, a_object=True, own_object=True),
    Route("apikeys-delete", "DELETE", "/api/v2/apikeys/<key_id>",
          lambda w, c: f"/api/v2/apikeys/{_fresh_a1_key(w, c)}", USER_ONLY, ok=204,
          a_object=True, own_object=True),
    Route("token-create", "POST", "/api/v2/auth/token", lambda w, c: "/api/v2/auth/token",
          None, body={"email": "a1@a.example", "password": PASSWORDS["a1@a.example"]}),
    Route("token-revoke", "DELETE", "/api/v2/auth/token", lambda w, c: "/api/v2/auth/token",
          USER_ONLY, ok=204, basic_status=400),
    # Delivery channels (issue 24).
    Route("channels", "GET", "/api/v2/channels", lambda w, c: "/api/v2/channels",
          "notifications:read"),
    Route("channel-create", "POST", "/api/v2/channels", _no_matrix_channel,
          "notifications:write", ok=201, body={"name": "matrix", "kind": "mqtt"}),
    Route("channel", "GET", "/api/v2/channels/<channel_id>",
          lambda w, c: f"/api/v2/channels/{_a_channel(w, c)}", "notifications:read",
          a_object=True),
    Route("channel-update", "PATCH", "/api/v2/channels/<channel_id>",
          lambda w, c: f"/api/v2/channels/{_a_channel(w, c)}", "notifications:write",
          body={"active": True}, a_object=True),
    Route("channel-delete", "DELETE", "/api/v2/channels/<channel_id>",
          lambda w, c: f"/api/v2/channels/{_a_channel(w, c, 'matrix-gone')}",
          "notifications:write", ok=204, a_object=True),
    Route("channel-test", "POST", "/api/v2/channels/<channel_id>/test",
          lambda w, c: f"/api/v2/channels/{_a_channel(w, c)}/test", "notifications:write",
          ok=202, a_object=True),
    # The organisation's SMTP settings (issue 33): read by members, changed by owners.
    Route("email-settings", "GET", "/api/v2/email-settings",
          lambda w, c: "/api/v2/email-settings", "notifications:read"),
    Route("email-settings-put", "PUT", "/api/v2/email-settings",
          lambda w, c: "/api/v2/email-settings", "notifications:write", owner_only=True,
          body={"host": "127.0.0.1", "port": 2525, "security": "none",
                "from": "alerts@a.example"}),
    Route("email-settings-delete", "DELETE", "/api/v2/email-settings",
          lambda w, c: "/api/v2/email-settings", "notifications:write", owner_only=True),
    Route("health", "GET", "/api/v2/health", lambda w, c: "/api/v2/health", None),
    Route("index", "GET", "/api/v2/", lambda w, c: "/api/v2/", None),
    # The data and schema endpoints (issue 5); rows apply when the app serves the rule.
    Route("schemas", "GET", "/api/v2/schemas", lambda w, c: "/api/v2/schemas", "data:read"),
    Route("schema", "GET", "/api/v2/schemas/<table>", lambda w, c: "/api/v2/schemas/hourly",
          "data:read"),
    Route("data-device", "GET", "/api/v2/data/<table>",
          lambda w, c: f"/api/v2/data/calibrated?device={w.dev_a}", "data:read", a_object=True),
    Route("data-location", "GET", "/api/v2/data/<table>",
          lambda w, c: f"/api/v2/data/hourly?location={w.loc_a}", "data:read", a_object=True),
    # Alert rules and notifications (issue 24, docs/alerts.md).
    Route("alerts", "GET", "/api/v2/alerts", lambda w, c: "/api/v2/alerts",
          "notifications:read"),
    Route("alerts-create", "POST", "/api/v2/alerts", lambda w, c: "/api/v2/alerts",
          "notifications:write", ok=201, body=RULE_BODY),
    Route("alert", "GET", "/api/v2/alerts/<rule_id>",
          lambda w, c: f"/api/v2/alerts/{_a_rule(w, c)}", "notifications:read", a_object=True),
    Route("alert-update", "PATCH", "/api/v2/alerts/<rule_id>",
          lambda w, c: f"/api/v2/alerts/{_a_rule(w, c)}", "notifications:write",
          body={"name": "renamed"}, a_object=True),
    Route("alert-delete", "DELETE", "/api/v2/alerts/<rule_id>",
          lambda w, c: f"/api/v2/alerts/{_a_rule(w, c)}", "notifications:write", ok=204,
          a_object=True),
    Route("notifications", "GET", "/api/v2/notifications",
          lambda w, c: "/api/v2/notifications", "notifications:read"),
    Route("notification", "GET", "/api/v2/notifications/<event_id>",
          lambda w, c: f"/api/v2/notifications/{_a_event(w, c)}", "notifications:read",
          a_object=True),
    Route("notification-ack", "POST", "/api/v2/notifications/<event_id>/ack",
          lambda w, c: f"/api/v2/notifications/{_a_event(w, c)}/ack", "notifications:write",
          a_object=True),
    # Issue 33: bulk acknowledgement; ids of other organisations are passed over (200, 0).
    Route("notifications-ack", "POST", "/api/v2/notifications/ack",
          lambda w, c: "/api/v2/notifications/ack", "notifications:write",
          body={"ids": ["00000000-0000-0000-0000-000000000000"]}),
    # Silences and quiet hours (issue 33): another organisation cannot name org A's device.
    Route("silences", "GET", "/api/v2/silences", lambda w, c: "/api/v2/silences",
          "notifications:read"),
    Route("silences-create", "POST", "/api/v2/silences", lambda w, c: "/api/v2/silences",
          "notifications:write", ok=201, body=lambda w: {"device": w.dev_a, "duration": 3600},
          other_org_status=400),
    Route("silence", "GET", "/api/v2/silences/<silence_id>",
          lambda w, c: f"/api/v2/silences/{_a_silence(w, c)}", "notifications:read",
          a_object=True),
    Route("silence-expire", "POST", "/api/v2/silences/<silence_id>/expire",
          lambda w, c: f"/api/v2/silences/{_a_silence(w, c)}/expire", "notifications:write",
          a_object=True),
    Route("silence-delete", "DELETE", "/api/v2/silences/<silence_id>",
          lambda w, c: f"/api/v2/silences/{_a_silence(w, c)}", "notifications:write", ok=204,
          a_object=True),
    Route("digest", "GET", "/api/v2/digest", lambda w, c: "/api/v2/digest",
          "notifications:read"),
    Route("digest-put", "PUT", "/api/v2/digest", lambda w, c: "/api/v2/digest",
          "notifications:write", body={"active": False}),
    # Annotations (issue 24): another organisation cannot name org A's device in a body (400).
    Route("annotations", "GET", "/api/v2/annotations", lambda w, c: "/api/v2/annotations",
          "annotations:read"),
    Route("annotations-create", "POST", "/api/v2/annotations",
          lambda w, c: "/api/v2/annotations", "annotations:write", ok=201,
          body={"device": "A000101", "start_time": "2026-01-01T00:00:00Z", "text": "matrix"},
          other_org_status=400),
    Route("annotation", "GET", "/api/v2/annotations/<annotation_id>",
          lambda w, c: f"/api/v2/annotations/{w.annotation_a}", "annotations:read",
          a_object=True),
    Route("annotation-update", "PUT", "/api/v2/annotations/<annotation_id>",
          lambda w, c: f"/api/v2/annotations/{w.annotation_a}", "annotations:write",
          body={"text": "hail, changed"}, a_object=True),
    Route("annotation-delete", "DELETE", "/api/v2/annotations/<annotation_id>",
          lambda w, c: f"/api/v2/annotations/{_fresh_annotation(w, c)}", "annotations:write",
          ok=204, a_object=True),
]

# Callers: name -> (headers for this world, kind). Bearer tokens are minted per cell, because
# DELETE /auth/token revokes the one it is sent with.
CALLERS = ["anonymous", "wrong_password", "basic", "bearer", "token_expired", "token_revoked",
           "key_scoped", "key_unscoped", "key_expired", "key_inactive", "key_deleted",
           "other_org_basic", "other_org_bearer", "other_org_key", "session",
           "other_org_session", "owner", "admin", "viewer", "multi_token_a", "other_org_multi",
           "team_in", "team_out"]
# Callers by their role in org A (a1's "basic", "bearer", "session" are members).
ROLE_OF = {"owner": "owner", "admin": "admin", "viewer": "viewer", "multi_token_a": "viewer",
           "team_in": "member", "team_out": "member"}
ROLE_PASSWORD = "matrix-role-password"
ROLE_EMAILS = {"owner": "owner@a.example", "admin": "admin@a.example",
               "viewer": "viewer@a.example", "multi": "multi@b.example"}
TEAM_EMAILS = {"team_in": "team-in@a.example", "team_out": "team-out@a.example"}
BASIC_CALLERS = {"basic", "other_org_basic", "owner", "admin", "viewer", "other_org_multi",
                 "team_in", "team_out"}
# Teams-only members of org A (docs/auth.md "Teams"): team_in's team holds A's device and
# location, team_out's holds nothing. Neither is in the matrix's own team ("matrix-team"),
# so its routes are 404 to both; team_out sees none of A's device, location, the event about
# the device, the annotation on the location, and cannot annotate the device (400, as another
# organisation), nor see or silence it. Alert rules for the whole organisation stay readable
# to both.
TEAM_ROUTES = {"team", "team-members", "team-devices", "team-locations"}
TEAM_HIDDEN = {
    "team_in": dict.fromkeys(TEAM_ROUTES, 404),
    "team_out": {**dict.fromkeys(TEAM_ROUTES | {
        "device", "device-deployments", "location", "data-device", "data-location",
        "notification",
        "notification-ack", "annotation", "annotation-update", "annotation-delete",
        "location-water", "location-water-put", "irrigation-create", "irrigation-delete",
        "silence", "silence-expire", "silence-delete"},
        404),
        "annotations-create": 400, "silences-create": 400},
}
# The B-homed viewer of A, acting in B, sees A as one of their own organisations there.
MULTI_DIFFERS = {"org": 200, "org-members": 403}
SESSIONS = ("session", "other_org_session")
REFUSED = {"anonymous", "wrong_password", "token_expired", "token_revoked", "key_expired",
           "key_inactive", "key_deleted"}
SCOPE_KEY = {"data:read": "data", "devices:read": "devices", "locations:read": "locations",
             "apikeys:read": "apikeys", "users:read": "users", "users:write": "users_write",
             "orgs:read": "orgs", "orgs:write": "orgs_write",
             "annotations:read": "annotations_read", "annotations:write": "annotations_write",
             "notifications:read": "notifications_read",
             "notifications:write": "notifications_write", "teams:read": "teams_read",
             "teams:write": "teams_write", USER_ONLY: "all"}


def _session_cookie(app: Flask, token: str) -> dict[str, str]:
    """The Cookie header of a dashboard session holding `token`, signed as the app signs it."""
    from serve.web.session import COOKIE, seal

    value = app.session_interface.get_signing_serializer(app).dumps(  # type: ignore[attr-defined]
        {"token": seal(app, token), "csrf": "matrix-csrf-value-of-32-characters-or-more",
         "_permanent": True})
    return {"Cookie": f"{COOKIE}={value}"}


@pytest.fixture(scope="module", autouse=True)
def role_people(world: World) -> dict[str, UUID]:
    """Org A's owner, admin and viewer, the B-homed user who also views A, and the outsider
    (of B) whom A's managers add; made once per module's world."""
    made = {}
    with psycopg.connect(world.url) as conn:
        for role, email in ROLE_EMAILS.items():
            home = world.org_b if role == "multi" else world.org_a
            made[role] = accounts.create_user(conn, org=home, email=email, password=ROLE_PASSWORD,
                                              role="member" if role == "multi" else role)
        accounts.add_membership(conn, user=made["multi"], org=world.org_a, role="viewer")
        accounts.create_user(conn, org=world.org_b, email=MATRIX_OUTSIDER, password=ROLE_PASSWORD)
    return made


@pytest.fixture(scope="module", autouse=True)
def team_people(world: World, role_people: dict[str, UUID]) -> None:
    """team_in and team_out: teams-only members of org A, each in a team of their own (with
    A's device and location, and with nothing)."""
    with psycopg.connect(world.url) as conn:
        for caller, links in (("team_in", True), ("team_out", False)):
            user = accounts.create_user(conn, org=world.org_a, email=TEAM_EMAILS[caller],
                                        password=ROLE_PASSWORD)
            conn.execute("UPDATE memberships SET teams_only = true WHERE user_id = %s", (user,))
            team = conn.execute("INSERT INTO teams (org_id, name) VALUES (%s, %s) RETURNING id",
                                (world.org_a, caller)).fetchone()
            assert team is not None
            conn.execute("INSERT INTO team_members (team_id, org_id, user_id)"
                         " VALUES (%s, %s, %s)", (team[0], world.org_a, user))
            if links:
                conn.execute("INSERT INTO team_locations (team_id, org_id, location_id)"
                             " VALUES (%s, %s, %s)", (team[0], world.org_a, world.loc_a))
                conn.execute("INSERT INTO team_devices (team_id, org_id, device_id) SELECT"
                             " %s, org_id, id FROM devices WHERE name = %s",
                             (team[0], world.dev_a))


def _role_token(conn: psycopg.Connection, email: str, org: UUID) -> str:
    secret = credentials.new_token()
    conn.execute("INSERT INTO auth_tokens (user_id, org_id, digest, expires_at) SELECT id, %s,"
                 " %s, now() + interval '1 hour' FROM users WHERE email = %s",
                 (org, secret.digest, email))
    conn.commit()
    return secret.value


def _headers(caller: str, route: Route, world: World, conn: psycopg.Connection,
             app: Flask) -> dict[str, str]:
    if caller in SESSIONS:
        token = insert_token(conn, world.a1 if caller == "session" else world.b1,
                             expires_in=timedelta(hours=1))
        conn.commit()
        return _session_cookie(app, token)
    if caller == "anonymous":
        return {}
    if caller == "wrong_password":
        return basic("a1@a.example", "not-the-password")
    if caller == "basic":
        return basic("a1@a.example")
    if caller == "bearer":
        token = insert_token(conn, world.a1, expires_in=timedelta(hours=1))
        conn.commit()
        return bearer(token)
    if caller == "token_expired":
        return bearer(world.tokens["expired"])
    if caller == "token_revoked":
        return bearer(world.tokens["revoked"])
    if caller == "key_scoped":
        return apikey(world.keys[SCOPE_KEY.get(route.scope or "", "all")])
    if caller == "key_unscoped":  # a valid scope, but not the one the route needs
        return apikey(world.keys["data" if route.scope == "teams:read" else "none"])
    if caller in ("key_expired", "key_inactive", "key_deleted"):
        return apikey(world.keys[caller.removeprefix("key_")])
    if caller == "other_org_basic":
        return basic("b1@b.example")
    if caller == "other_org_bearer":
        token = insert_token(conn, world.b1, expires_in=timedelta(hours=1))
        conn.commit()
        return bearer(token)
    if caller == "other_org_key":
        return apikey(world.keys["b_all"])
    if caller in ("owner", "admin", "viewer"):
        return basic(ROLE_EMAILS[caller], ROLE_PASSWORD)
    if caller in TEAM_EMAILS:
        return basic(TEAM_EMAILS[caller], ROLE_PASSWORD)
    if caller == "other_org_multi":
        return basic(ROLE_EMAILS["multi"], ROLE_PASSWORD)
    if caller == "multi_token_a":
        return bearer(_role_token(conn, ROLE_EMAILS["multi"], world.org_a))
    raise AssertionError(caller)


def expected(caller: str, route: Route) -> int:
    """The status the cell must answer."""
    if route.scope is None:
        return route.ok  # public: credentials are not looked at
    if caller in SESSIONS and route.method not in ("GET", "HEAD"):
        return 401  # the dashboard cookie never authorizes a write: as if signed out
    if caller in REFUSED:
        return 401
    is_key = caller in ("key_scoped", "key_unscoped", "other_org_key")
    if is_key and (route.scope == USER_ONLY or caller == "key_unscoped"):
        return 403
    if caller == "other_org_multi" and route.name in MULTI_DIFFERS:
        return MULTI_DIFFERS[route.name]
    role = ROLE_OF.get(caller, "member")
    if route.owner_only and role != "owner" and roles.role_allows(role, route.scope):
        return 403  # allowed by the scope, refused by the role: only an owner
    if route.admin_only or route.scope in ("orgs:write", "locations:write", "teams:write"):
        if role not in ("owner", "admin"):
            return 403  # the role table, before any object is looked up
    elif not roles.role_allows(role, route.scope) and route.scope != USER_ONLY:
        return 403  # a viewer's write
    if caller in ROLE_OF and (route.own_object or route.name in ("user", "user-orgs")):
        # a1's own key, or a1's record: a manager sees a1's record, nobody else's key.
        return 200 if route.name in ("user", "user-orgs") and role in ("owner", "admin") \
            else 404
    if caller in BASIC_CALLERS and route.basic_status is not None:
        return route.basic_status
    if route.name in TEAM_HIDDEN.get(caller, {}):
        return TEAM_HIDDEN[caller][route.name]
    if caller == "other_org_key" and route.scope.startswith("annotations:"):
        return 403  # org B's key holds the read scopes of the world only
    if caller.startswith("other_org") and route.other_org_status is not None:
        return route.other_org_status
    if caller.startswith("other_org") and route.a_object:
        return 404
    return route.ok


def _served(app: Flask, route: Route) -> bool:
    return any(plain_rule(rule.rule) == route.rule and route.method in (rule.methods or ())
               for rule in app.url_map.iter_rules())


CELLS = [(r, c) for r in ROUTES for c in CALLERS]
# Cells run / skipped (rule not served) / passed in this session, for the S1 figure.
_TALLY = {"run": 0, "skipped": 0, "passed": 0}


@pytest.mark.parametrize("route, caller", CELLS,
                         ids=[f"{r.name}-{c}" for r, c in CELLS])
def test_cell(app: Flask, client: FlaskClient, world: World, route: Route, caller: str) -> None:
    _TALLY["run"] += 1
    if not _served(app, route):
        _TALLY["skipped"] += 1
        pytest.skip(f"{route.method} {route.rule} is not served by this app")
    with psycopg.connect(world.url) as conn:
        headers = _headers(caller, route, world, conn, app)
        path = route.path(world, conn)
    if "Cookie" in headers:  # the test client sends cookies from its own jar only
        client = app.test_client()
        name, _, value = headers.pop("Cookie").partition("=")
        client.set_cookie(name, value)
    body = route.body(world) if callable(route.body) else route.body
    response = client.open(path, method=route.method, headers=headers, json=body)
    want = expected(caller, route)
    assert response.status_code == want, (
        f"{route.method} {path} as {caller}: {response.status_code} "
        f"{response.get_data(as_text=True)[:300]}")
    if want == 204:
        assert response.get_data() == b""
        _TALLY["passed"] += 1
        return
    body = response.get_json()
    assert response.mimetype == "application/json"
    if want >= 400:
        assert body["code"] == want and body["message"]
    if want == 401:
        assert response.headers.get("WWW-Authenticate"), "401 without a challenge"
    if caller.startswith("other_org") and want == 200 and route.scope is not None and not (
            caller == "other_org_multi" and route.name in ("orgs", "org")):
        # Another organisation's caller sees nothing of org A.
        text = response.get_data(as_text=True)
        for secret_of_a in (world.dev_a, world.dev_a_idle, str(world.loc_a), str(world.org_a),
                            str(world.a1)):
            assert secret_of_a not in text, f"{secret_of_a} leaked to org B via {path}"
    _TALLY["passed"] += 1


def test_every_served_route_is_in_the_matrix(app: Flask) -> None:
    covered = {(r.rule, r.method) for r in ROUTES}
    served = set()
    for rule in app.url_map.iter_rules():
        if not rule.rule.startswith("/api/v2") or rule.endpoint in ("static", "doc_slash") or \
                rule.endpoint.startswith("api-docs."):
            continue  # the public API description (test_docs_are_public)
        for method in rule.methods or ():
            if method not in ("HEAD", "OPTIONS"):
                served.add((plain_rule(rule.rule), method))
    assert served <= covered, f"routes without matrix rows: {sorted(served - covered)}"


def test_docs_are_public(client: FlaskClient) -> None:
    """The OpenAPI document describes the API, not anyone's data: no credentials needed."""
    r = client.get("/api/v2/openapi.json")
    assert r.status_code == 200 and "paths" in r.get_json()
    assert "/api/v2/apikeys" in r.get_json()["paths"]


def test_matrix_is_mostly_exercised(app: Flask) -> None:
    """The access routes themselves must all be served (no silent skips of our own rows)."""
    own = [r for r in ROUTES if r.rule.startswith(("/api/v2/devices", "/api/v2/locations",
                                                   "/api/v2/apikeys", "/api/v2/auth"))]
    assert all(_served(app, r) for r in own)


def test_api_key_of_another_user_in_same_org_is_404(client: FlaskClient, world: World) -> None:
    """Keys belong to their user: a2's key id answers a1 like a missing one."""
    for method, body in (("PUT", {"name": "x"}), ("DELETE", None)):
        r = client.open(f"/api/v2/apikeys/{world.key_ids['a2_all']}", method=method,
                        headers=basic("a1@a.example"), json=body)
        assert r.status_code == 404
    listed = client.get("/api/v2/apikeys", headers=basic("a1@a.example")).get_json()
    assert str(world.key_ids["a2_all"]) not in {k["id"] for k in listed}


def test_no_response_exposes_secrets_or_hashes(app: Flask, client: FlaskClient,
                                               world: World) -> None:
    """S5: no password hash, digest or stored secret in any answer a caller can get."""
    texts = []
    for route in ROUTES:
        if route.method != "GET" or not _served(app, route):
            continue
        with psycopg.connect(world.url) as conn:
            path = route.path(world, conn)
        for headers in (basic("a1@a.example"), apikey(world.keys["all"])):
            texts.append(client.get(path, headers=headers).get_data(as_text=True))
    text = "\n".join(texts)
    assert "$argon2" not in text and "password_hash" not in text and "digest" not in text
    for secret in world.secrets():
        assert secret not in text


def test_login_is_marked_public_in_the_openapi_document(client: FlaskClient) -> None:
    paths = client.get("/api/v2/openapi.json").get_json()["paths"]
    assert paths["/api/v2/auth/token"]["post"]["security"] == []
    assert "security" not in paths["/api/v2/devices"]["get"]  # the global requirement applies


def test_unrouted_methods_and_preflight(client: FlaskClient) -> None:
    """TRACE and other unserved methods are 405 JSON (before any credential check); a CORS
    preflight needs no credentials; an unknown path is a plain 404."""
    r = client.open("/api/v2/devices", method="TRACE")
    assert r.status_code == 405 and r.get_json()["code"] == 405
    r = client.delete("/api/v2/devices", headers=basic("a1@a.example"))
    assert r.status_code == 405
    r = client.options("/api/v2/devices", headers={
        "Origin": "https://example.org", "Access-Control-Request-Method": "GET",
        "Access-Control-Request-Headers": "Authorization"})
    assert r.status_code == 200 and "Authorization" in r.headers.get(
        "Access-Control-Allow-Headers", "")
    r = client.get("/api/v2/nothing-here")
    assert r.status_code == 404 and r.get_json()["code"] == 404


def test_matrix_figure(figures: Any) -> None:
    """S1 figure: cells passing / cells run (runs after every cell of this module; a partial
    run, e.g. one selected cell, records nothing)."""
    if _TALLY["run"] < len(CELLS):
        pytest.skip("not every cell ran in this session")
    checked = _TALLY["run"] - _TALLY["skipped"]
    figures.record("s1_matrix_cells", f"{_TALLY['passed']}/{checked}", section="security",
                   title=f"S1 authorization matrix: cells passing / total ({len(ROUTES)} "
                         f"routes x {len(CALLERS)} callers; {_TALLY['skipped']} cells of "
                         "unserved rules skipped)",
                   target="100%", source="tests/access/test_matrix.py")
    assert _TALLY["passed"] == checked
