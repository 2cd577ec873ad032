"""Teams of an organisation (issue 23, docs/auth.md "Teams"): their members, devices and
locations, for the API (serve/api/teams.py) and `sds team` (admin/teams.py).

Every function works inside one organisation `org` and on the caller's connection and
transaction: as the API role, row-level security (migration 0155) limits it further, e.g. a
teams-only member reads only their own teams. Another organisation's team, user, device or
location is the same UnknownObject / UnknownDevice / UnknownLocation as a missing one; the
composite foreign keys of 0155 refuse a cross-organisation link even if a check were missed.
What a team's membership restricts is the database's business (0155's policies), not this
module's.
"""

from __future__ import annotations

from typing import Any
from uuid import UUID

import psycopg
from psycopg import errors as pgerr
from psycopg import sql
from psycopg.rows import dict_row

from shared.errors import (
    BadParameter,
    DuplicateName,
    UnknownDevice,
    UnknownLocation,
    UnknownObject,
)

MAX_NAME = 200

_TEAM_SQL = (
    "SELECT t.id, t.org_id, t.name, t.created,"
    " (SELECT count(*) FROM team_members m WHERE m.team_id = t.id) AS members,"
    " (SELECT count(*) FROM team_devices d WHERE d.team_id = t.id) AS devices,"
    " (SELECT count(*) FROM team_locations l WHERE l.team_id = t.id) AS locations"
    " FROM teams t")


def check_name(name: str) -> str:
    """A team name: 1 to 200 characters, surrounding blanks removed."""
    clean = name.strip()
    if not 1 <= len(clean) <= MAX_NAME:
        raise BadParameter(f"a team name has 1 to {MAX_NAME} characters")
    return clean


def team_page(conn: psycopg.Connection, org: UUID, limit: int,
              offset: int) -> tuple[list[dict[str, Any]], int]:
    """One page of the organisation's teams by name, with their sizes, and the total."""
    total_row = conn.execute("SELECT count(*) FROM teams WHERE org_id = %s", (org,)).fetchone()
    with conn.cursor(row_factory=dict_row) as cur:
        rows = cur.execute(_TEAM_SQL + " WHERE t.org_id = %s ORDER BY t.name, t.id"
                           " LIMIT %s OFFSET %s", (org, limit, offset)).fetchall()
    return rows, total_row[0] if total_row else 0


def fetch_team(conn: psycopg.Connection, org: UUID, team: UUID) -> dict[str, Any]:
    """The team `team` of `org` with its sizes; UnknownObject otherwise."""
    with conn.cursor(row_factory=dict_row) as cur:
        row = cur.execute(_TEAM_SQL + " WHERE t.id = %s AND t.org_id = %s",
                          (team, org)).fetchone()
    if row is None:
        raise UnknownObject(f"unknown team {str(team)!r}")
    return row


def team_by_name_or_id(conn: psycopg.Connection, org: UUID, ref: str) -> UUID:
    """The id of the team called or numbered `ref` in `org` (the CLI's way to name one)."""
    try:
        asked: UUID | None = UUID(ref)
    except ValueError:
        asked = None
    row = conn.execute("SELECT id FROM teams WHERE org_id = %s AND (name = %s OR id = %s)",
                       (org, ref, asked)).fetchone()
    if row is None:
        raise UnknownObject(f"unknown team {ref!r}")
    return UUID(str(row[0]))


def create_team(conn: psycopg.Connection, org: UUID, name: str) -> dict[str, Any]:
    """A new team called `name` (unique in the organisation: DuplicateName)."""
    clean = check_name(name)
    try:
        with conn.transaction():
            row = conn.execute("INSERT INTO teams (org_id, name) VALUES (%s, %s) RETURNING id",
                               (org, clean)).fetchone()
    except pgerr.UniqueViolation:
        raise DuplicateName(f"a team called {clean!r} exists") from None
    assert row is not None  # INSERT ... RETURNING returns the row
    return fetch_team(conn, org, row[0])


def rename_team(conn: psycopg.Connection, org: UUID, team: UUID, name: str) -> dict[str, Any]:
    """Rename a team; returns it."""
    clean = check_name(name)
    try:
        with conn.transaction():
            cur = conn.execute("UPDATE teams SET name = %s WHERE id = %s AND org_id = %s",
                               (clean, team, org))
    except pgerr.UniqueViolation:
        raise DuplicateName(f"a team called {clean!r} exists") from None
    if cur.rowcount == 0:
        raise UnknownObject(f"unknown team {str(team)!r}")
    return fetch_team(conn, org, team)


