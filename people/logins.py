"""Account access administration: passwords, login lockouts and bearer tokens (run by the
operator commands `sds access passwd|unlock|logout`, admin/access.py, and by the dashboard).

Request authentication is `serve.auth`; this module only changes what it checks against.
"""

from __future__ import annotations

import hashlib
from typing import NamedTuple
from uuid import UUID

import psycopg

from people import credentials
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


def failure_subject(text: str) -> bytes:
    """How a failed login's subject (an account's email, an address, a link) is stored: its
    SHA-256 digest (login_failures.subject)."""
    return hashlib.sha256(text.encode()).digest()


def clear_account_failures(conn: psycopg.Connection, email: str) -> int:
    """Forget the failed logins counted against an account (its lockout ends; the address's
    count stays); the number of rows removed."""
    cur = conn.execute("DELETE FROM login_failures WHERE kind = 'account' AND subject = %s",
                       (failure_subject(email.strip().lower()),))
    return cur.rowcount


def unlock(conn: psycopg.Connection, *, email: str) -> int:
    """Forget the failed logins counted against an account; the number of rows removed."""
    return clear_account_failures(conn, email)


def revoke_tokens(conn: psycopg.Connection, *, user: UUID) -> int:
    """Revoke every live bearer token of a user (log out everywhere); how many were live."""
    cur = conn.execute("UPDATE auth_tokens SET revoked_at = now() WHERE user_id = %s"
                       " AND revoked_at IS NULL AND expires_at > now()", (user,))
    return cur.rowcount


class Ended(NamedTuple):
    """What signing out everywhere ended: bearer tokens revoked, API keys deactivated."""

    tokens: int
    keys: int


def revoke_everything(conn: psycopg.Connection, *, user: UUID) -> Ended:
    """Sign `user` out everywhere: every live bearer token revoked and every API key
    deactivated, in every organisation, in this transaction. Through
    sds_revoke_my_credentials (migration 0165), keyed by app.user_id, set here for the rest of
    the transaction: the API role alone reaches only the request organisation's rows."""
    conn.execute("SELECT set_config('app.user_id', %s, true)", (str(user),))
    row = conn.execute("SELECT tokens, keys FROM sds_revoke_my_credentials()").fetchone()
    return Ended(int(row[0]), int(row[1])) if row else Ended(0, 0)
