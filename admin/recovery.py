"""`sds recovery save|status|unpack`: the recovery kit
(shared/recovery.py), the files of .state a whole-machine loss needs besides the database,
sealed into the database so that its backups carry them (docs/operations.md "Whole machine
lost")."""

from __future__ import annotations

import base64
import os
import sys
from pathlib import Path

import click
import psycopg

from admin import context
from shared import recovery
from shared.config import Settings


def remember(settings: Settings) -> None:
    """Save the kit after a change of broker accounts (`sds device`, `sds alert-reader`,
    `sds demo`), when the deployment names its .state and a recovery key; a failure is said,
    not raised (the change itself is done; the next save, at the latest the next start,
    takes it)."""
    if not (settings.state_dir and settings.recovery_key):
        return
    try:
        count = _save(settings)
    except (click.ClickException, psycopg.Error, recovery.RecoveryError, OSError) as exc:
        click.echo(f"warning: the recovery kit was not saved ({exc}); run: sds recovery save",
                   err=True)
        return
    click.echo(f"recovery kit saved ({count} files, sealed in the database)")


def _save(settings: Settings) -> int:
    state = Path(settings.state_dir or "")
    files = recovery.collect(state, os.environ)
    with context.connection(settings, name="sds-recovery") as conn:
        return recovery.save(conn, files, settings.recovery_key)


@click.group("recovery")
def recovery_cli() -> None:
    """The recovery kit: secrets, broker credentials and settings, sealed into the database
    (docs/operations.md "Whole machine lost")."""


@recovery_cli.command("save")
def save() -> None:
    """Seal the kit's files of SDS_STATE_DIR into the database now (deploy/run.sh does it at
    each start, the account commands after each change)."""
    settings = context.settings_from_env()
    if not settings.state_dir:
        raise click.ClickException("SDS_STATE_DIR is not set: source .state/secrets.env")
    try:
        count = _save(settings)
    except (recovery.RecoveryError, OSError) as exc:
        raise click.ClickException(str(exc)) from None
    click.echo(f"recovery kit saved ({count} files, sealed in the database)")


@recovery_cli.command("status")
def status() -> None:
    """The kit's files in the database, when each was last changed, and whether
    SDS_RECOVERY_KEY opens them."""
    settings = context.settings_from_env()
    with context.connection(settings, name="sds-recovery") as conn:
        rows = conn.execute(
            "SELECT name, sealed, updated_at FROM recovery_files ORDER BY name").fetchall()
    if not rows:
        click.echo("recovery kit: EMPTY (deploy/run.sh saves it at start; sds recovery save)")
        raise SystemExit(3)
    try:
        recovery.open_all({r[0]: bytes(r[1]) for r in rows}, settings.recovery_key)
    except recovery.RecoveryError as exc:
        raise click.ClickException(str(exc)) from None
    for name, _, at in rows:
        click.echo(f"{name}  {at:%Y-%m-%d %H:%M:%S}Z")
    click.echo("recovery kit: every file opens with SDS_RECOVERY_KEY")


@click.command("unpack")
@click.option("--state", "state_dir", required=True, type=click.Path(file_okay=False,
              path_type=Path), help="The .state directory to write the files into.")
def unpack(state_dir: Path) -> None:
    """Write the kit's files into --state from `name<TAB>base64` lines on stdin (what
    deploy/services.sh recover reads from the restored database as the superuser: the
    database password is one of the files)."""
    rows = {}
    for line in sys.stdin:
        if line.strip():
            name, _, token = line.rstrip("\n").partition("\t")
            rows[name] = base64.b64decode(token)
    if not rows:
        raise click.ClickException("the restored database holds no recovery kit "
                                   "(recovery_files is empty)")
    try:
        files = recovery.open_all(rows, os.environ.get("SDS_RECOVERY_KEY"))
    except recovery.RecoveryError as exc:
        raise click.ClickException(str(exc)) from None
    for name in recovery.write(state_dir, files):
        click.echo(f"recovered {name}")


recovery_cli.add_command(unpack)
