"""People of an organisation (issue 23): user and organisation records, roles, and the two
membership changes an administrator makes (role, removal).

A user belongs to one organisation today (`users.org_id`) with one of two roles: `admin`
(`users.is_admin`: manages people, keys' administrators-only scopes, locations, the audit log)
or `member` (reads the organisation's data and manages their own keys). The role is read at
every request, so a demotion takes effect on the next request of each of the user's tokens
and keys. Removing a member deactivates the account, revokes its bearer tokens and
deactivates its API keys in one transaction: every credential of theirs answers 401 from then
on. The last administrator can be neither demoted nor removed, so an organisation always has
someone who can manage it.
"""

from __future__ import annotations

from typing import Any
from uuid import UUID

import psycopg
from psycopg.rows import dict_row

from serve.records import stamp
from shared.errors import BadParameter, Conflict, UnknownObject

ROLES = ("admin", "member")
"""Roles of a member of an organisation, strongest first (docs/auth.md "Roles")."""


def role_of(is_admin: bool) -> str:
    """The role name of the stored flag."""
    return "admin" if is_admin else "member"


_USER_SQL = ("SELECT id, org_id, email, name, is_admin, active, preferences, created_at"
             " FROM users")


def user_record(row: dict[str, Any], *, full: bool = True) -> dict[str, Any]:
    """A served user: `full` (the user themself, or an administrator) adds preferences."""
    record = {
        "id": str(row["id"]),
        "email": row["email"],
        "name": row["name"],
        "org_id": str(row["org_id"]),
        "role": role_of(row["is_admin"]),
        "active": row["active"],
        "created": stamp(row["created_at"]),
    }
    if full:
        record["preferences"] = row["preferences"]
    return record


def org_record(row: dict[str, Any], *, role: str, members: int) -> dict[str, Any]:
    """A served organisation, with the caller's role in it and its number of active members."""
    return {"id": str(row["id"]), "name": row["name"], "created": stamp(row["created_at"]),
            "role": role, "members": members}


def fetch_user(conn: psycopg.Connection, user: UUID, org: UUID) -> dict[str, Any]:
    """The user row of `user` in `org`; UnknownObject otherwise (another organisation's user
    is the same 404 as a missing one)."""
    with conn.cursor(row_factory=dict_row) as cur:
        row = cur.execute(_USER_SQL + " WHERE id = %s AND org_id = %s", (user, org)).fetchone()
    if row is None:
        raise UnknownObject(f"unknown user {user}")
    return row


def org_of(conn: psycopg.Connection, user: UUID) -> UUID:
    """The organisation of `user`; UnknownObject when there is no such user."""
    row = conn.execute("SELECT org_id FROM users WHERE id = %s", (user,)).fetchone()
    if row is None:
        raise UnknownObject(f"unknown user {user}")
    return UUID(str(row[0]))


def user_page(conn: psycopg.Connection, org: UUID, limit: int, offset: int,
              *, active_only: bool) -> tuple[list[dict[str, Any]], int]:
    """One page of the organisation's users (by email, as stored) and their total."""
    row = conn.execute("SELECT count(*) FROM users WHERE org_id = %s AND (active OR NOT %s)",
                       (org, active_only)).fetchone()
    with conn.cursor(row_factory=dict_row) as cur:
        rows = cur.execute(_USER_SQL + " WHERE org_id = %s AND (active OR NOT %s)"
                           " ORDER BY email, id LIMIT %s OFFSET %s",
                           (org, active_only, limit, offset)).fetchall()
    return rows, int(row[0]) if row else 0


def fetch_org(conn: psycopg.Connection, org: UUID) -> tuple[dict[str, Any], int]:
    """The organisation row and its number of active members."""
    with conn.cursor(row_factory=dict_row) as cur:
        row = cur.execute("SELECT id, name, created_at FROM organisations WHERE id = %s",
                          (org,)).fetchone()
    if row is None:
        raise UnknownObject(f"unknown organisation {org}")
    count = conn.execute("SELECT count(*) FROM users WHERE org_id = %s AND active",
                         (org,)).fetchone()
    return row, int(count[0]) if count else 0


def _other_admins(conn: psycopg.Connection, org: UUID, user: UUID) -> int:
    """Active administrators of `org` besides `user`, counted under a lock on the org's
    administrators, so two concurrent demotions cannot leave none."""
    rows = conn.execute("SELECT id FROM users WHERE org_id = %s AND is_admin AND active"
                        " ORDER BY id FOR UPDATE", (org,)).fetchall()
    return sum(1 for (uid,) in rows if uid != user)


def set_role(conn: psycopg.Connection, *, org: UUID, user: UUID, role: str) -> dict[str, Any]:
    """Give `user` the `role`; Conflict when it would leave the organisation without an active
    administrator. Returns the user row after the change."""
    if role not in ROLES:
        raise BadParameter(f"role: one of {', '.join(ROLES)}")
    row = fetch_user(conn, user, org)
    if not row["active"]:
        raise UnknownObject(f"unknown user {user}")  # removed: no longer a member
    if row["is_admin"] and role != "admin" and _other_admins(conn, org, user) == 0:
        raise Conflict("the organisation's last administrator cannot be demoted; make "
                       "someone else an administrator first")
    conn.execute("UPDATE users SET is_admin = %s WHERE id = %s", (role == "admin", user))
    return fetch_user(conn, user, org)


def remove_member(conn: psycopg.Connection, *, org: UUID, user: UUID) -> dict[str, int]:
    """Remove `user` from `org`: the account is deactivated, its live bearer tokens revoked and
    its API keys deactivated, at once. Conflict for the last active administrator."""
    row = fetch_user(conn, user, org)
    if not row["active"]:
        raise UnknownObject(f"unknown user {user}")  # removed already: not a member
    if row["is_admin"] and _other_admins(conn, org, user) == 0:
        raise Conflict("the organisation's last administrator cannot be removed; make "
                       "someone else an administrator first")
    conn.execute("UPDATE users SET active = false, is_admin = false WHERE id = %s", (user,))
    tokens = conn.execute("UPDATE auth_tokens SET revoked_at = now() WHERE user_id = %s"
                          " AND revoked_at IS NULL AND expires_at > now()", (user,)).rowcount
    keys = conn.execute("UPDATE api_keys SET active = false, updated = now()"
                        " WHERE user_id = %s AND active", (user,)).rowcount
    return {"tokens_revoked": tokens, "keys_deactivated": keys}
