"""The operator CLI, `sds`: one click group gathering every operator command of the service.

The commands live in admin/ (the operator room): organisations, users, locations and keys
(people.py), teams (teams.py), invitation and password-reset links (invites.py), devices
(devices.py, publish.py, brokeraccounts.py), the demo (demo.py), account access (access.py),
rollups (aggregate.py), storage and retention (storage.py), the quarantine (quarantine.py),
backups and restore (backup.py), alert rules (alerts.py), the device simulator
(simulate.py) and the RabbitMQ profile's files for deploy/rabbitmq.sh (rabbitcli.py). admin/
may import every package of the service; nothing imports admin/ (pyproject.toml,
import-linter)."""

from __future__ import annotations

import click
import psycopg

from admin import (
    access,
    aggregate,
    alertreaders,
    alerts,
    backup,
    cold,
    demo,
    devices,
    drill,
    invites,
    migrate,
    people,
    quarantine,
    rabbitcli,
    recovery,
    simulate,
    storage,
    teams,
    water,
)
from admin.context import Context, pass_ctx
from shared import config
from shared.logs import configure_logging


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.pass_context
def main(ctx: click.Context) -> None:
    """Operate the environmental sensor data service (configuration from SDS_* variables)."""
    obj = ctx.ensure_object(Context)
    configure_logging(obj.settings)


@main.command("config")
@click.option("--markdown", is_flag=True, help="Print the Markdown table of docs/settings.md.")
def show_config(markdown: bool) -> None:
    """List every SDS_* setting with its default and meaning."""
    if markdown:
        click.echo(config.markdown_table())
        return
    for var, default, doc, secret in config.documented():
        click.echo(f"{var:32} {default if not secret else '(secret)':28} {doc}")


@main.group()
def db() -> None:
    """Database schema."""


@db.command("upgrade")
@pass_ctx
def db_upgrade(obj: Context) -> None:
    """Apply pending SQL migrations, each in one transaction."""
    try:
        done = migrate.upgrade(obj.settings.database_url)
    except migrate.MigrationError as exc:
        raise click.ClickException(str(exc)) from None
    except psycopg.OperationalError as exc:
        raise click.ClickException(f"cannot connect to the database: {exc}") from None
    for mig in done:
        click.echo(f"applied {mig.version:04d}_{mig.name}")
    with obj.conn() as conn:
        version = migrate.timescaledb_version(conn)
    click.echo("schema up to date" if not done else f"{len(done)} migration(s) applied")
    click.echo(f"timescaledb {version}" if version else "timescaledb not installed: plain tables")


@db.command("status")
@pass_ctx
def db_status(obj: Context) -> None:
    """Show applied and pending migrations and the TimescaleDB version."""
    with obj.conn() as conn:
        have = migrate.applied(conn)
        version = migrate.timescaledb_version(conn)
    for mig in migrate.available():
        state = "applied" if mig.version in have else "pending"
        click.echo(f"{mig.version:04d}_{mig.name}: {state}")
    click.echo(f"timescaledb {version or 'not installed'}")


for command in (people.org, people.user, people.location, people.apikey, teams.team,
                devices.device, demo.demo, access.access_cli, aggregate.aggregate,
                storage.storage_cli, cold.cold_cli,
                quarantine.quarantine, simulate.simulate, backup.backup_cli, backup.restore,
                backup.restore_beside_stop, backup.copy_back,
                alerts.alert, alertreaders.alert_reader, water.water, recovery.recovery_cli,
                drill.drill, rabbitcli.rabbit_cli):
    main.add_command(command)
# `sds user invite|reset-link` live with the links' commands; they belong to the user group.
for command in (invites.user_invite, invites.user_reset_link):
    people.user.add_command(command)
