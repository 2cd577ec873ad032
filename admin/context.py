"""What every `sds` command shares: settings from the environment, a database connection for one
command with operator-readable errors instead of tracebacks, the click context object
(`Context`, `pass_ctx`) that carries both, and the audit entry of an operator's change."""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager
from typing import Any, Literal
from uuid import UUID

import click
import psycopg

from shared import audit, coldstore, db
from shared.config import Settings
from shared.errors import ServiceError


def settings_from_env() -> Settings:
    """The SDS_* settings; a bad value is a ClickException naming it."""
    try:
        settings = Settings.from_env(os.environ)
    except ValueError as exc:
        raise click.ClickException(f"bad configuration: {exc}") from None
    coldstore.configure(settings)  # the cold tier's S3 access and backup copies
    return settings


@contextmanager
def connection(settings: Settings, *, name: str | None = None,
               errors: tuple[type[Exception], ...] = (), autocommit: bool = False,
               connect_timeout: int | None = None) -> Iterator[psycopg.Connection]:
    """The one way an `sds` command connects: work committed on success, rolled back on error
    (autocommit=True: each statement commits, for work done in chunks). An unreachable
    database, a ServiceError and any of `errors` become a ClickException (exit status 1)."""
    try:
        extra: dict[str, Any] = {"connect_timeout": connect_timeout} if connect_timeout else {}
        conn = db.connect(settings, name=name, autocommit=autocommit, **extra)
    except psycopg.OperationalError as exc:
        raise click.ClickException(
            f"cannot connect to the database (SDS_DATABASE_URL): {exc}".strip()) from None
    try:
        with conn:
            yield conn
    except ServiceError as exc:
        raise click.ClickException(exc.message) from None
    except errors as exc:
        raise click.ClickException(str(exc)) from None
    finally:
        conn.close()


def plain_connection(settings: Settings | str, *, name: str,
                     autocommit: bool = False) -> psycopg.Connection:
    """A connection for work that manages its own transactions (the backfill's workers, the
    migrator, which testbed/ also runs with a URL); the caller closes it."""
    return db.connect(settings, name=name, autocommit=autocommit)


# The tables whose rows name the organisation an operator's change belongs to.
_ORG_OF = {
    "organisations": "SELECT id FROM organisations WHERE id = %s",
    "users": "SELECT org_id FROM users WHERE id = %s",
    "locations": "SELECT org_id FROM locations WHERE id = %s",
    "devices": "SELECT org_id FROM devices WHERE id = %s",
}


def audit_operator(conn: psycopg.Connection, *,
                   of: Literal["organisations", "users", "locations", "devices"],
                   row: UUID, action: str, target_type: str, target_id: object | None = None,
                   details: dict[str, Any] | None = None) -> None:
    """Write the audit entry of an `sds` change (actor "operator") in the command's
    transaction, for the organisation that `row` of table `of` belongs to; the target is
    `target_id`, or that row."""
    found = conn.execute(_ORG_OF[of], (row,)).fetchone()
    if found is not None:
        audit.record(conn, org=found[0], actor=audit.OPERATOR, action=action,
                     target_type=target_type, target_id=row if target_id is None else target_id,
                     details=details)


class Context:
    """The click context object of `sds`: the settings, read once, and connections from them."""

    def __init__(self) -> None:
        self.settings = settings_from_env()

    def conn(self) -> AbstractContextManager[psycopg.Connection]:
        """A connection whose work is committed on success, rolled back on error."""
        return connection(self.settings)


pass_ctx = click.make_pass_decorator(Context, ensure=True)
