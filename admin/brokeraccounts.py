"""Device accounts on the broker, for the `sds device` and `sds demo` commands: mosquitto
password-file entries (hashed by mosquitto_passwd, never on a command line), RabbitMQ
definitions (the cluster profile, admin/rabbit.py) and reloading the broker that reads them."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess  # nosec B404  runs mosquitto_passwd only
import tempfile
from collections.abc import Callable
from pathlib import Path

import click

from admin import brokersession, rabbit
from shared.config import Settings


def set_mqtt_passwords(passwd_file: Path, passwords: dict[str, str]) -> None:
    """Add or replace broker users in a mosquitto password file.

    The passwords never appear on a command line (where `ps` shows them): they go into a
    private plain `user:password` file that `mosquitto_passwd -U` hashes in place, whose lines
    then replace the users' old lines in `passwd_file`.
    """
    tool = shutil.which("mosquitto_passwd")
    if tool is None:
        raise click.ClickException("mosquitto_passwd not found (install mosquitto)")
    with tempfile.TemporaryDirectory() as tmp:
        plain = Path(tmp) / "passwd"
        plain.touch(mode=0o600)
        plain.write_text("".join(f"{user}:{pw}\n" for user, pw in passwords.items()))
        subprocess.run([tool, "-U", str(plain)], check=True, capture_output=True)  # nosec B603  fixed argv, no secret in it
        hashed = plain.read_text().splitlines()
    kept = []
    if passwd_file.exists():
        kept = [line for line in passwd_file.read_text().splitlines()
                if line.split(":", 1)[0] not in passwords]
    else:
        passwd_file.touch(mode=0o600)
    # Rewritten in place: owner and mode (the broker's, set by deploy/services.sh) stay.
    passwd_file.write_text("\n".join(kept + hashed) + "\n")


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




def reload_broker(passwd_file: Path, pid_file: Path | None) -> str:
    """SIGHUP the mosquitto that uses `passwd_file`, so it rereads it; what was done, in words.

    The pid comes from `pid_file`, by default `mosquitto.pid` beside the password file (the
    layout of deploy/services.sh). The process must be a mosquitto: a stale pid file must not
    make us signal whatever reuses the number.
    """
    pid_path = pid_file or passwd_file.parent / "mosquitto.pid"
    try:
        pid = int(pid_path.read_text().strip())
        comm = Path(f"/proc/{pid}/comm").read_text().strip()
    except (OSError, ValueError):
        return (f"broker not reloaded: no running broker found through {pid_path}; it reads "
                "the password file when it starts (or run deploy/services.sh reload-broker)")
    if comm != "mosquitto":
        return f"broker not reloaded: pid {pid} in {pid_path} is {comm!r}, not mosquitto"
    os.kill(pid, signal.SIGHUP)
    return f"broker reloaded (SIGHUP to mosquitto pid {pid})"


_RABBIT_HELP = ("RabbitMQ definitions file of the cluster profile (deploy layout: "
                ".state/rabbitmq/definitions.json); import it with deploy/services.sh "
                "reload-broker.")
RABBIT_RELOAD = "accounts written; import them: deploy/services.sh reload-broker"


def one_account_file(passwd_file: Path | None, definitions: Path | None) -> None:
    if passwd_file is None and definitions is None:
        raise click.UsageError("give --mqtt-passwd-file (mosquitto) or --rabbitmq-definitions "
                               "(the RabbitMQ cluster profile)")


def has_mqtt_user(passwd_file: Path, user: str) -> bool:
    """Whether a mosquitto password file has a line for `user`."""
    return passwd_file.exists() and any(
        line.split(":", 1)[0] == user for line in passwd_file.read_text().splitlines())


def end_mqtt_session(settings: Settings, name: str, password: str, passwd_file: Path,
                     pid_file: Path | None) -> None:
    """Reload the broker, then end the device's session with its new password
    (admin/brokersession.py); ClickException when the session could not be ended."""
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


def remove_mqtt_user(passwd_file: Path, user: str) -> bool:
    """Drop `user`'s line from a mosquitto password file; whether it was there."""
    if not passwd_file.exists():
        return False
    lines = passwd_file.read_text().splitlines()
    kept = [line for line in lines if line.split(":", 1)[0] != user]
    if len(kept) == len(lines):
        return False
    passwd_file.write_text("".join(f"{line}\n" for line in kept))
    return True


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
