"""Account access administration: passwords, login lockouts and bearer tokens (run by the
operator commands `sds access passwd|unlock|logout`, admin/access.py, and by the dashboard).

Request authentication is `serve.auth`; this module only changes what it checks against.
"""

from __future__ import annotations

from uuid import UUID

import psycopg

from serve.authenticator import clear_account_failures
from shared import credentials
from shared.errors import BadRequest, UnknownObject


def change_password(conn: psycopg.Connection, *, user: UUID, password: str) -> None:
    """Set a new password: every bearer token of the user ends (they predate the change),
    cached Basic logins stop matching the stored hash, and the account's lockout is lifted.
    API keys stay (docs/auth.md)."""
    problem = credentials.password_problem(password)
    if problem:
        raise BadRequest(problem)
    row = conn.execute(
        "UPDATE users SET password_hash = %s, password_changed_at = clock_timestamp()"
        " WHERE id = %s RETURNING email", (credentials.hash_password(password), user)).fetchone()
    if row is None:
        raise UnknownObject(f"unknown user {user}")
    conn.execute("UPDATE auth_tokens SET revoked_at = now() WHERE user_id = %s"
                 " AND revoked_at IS NULL", (user,))
    unlock(conn, email=row[0])


def unlock(conn: psycopg.Connection, *, email: str) -> int:
    """Forget the failed logins counted against an account; the number of rows removed."""
    return clear_account_failures(conn, email)


def revoke_tokens(conn: psycopg.Connection, *, user: UUID) -> int:
    """Revoke every live bearer token of a user (log out everywhere); how many were live."""
    cur = conn.execute("UPDATE auth_tokens SET revoked_at = now() WHERE user_id = %s"
                       " AND revoked_at IS NULL AND expires_at > now()", (user,))
    return cur.rowcount