def delete_team(conn: psycopg.Connection, org: UUID, team: UUID) -> str:
    """Delete a team with its links (not its members, devices or locations); returns its name."""
    row = conn.execute("DELETE FROM teams WHERE id = %s AND org_id = %s RETURNING name",
                       (team, org)).fetchone()
    if row is None:
        raise UnknownObject(f"unknown team {str(team)!r}")
    return str(row[0])


# ---- members, devices, locations -----------------------------------------------------------


def team_members(conn: psycopg.Connection, team: UUID) -> list[dict[str, Any]]:
    """The team's members by email: id, email, name."""
    with conn.cursor(row_factory=dict_row) as cur:
        return cur.execute(
            "SELECT u.id, u.email, u.name, m.added FROM team_members m"
            " JOIN users u ON u.id = m.user_id WHERE m.team_id = %s ORDER BY u.email",
            (team,)).fetchall()


def team_devices(conn: psycopg.Connection, team: UUID) -> list[dict[str, Any]]:
    """The team's devices by name: id, name."""
    with conn.cursor(row_factory=dict_row) as cur:
        return cur.execute(
            "SELECT d.id, d.name, t.added FROM team_devices t JOIN devices d ON d.id = t.device_id"
            " WHERE t.team_id = %s ORDER BY d.name", (team,)).fetchall()


def team_locations(conn: psycopg.Connection, team: UUID) -> list[dict[str, Any]]:
    """The team's locations by name: id, name."""
    with conn.cursor(row_factory=dict_row) as cur:
        return cur.execute(
            "SELECT l.id, l.name, t.added FROM team_locations t"
            " JOIN locations l ON l.id = t.location_id WHERE t.team_id = %s ORDER BY l.name, l.id",
            (team,)).fetchall()


def member_of_org(conn: psycopg.Connection, org: UUID, user: UUID) -> str:
    """The email of `user`, an active member of `org` (memberships); UnknownObject otherwise."""
    row = conn.execute("SELECT u.email FROM users u JOIN memberships m ON m.user_id = u.id"
                       " WHERE u.id = %s AND m.org_id = %s AND u.active", (user, org)).fetchone()
    if row is None:
        raise UnknownObject(f"unknown user {str(user)!r}")
    return str(row[0])


def device_of_org(conn: psycopg.Connection, org: UUID, name: str) -> UUID:
    """The id of the device called `name` in `org`; UnknownDevice otherwise."""
    row = conn.execute("SELECT id FROM devices WHERE name = %s AND org_id = %s",
                       (name, org)).fetchone()
    if row is None:
        raise UnknownDevice(f"unknown device {name!r}")
    return UUID(str(row[0]))


def location_of_org(conn: psycopg.Connection, org: UUID, location: UUID) -> str:
    """The name of location `location` in `org`; UnknownLocation otherwise."""
    row = conn.execute("SELECT name FROM locations WHERE id = %s AND org_id = %s",
                       (location, org)).fetchone()
    if row is None:
        raise UnknownLocation(f"unknown location {str(location)!r}")
    return str(row[0])


# The link tables and their member column; one pair of add/remove serves all three.
_LINKS = {"member": ("team_members", "user_id"), "device": ("team_devices", "device_id"),
          "location": ("team_locations", "location_id")}


def add_link(conn: psycopg.Connection, org: UUID, team: UUID, kind: str, target: UUID) -> bool:
    """Put `target` (a user, device or location id of `org`, checked by the caller) into the
    team; False when it was already there."""
    table, column = _LINKS[kind]
    cur = conn.execute(sql.SQL("INSERT INTO {} (team_id, org_id, {}) VALUES (%s, %s, %s)"
                               " ON CONFLICT DO NOTHING").format(
        sql.Identifier(table), sql.Identifier(column)), (team, org, target))
    return cur.rowcount == 1


def remove_link(conn: psycopg.Connection, team: UUID, kind: str, target: UUID) -> bool:
    """Take `target` out of the team; False when it was not in it."""
    table, column = _LINKS[kind]
    cur = conn.execute(sql.SQL("DELETE FROM {} WHERE team_id = %s AND {} = %s").format(
        sql.Identifier(table), sql.Identifier(column)), (team, target))
    return cur.rowcount == 1
