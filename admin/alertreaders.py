"""`sds alert-reader add|remove ORG`: an organisation's alert-reader account on the broker.

On-site controllers (an irrigation valve) log in with it and subscribe to
`alerts/<organisation id>/#`, where the deliverer publishes the organisation's alert events
(docs/alerts.md "MQTT"). The account is `alerts-<organisation id>`; the broker plugin lets it
subscribe under its own organisation's alerts topic only. mosquitto profile only: the RabbitMQ
cluster profile has no alerts topic (docs/alerts.md "Limits").
"""

from __future__ import annotations

import secrets
from pathlib import Path
from uuid import UUID

import click

from admin import recovery
from admin.brokeraccounts import (
    PASSWD_HELP,
    PID_HELP,
    reload_broker,
    remove_mqtt_user,
    set_mqtt_passwords,
)
from admin.context import Context, audit_operator, pass_ctx
from people import accounts
from shared import alerttopic
from shared.errors import ServiceError


def reader_name(org: object) -> str:
    """The broker account of an organisation's alert reader."""
    return f"alerts-{org}"


@click.group("alert-reader")
def alert_reader() -> None:
    """An organisation's MQTT alert-reader account (mosquitto)."""


def _org(obj: Context, name_or_id: str) -> str:
    try:
        with obj.conn() as conn:
            return str(accounts.org_id(conn, name_or_id))
    except ServiceError as exc:
        raise click.ClickException(exc.message) from None


@alert_reader.command("add")
@click.argument("org_name")
@click.option("--mqtt-passwd-file", type=click.Path(path_type=Path), required=True,
              help=PASSWD_HELP)
@click.option("--broker-pid-file", type=click.Path(path_type=Path), default=None, help=PID_HELP)
@pass_ctx
def reader_add(obj: Context, org_name: str, mqtt_passwd_file: Path,
               broker_pid_file: Path | None) -> None:
    """Create (or give a new password to) ORG_NAME's alert reader; prints its login once."""
    org = _org(obj, org_name)
    password = secrets.token_urlsafe(24)
    user = reader_name(org)
    with obj.conn() as conn:  # the entry only when the password file was written
        set_mqtt_passwords(mqtt_passwd_file, {user: password})
        audit_operator(conn, of="organisations", row=UUID(org), action="alert_reader.add",
                       target_type="alert_reader", target_id=user)
    click.echo(f"username: {user}\npassword: {password}\n"
               f"topic:    {alerttopic.subscription(org)}  (subscribe, QoS 1)")
    click.echo(reload_broker(mqtt_passwd_file, broker_pid_file))
    recovery.remember(obj.settings)


@alert_reader.command("remove")
@click.argument("org_name")
@click.option("--mqtt-passwd-file", type=click.Path(path_type=Path), required=True,
              help=PASSWD_HELP)
@click.option("--broker-pid-file", type=click.Path(path_type=Path), default=None, help=PID_HELP)
@pass_ctx
def reader_remove(obj: Context, org_name: str, mqtt_passwd_file: Path,
                  broker_pid_file: Path | None) -> None:
    """Remove ORG_NAME's alert reader (new logins fail; the broker is reloaded)."""
    org = _org(obj, org_name)
    user = reader_name(org)
    with obj.conn() as conn:
        if not remove_mqtt_user(mqtt_passwd_file, user):
            raise click.ClickException(f"{user} is not in {mqtt_passwd_file}")
        audit_operator(conn, of="organisations", row=UUID(org), action="alert_reader.remove",
                       target_type="alert_reader", target_id=user)
    click.echo(f"removed {user}")
    click.echo(reload_broker(mqtt_passwd_file, broker_pid_file))
    recovery.remember(obj.settings)
