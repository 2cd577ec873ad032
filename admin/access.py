"""`sds access passwd|unlock|logout`: account access (passwords, login lockouts, bearer
tokens; `logout --everything` API keys too) through people.logins."""

from __future__ import annotations

import os
from uuid import UUID

import click
import psycopg

from admin.context import audit_operator, connection, settings_from_env
from people import accounts
from people.logins import change_password, revoke_everything, revoke_tokens, unlock
from shared.errors import ServiceError, UnknownObject

CLI_NAME = "sds-access-cli"  # application_name of the command's sessions


@click.group("access")
def access_cli() -> None:
    """Account access: passwords, login lockouts, bearer tokens."""


def _cli_user(conn: psycopg.Connection, email: str) -> UUID:
    try:
        return accounts.user_id(conn, email.strip())
    except UnknownObject:
        raise click.ClickException(f"no user with email {email!r}") from None


@access_cli.command("passwd")
@click.argument("email")
def passwd_command(email: str) -> None:
    """Set a user's password (from SDS_USER_PASSWORD or a prompt, never argv); ends the
    user's bearer tokens and lifts a login lockout."""
    password = os.environ.get("SDS_USER_PASSWORD") or click.prompt(
        "New password", hide_input=True, confirmation_prompt=True)
    with connection(settings_from_env(), name=CLI_NAME) as conn:
        try:
            uid = _cli_user(conn, email)
            change_password(conn, user=uid, password=password)
            audit_operator(conn, of="users", row=uid, action="user.password", target_type="user",
                           details={"email": email, "tokens_revoked": True})
        except ServiceError as exc:
            raise click.ClickException(exc.message) from None
    click.echo(f"password of {email} changed; its bearer tokens are revoked")


@access_cli.command("unlock")
@click.argument("email")
def unlock_command(email: str) -> None:
    """Lift the failed-login lockout of an account now instead of at the window's end."""
    with connection(settings_from_env(), name=CLI_NAME) as conn:
        removed = unlock(conn, email=email)
    click.echo(f"{email}: {'lockout lifted' if removed else 'no failed logins counted'}")


@access_cli.command("logout")
@click.argument("email")
@click.option("--everything", is_flag=True, help="Also deactivate every API key of the user, "
              "in every organisation (sign out everywhere).")
def logout_command(email: str, everything: bool) -> None:
    """Revoke every bearer token of a user; with --everything every API key too."""
    with connection(settings_from_env(), name=CLI_NAME) as conn:
        uid = _cli_user(conn, email)
        if everything:
            ended = revoke_everything(conn, user=uid)
            count, keys = ended.tokens, ended.keys
        else:
            count, keys = revoke_tokens(conn, user=uid), 0
        audit_operator(conn, of="users", row=uid, action="user.logout", target_type="user",
                       details={"email": email, "tokens_revoked": count,
                                **({"keys_deactivated": keys} if everything else {})})
    click.echo(f"{email}: {count} bearer token(s) revoked"
               + (f", {keys} API key(s) deactivated" if everything else ""))
