"""People of an organisation (issue 23): user and organisation records, memberships with
their roles, and the membership changes an owner or administrator makes (role, removal).

A user belongs to one or many organisations, each through a row of `memberships` (migration
0150) holding the role there: `owner`, `admin`, `member` or `viewer` (what each may do is
people.roles.ROLE_SCOPES; docs/auth.md "Roles"), and `teams_only` for a member or viewer
who sees only their teams' devices and locations. The role is read at every request, so a
demotion takes effect on the next request of each of the user's tokens and keys.

Only an owner makes or unmakes owners. An organisation that has an owner keeps one (the last
owner can be neither demoted nor removed), and one that has managers (owners or admins) keeps
one, so someone can always manage it. Removing a member ends that membership, revokes their
bearer tokens and deactivates their API keys bound to the organisation in one transaction;
the database then re-homes the user in another of their organisations, or deactivates the
account when none is left (migration 0150).
"""

from __future__ import annotations

from typing import Any
from uuid import UUID

import psycopg
from psycopg.rows import dict_row

from people import roles
from shared.errors import Conflict, UnknownObject
from shared.timeutil import stamp

__all__ = ["fetch_org", "fetch_user", "my_orgs", "org_of", "org_record", "orgs_of",
           "remove_member", "set_role", "user_page", "user_record"]

# A user as a member of one organisation: the membership's org, role and teams_only.
_USER_SQL = ("SELECT u.id, m.org_id, u.email, u.name, m.role, m.teams_only, u.active,"
             " u.preferences, u.created_at FROM users u JOIN memberships m ON m.user_id = u.id")


def user_record(row: dict[str, Any], *, full: bool = True) -> dict[str, Any]:
    """A served user as a member of `row["org_id"]`: `full` (the user themself, or a manager)
    adds preferences."""
    record = {
        "id": str(row["id"]),
        "email": row["email"],
        "name": row["name"],
        "org_id": str(row["org_id"]),
        "role": row["role"],
        "teams_only": row["teams_only"],
        "active": row["active"],
        "created": stamp(row["created_at"]),
    }
    if full:
        record["preferences"] = row["preferences"]
    return record


def org_record(row: dict[str, Any], *, role: str, members: int,
               teams_only: bool = False) -> dict[str, Any]:
    """A served organisation, with the caller's role in it and its number of active members."""
    return {"id": str(row["id"]), "name": row["name"], "created": stamp(row["created_at"]),
            "role": role, "teams_only": teams_only, "members": members}


def fetch_user(conn: psycopg.Connection, user: UUID, org: UUID) -> dict[str, Any]:
    """The user `user` as a member of `org`; UnknownObject otherwise (another organisation's
    user, or a former member, is the same 404 as a missing one)."""
    with conn.cursor(row_factory=dict_row) as cur:
        row = cur.execute(_USER_SQL + " WHERE u.id = %s AND m.org_id = %s",
                          (user, org)).fetchone()
    if row is None:
        raise UnknownObject(f"unknown user {str(user)!r}")
    return row


def org_of(conn: psycopg.Connection, user: UUID) -> UUID:
    """The home organisation of `user`; UnknownObject when there is no such user."""
    row = conn.execute("SELECT org_id FROM users WHERE id = %s", (user,)).fetchone()
    if row is None:
        raise UnknownObject(f"unknown user {user}")
    return UUID(str(row[0]))


def user_page(conn: psycopg.Connection, org: UUID, limit: int, offset: int,
              *, active_only: bool) -> tuple[list[dict[str, Any]], int]:
    """One page of the organisation's members (by email, as stored) and their total;
    `active_only=False` adds members whose account is deactivated."""
    row = conn.execute("SELECT count(*) FROM users u JOIN memberships m ON m.user_id = u.id"
                       " WHERE m.org_id = %s AND (u.active OR NOT %s)",
                       (org, active_only)).fetchone()
    with conn.cursor(row_factory=dict_row) as cur:
        rows = cur.execute(_USER_SQL + " WHERE m.org_id = %s AND (u.active OR NOT %s)"
                           " ORDER BY u.email, u.id LIMIT %s OFFSET %s",
                           (org, active_only, limit, offset)).fetchall()
    return rows, int(row[0]) if row else 0


def fetch_org(conn: psycopg.Connection, org: UUID) -> tuple[dict[str, Any], int]:
    """The organisation row and its number of active members."""
    with conn.cursor(row_factory=dict_row) as cur:
        row = cur.execute("SELECT id, name, created_at FROM organisations WHERE id = %s",
                          (org,)).fetchone()
    if row is None:
        raise UnknownObject(f"unknown organisation {org}")
    count = conn.execute("SELECT count(*) FROM memberships m JOIN users u ON u.id = m.user_id"
                         " WHERE m.org_id = %s AND u.active", (org,)).fetchone()
    return row, int(count[0]) if count else 0


