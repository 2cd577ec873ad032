"""Device accounts on the broker, for the `sds device` and `sds demo` commands: the options
naming them, RabbitMQ definitions (the cluster profile, admin/rabbit.py), and the mosquitto
password file and broker reload of shared/brokeraccounts.py (which the API's device writes use
too), with the commands' words around them."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import click

from admin import rabbit
from shared import brokersession
from shared.brokeraccounts import (
    has_mqtt_user,
    reload_broker,
    remove_mqtt_user,
    set_mqtt_passwords,
)
from shared.config import Settings


def set_rabbitmq_users(definitions: Path, passwords: dict[str, str], prefix: str) -> None:
    """Add or replace device accounts (user, permissions, topic permissions equal to the
    mosquitto ACL) in a RabbitMQ definitions file, as salted hashes (admin/rabbit.py)."""
    try:
        defs = rabbit.load(definitions)
    except ValueError as exc:  # also json.JSONDecodeError
        raise click.ClickException(f"{definitions}: {exc}") from None
    try:
        for name, password in passwords.items():
            rabbit.add_device(defs, name, password, prefix=prefix)
    except ValueError as exc:
        raise click.ClickException(str(exc)) from None
    rabbit.save(definitions, defs)




_RABBIT_HELP = ("RabbitMQ definitions file of the cluster profile (deploy layout: "
                ".state/rabbitmq/definitions.json); import it with deploy/services.sh "
                "reload-broker.")
RABBIT_RELOAD = "accounts written; import them: deploy/services.sh reload-broker"


def one_account_file(passwd_file: Path | None, definitions: Path | None) -> None:
    if passwd_file is None and definitions is None:
        raise click.UsageError("give --mqtt-passwd-file (mosquitto) or --rabbitmq-definitions "
                               "(the RabbitMQ cluster profile)")


def end_mqtt_session(settings: Settings, name: str, password: str, passwd_file: Path,
                     pid_file: Path | None) -> None:
    """Reload the broker, then end the device's session with its new password
    (shared/brokersession.py); ClickException when the session could not be ended."""
    reloaded = reload_broker(passwd_file, pid_file)
    click.echo(reloaded)
    if not reloaded.startswith("broker reloaded"):
        click.echo("broker session not ended: the broker is not running (end it later with "
                   "sds device rotate-password)")
        return
    try:
        click.echo(brokersession.end_session(settings, name, password))
    except brokersession.SessionNotEnded as exc:
        raise click.ClickException(str(exc)) from None


PASSWD_HELP = "mosquitto password file of the broker (deploy layout: .state/mosquitto/passwd)."
PID_HELP = "Broker pid file (default: mosquitto.pid beside the password file)."


def broker_account_options(command: Callable[..., None]) -> Callable[..., None]:
    """The options naming where a device's broker account lives (mosquitto password file or
    RabbitMQ definitions) and which broker to reload: one definition for add and
    rotate-password."""
    for option in reversed((
        click.option("--mqtt-passwd-file", type=click.Path(path_type=Path), default=None,
                     help=PASSWD_HELP),
        click.option("--rabbitmq-definitions", type=click.Path(path_type=Path), default=None,
                     help=_RABBIT_HELP),
        click.option("--broker-pid-file", type=click.Path(path_type=Path), default=None,
                     help=PID_HELP),
    )):
        command = option(command)
    return command


__all__ = ["PID_HELP", "RABBIT_RELOAD", "broker_account_options", "end_mqtt_session",
           "has_mqtt_user", "one_account_file", "reload_broker", "remove_mqtt_user",
           "set_mqtt_passwords", "set_rabbitmq_users"]
