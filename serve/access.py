"""Account access administration: passwords, login lockouts and bearer tokens, and the
operator commands `sds access passwd|unlock|logout` that run them.

Request authentication is `serve.auth`; this module only changes what it checks against.
"""

from __future__ import annotations

import os
from typing import cast
from uuid import UUID

import click
import psycopg

from serve.auth import clear_account_failures
from shared import clitools, credentials, db
from shared.errors import BadRequest, ServiceError, UnknownObject


def change_password(conn: psycopg.Connection, *, user: UUID, password: str) -> None:
    """Set a new password: every bearer token of the user ends (they predate the change),
    cached Basic logins stop matching the stored hash, and the account's lockout is lifted.
    API keys stay (docs/auth.md)."""
    if len(password) < 8:
        raise BadRequest("password: at least 8 characters")
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


@click.group("access")
def access_cli() -> None:
    """Account access: passwords, login lockouts, bearer tokens."""


def _cli_user(conn: psycopg.Connection, email: str) -> UUID:
    row = conn.execute("SELECT id FROM users WHERE lower(email) = lower(%s)",
                       (email.strip(),)).fetchone()
    if row is None:
        raise click.ClickException(f"no user with email {email!r}")
    return cast(UUID, row[0])


@access_cli.command("passwd")
@click.argument("email")
def passwd_command(email: str) -> None:
    """Set a user's password (from SDS_USER_PASSWORD or a prompt, never argv); ends the
    user's bearer tokens and lifts a login lockout."""
    password = os.environ.get("SDS_USER_PASSWORD") or click.prompt(
        "New password", hide_input=True, confirmation_prompt=True)
    with db.connect(clitools.settings_from_env()) as conn:
        try:
            change_password(conn, user=_cli_user(conn, email), password=password)
        except ServiceError as exc:
            raise click.ClickException(exc.message) from None
    click.echo(f"password of {email} changed; its bearer tokens are revoked")


@access_cli.command("unlock")
@click.argument("email")
def unlock_command(email: str) -> None:
    """Lift the failed-login lockout of an account now instead of at the window's end."""
    with db.connect(clitools.settings_from_env()) as conn:
        removed = unlock(conn, email=email)
    click.echo(f"{email}: {'lockout lifted' if removed else 'no failed logins counted'}")


@access_cli.command("logout")
@click.argument("email")
def logout_command(email: str) -> None:
    """Revoke every bearer token of a user (API keys are managed with /api/v2/apikeys)."""
    with db.connect(clitools.settings_from_env()) as conn:
        count = revoke_tokens(conn, user=_cli_user(conn, email))
    click.echo(f"{email}: {count} bearer token(s) revoked")