def my_orgs(conn: psycopg.Connection) -> list[dict[str, Any]]:
    """The request's user's organisations (app.user_id), by name, each with their role,
    teams_only and the number of active members: through sds_my_orgs (migration 0150), as the
    API role sees no other organisation's rows."""
    with conn.cursor(row_factory=dict_row) as cur:
        return cur.execute("SELECT id, name, created_at, role, teams_only, members"
                           " FROM sds_my_orgs() ORDER BY name, id").fetchall()


def orgs_of(conn: psycopg.Connection, user: UUID) -> list[dict[str, Any]]:
    """The organisations of `user`, as my_orgs, for the operator (`sds org list --user`)."""
    with conn.cursor(row_factory=dict_row) as cur:
        return cur.execute(
            "SELECT o.id, o.name, o.created_at, m.role, m.teams_only,"
            " (SELECT count(*) FROM memberships x JOIN users u ON u.id = x.user_id"
            "   WHERE x.org_id = o.id AND u.active) AS members"
            " FROM memberships m JOIN organisations o ON o.id = m.org_id"
            " WHERE m.user_id = %s ORDER BY o.name, o.id", (user,)).fetchall()


def _check_leaves_managers(conn: psycopg.Connection, org: UUID, user: UUID,
                           role_after: str | None) -> None:
    """Conflict when `user` taking `role_after` (None: leaving) would leave an organisation
    that has an owner without one, or one that has managers without any. The organisation's
    managers are locked first, so two concurrent changes cannot both pass."""
    rows = conn.execute("SELECT m.user_id, m.role FROM memberships m JOIN users u"
                        " ON u.id = m.user_id WHERE m.org_id = %s AND u.active"
                        " AND m.role = ANY(%s) ORDER BY m.user_id FOR UPDATE OF m",
                        (org, sorted(roles.MANAGER_ROLES))).fetchall()
    before = {uid: role for uid, role in rows}
    after = dict(before)
    after.pop(user, None)
    if roles.manages(role_after):
        after[user] = role_after
    if roles.OWNER in before.values() and roles.OWNER not in after.values():
        raise Conflict("the organisation's last owner cannot be demoted or removed; make "
                       "someone else an owner first")
    if before and not after:
        raise Conflict("the organisation's last administrator cannot be demoted or removed; "
                       "make someone else an administrator first")


def set_role(conn: psycopg.Connection, *, org: UUID, user: UUID, role: str,
             teams_only: bool | None = None, by_owner: bool) -> dict[str, Any]:
    """Give the member `user` of `org` the `role` (and `teams_only`, None: keep it where the
    role allows it). Only an owner (`by_owner`; the operator counts as one) makes or unmakes
    an owner: Forbidden otherwise. Conflict for the last owner or administrator. Returns the
    member's row after the change."""
    roles.check_role(role)
    row = fetch_user(conn, user, org)
    if role != row["role"]:
        roles.check_owner_rule(by_owner=by_owner, roles=(role, row["role"]),
                               action="makes or unmakes an owner")
    if teams_only is None:
        teams_only = roles.keeps_teams_only(role, row["teams_only"])
    else:
        roles.check_teams_only(role, teams_only)
    if role != row["role"]:
        _check_leaves_managers(conn, org, user, role)
    conn.execute("UPDATE memberships SET role = %s, teams_only = %s WHERE user_id = %s"
                 " AND org_id = %s", (role, teams_only, user, org))
    return fetch_user(conn, user, org)


def remove_member(conn: psycopg.Connection, *, org: UUID, user: UUID,
                  by_owner: bool) -> dict[str, Any]:
    """End the membership of `user` in `org`: their bearer tokens and API keys bound to it stop
    at once. Forbidden for an owner unless `by_owner`; Conflict for the last owner or
    administrator. The account is deactivated when it was their last membership."""
    row = fetch_user(conn, user, org)
    roles.check_owner_rule(by_owner=by_owner, roles=(row["role"],), action="removes an owner")
    _check_leaves_managers(conn, org, user, None)
    # Credentials first: once the membership is gone the API role no longer sees the user.
    tokens = conn.execute("UPDATE auth_tokens SET revoked_at = now() WHERE user_id = %s"
                          " AND org_id = %s AND revoked_at IS NULL AND expires_at > now()",
                          (user, org)).rowcount
    keys = conn.execute("UPDATE api_keys SET active = false, updated = now()"
                        " WHERE user_id = %s AND org_id = %s AND active", (user, org)).rowcount
    conn.execute("DELETE FROM memberships WHERE user_id = %s AND org_id = %s", (user, org))
    return {"tokens_revoked": tokens, "keys_deactivated": keys}
