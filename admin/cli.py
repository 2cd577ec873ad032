"""The operator CLI, `sds`: database migrations, organisations, users, locations, devices and
their life cycle (add, list, show, retire, password rotation, test publish), deployments, API
keys and the demo. `ingest` and `aggregate` add their own command groups
(`simulate`, `aggregate`) through the `sds.commands` entry point, so this module imports
neither."""

from __future__ import annotations

import json
import os
import secrets
import shutil
import signal
import subprocess  # nosec B404  runs mosquitto_passwd only
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from contextlib import AbstractContextManager
from datetime import UTC, datetime, timedelta
from importlib.metadata import entry_points
from pathlib import Path
from typing import Any

import click
import paho.mqtt.client as mqtt
import psycopg
from psycopg import sql

from shared import accounts, clitools, config, migrate, rabbit, sealing
from shared.config import Settings
from shared.errors import ServiceError
from shared.logs import configure_logging
from shared.timeutil import parse_instant


class _Context:
    def __init__(self) -> None:
        self.settings = clitools.settings_from_env()

    def conn(self) -> AbstractContextManager[psycopg.Connection]:
        """A connection whose work is committed on success, rolled back on error."""
        return clitools.connection(self.settings)


pass_ctx = click.make_pass_decorator(_Context, ensure=True)


class _Root(click.Group):
    """Root group that also lists the commands contributed by the process packages."""

    def _plugins(self) -> dict[str, click.Command]:
        found: dict[str, click.Command] = {}
        for ep in entry_points(group="sds.commands"):
            found[ep.name] = ep.load()
        return found

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(set(super().list_commands(ctx)) | set(self._plugins()))

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        return super().get_command(ctx, cmd_name) or self._plugins().get(cmd_name)


@click.group(cls=_Root, context_settings={"help_option_names": ["-h", "--help"]})
@click.pass_context
def main(ctx: click.Context) -> None:
    """Operate the environmental sensor data service (configuration from SDS_* variables)."""
    obj = ctx.ensure_object(_Context)
    configure_logging(obj.settings)


@main.command("config")
@click.option("--markdown", is_flag=True, help="Print the README's Markdown table.")
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
def db_upgrade(obj: _Context) -> None:
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
def db_status(obj: _Context) -> None:
    """Show applied and pending migrations and the TimescaleDB version."""
    with obj.conn() as conn:
        have = migrate.applied(conn)
        version = migrate.timescaledb_version(conn)
    for mig in migrate.available():
        state = "applied" if mig.version in have else "pending"
        click.echo(f"{mig.version:04d}_{mig.name}: {state}")
    click.echo(f"timescaledb {version or 'not installed'}")


@main.group()
def org() -> None:
    """Organisations."""


@org.command("create")
@click.argument("name")
@pass_ctx
def org_create(obj: _Context, name: str) -> None:
    """Create an organisation called NAME."""
    with obj.conn() as conn:
        oid = accounts.create_org(conn, name=name)
    click.echo(f"organisation {name} id {oid}")


@main.group()
def user() -> None:
    """Users."""


@user.command("create")
@click.option("--org", "org_name", required=True, help="Organisation name or id.")
@click.option("--email", required=True)
@click.option("--name", default=None, help="Display name.")
@click.option("--admin", is_flag=True, help="Organisation administrator.")
@pass_ctx
def user_create(obj: _Context, org_name: str, email: str, name: str | None, admin: bool) -> None:
    """Create a user. The password comes from SDS_USER_PASSWORD or a prompt, never argv."""
    password = os.environ.get("SDS_USER_PASSWORD") or click.prompt(
        "Password", hide_input=True, confirmation_prompt=True)
    with obj.conn() as conn:
        uid = accounts.create_user(conn, org=accounts.org_id(conn, org_name), email=email,
                                   password=password, name=name, is_admin=admin)
    click.echo(f"user {email} id {uid}")


@main.group()
def location() -> None:
    """Locations."""


@location.command("create")
@click.option("--org", "org_name", required=True, help="Organisation name or id.")
@click.option("--name", required=True)
@click.option("--tz", "tz_name", required=True, help="IANA time zone, e.g. America/Chicago.")
@click.option("--lat", type=float, default=None)
@click.option("--lon", type=float, default=None)
@click.option("--elev", type=float, default=None, help="Elevation (m).")
@click.option("--kc", type=float, default=None, help="Crop coefficient.")
@click.option("--sensor-height", type=float, default=2.0, show_default=True,
              help="Wind sensor height (m).")
@pass_ctx
def location_create(obj: _Context, org_name: str, name: str, tz_name: str, lat: float | None,
                    lon: float | None, elev: float | None, kc: float | None,
                    sensor_height: float) -> None:
    """Create a location."""
    loc = accounts.LocationInput(name=name, tz_name=tz_name, lat=lat, lon=lon, elev=elev, kc=kc,
                                 sensor_height=sensor_height)
    with obj.conn() as conn:
        lid = accounts.create_location(conn, org=accounts.org_id(conn, org_name), loc=loc)
    click.echo(f"location {name} id {lid}")


@main.group()
def device() -> None:
    """Devices and deployments."""


def _set_mqtt_passwords(passwd_file: Path, passwords: dict[str, str]) -> None:
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


def _set_rabbitmq_users(definitions: Path, passwords: dict[str, str], prefix: str) -> None:
    """Add or replace device accounts (user, permissions, topic permissions equal to the
    mosquitto ACL) in a RabbitMQ definitions file, as salted hashes (shared/rabbit.py)."""
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


@device.command("register")
@click.argument("name")
@click.option("--org", "org_name", required=True, help="Organisation name or id.")
@click.option("--type", "dev_type", default=None)
@click.option("--model", default=None)
@click.option("--mqtt-passwd-file", type=click.Path(path_type=Path), default=None,
              help="Also give the device a broker password in this mosquitto password file.")
@click.option("--rabbitmq-definitions", type=click.Path(path_type=Path), default=None,
              help="Also give the device a broker account in this RabbitMQ definitions file "
                   "(the cluster profile; import it with deploy/services.sh reload-broker).")
@pass_ctx
def device_register(obj: _Context, name: str, org_name: str, dev_type: str | None,
                    model: str | None, mqtt_passwd_file: Path | None,
                    rabbitmq_definitions: Path | None) -> None:
    """Register device NAME (state New until its first reading)."""
    password = secrets.token_urlsafe(18)
    with obj.conn() as conn:
        did = accounts.register_device(conn, org=accounts.org_id(conn, org_name), name=name,
                                       type=dev_type, model=model)
        if mqtt_passwd_file:
            _set_mqtt_passwords(mqtt_passwd_file, {name: password})
        if rabbitmq_definitions:
            _set_rabbitmq_users(rabbitmq_definitions, {name: password},
                                obj.settings.topic_prefix)
    click.echo(f"device {name} id {did}")
    if mqtt_passwd_file or rabbitmq_definitions:
        click.echo(f"mqtt username {name} password {password} "
                   "(reload the broker: deploy/services.sh reload-broker)")


def _instant_or_now(value: str, name: str) -> datetime:
    """An ISO 8601 option value, or the word `now` (said on purpose, never assumed)."""
    if value.strip().lower() == "now":
        return datetime.now(UTC).replace(microsecond=0)
    try:
        return parse_instant(value, name=name)
    except ServiceError as exc:
        raise click.ClickException(exc.message) from None


_FROM_HELP = ("ISO 8601 start of the deployment, or `now`. Required: readings are attributed "
              "to the location from this instant, so a device installed last week needs last "
              "week's date.")


@device.command("deploy")
@click.argument("name")
@click.option("--location", "loc", required=True, help="Location id or name.")
@click.option("--from", "start", required=True, help=_FROM_HELP)
@click.option("--to", "end", default=None, help="ISO 8601 end (default open-ended).")
@pass_ctx
def device_deploy(obj: _Context, name: str, loc: str, start: str, end: str | None) -> None:
    """Deploy device NAME at a location from a time (ends its current deployment there)."""
    t0 = _instant_or_now(start, "--from")
    t1 = _instant_or_now(end, "--to") if end else None
    with obj.conn() as conn:
        dep = accounts.deploy_device(conn, device=name, location=accounts.location_id(conn, loc),
                                     start=t0, end=t1)
    click.echo(f"deployment {dep}: {name} at {loc} from {t0.isoformat()}"
               + (f" to {t1.isoformat()}" if t1 else ""))


def _reload_broker(passwd_file: Path, pid_file: Path | None) -> str:
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
_RABBIT_RELOAD = "accounts written; import them: deploy/services.sh reload-broker"


def _one_account_file(passwd_file: Path | None, definitions: Path | None) -> None:
    if passwd_file is None and definitions is None:
        raise click.UsageError("give --mqtt-passwd-file (mosquitto) or --rabbitmq-definitions "
                               "(the RabbitMQ cluster profile)")


def _remove_mqtt_user(passwd_file: Path, user: str) -> bool:
    """Drop `user`'s line from a mosquitto password file; whether it was there."""
    if not passwd_file.exists():
        return False
    lines = passwd_file.read_text().splitlines()
    kept = [line for line in lines if line.split(":", 1)[0] != user]
    if len(kept) == len(lines):
        return False
    passwd_file.write_text("".join(f"{line}\n" for line in kept))
    return True


_PASSWD_HELP = "mosquitto password file of the broker (deploy layout: .state/mosquitto/passwd)."
_PID_HELP = "Broker pid file (default: mosquitto.pid beside the password file)."


def _broker_account_options(command: Callable[..., None]) -> Callable[..., None]:
    """The options naming where a device's broker account lives (mosquitto password file or
    RabbitMQ definitions) and which broker to reload: one definition for add and
    rotate-password."""
    for option in reversed((
        click.option("--mqtt-passwd-file", type=click.Path(path_type=Path), default=None,
                     help=_PASSWD_HELP),
        click.option("--rabbitmq-definitions", type=click.Path(path_type=Path), default=None,
                     help=_RABBIT_HELP),
        click.option("--broker-pid-file", type=click.Path(path_type=Path), default=None,
                     help=_PID_HELP),
    )):
        command = option(command)
    return command


@device.command("add")
@click.argument("name")
@click.option("--org", "org_name", required=True, help="Organisation name or id.")
@click.option("--location", "loc", required=True, help="Location id or name.")
@click.option("--from", "start", required=True, help=_FROM_HELP)
@click.option("--type", "dev_type", default=None)
@click.option("--model", default=None)
@_broker_account_options
@pass_ctx
def device_add(obj: _Context, name: str, org_name: str, loc: str, start: str,
               dev_type: str | None, model: str | None, mqtt_passwd_file: Path | None,
               rabbitmq_definitions: Path | None, broker_pid_file: Path | None) -> None:
    """Add device NAME in one step: register it, deploy it at a location, give it a broker
    password and reload the broker. Prints the password (shown only this once)."""
    _one_account_file(mqtt_passwd_file, rabbitmq_definitions)
    t0 = _instant_or_now(start, "--from")
    password = secrets.token_urlsafe(18)
    with obj.conn() as conn:
        org_id = accounts.org_id(conn, org_name)
        did = accounts.register_device(conn, org=org_id, name=name, type=dev_type, model=model)
        dep = accounts.deploy_device(conn, device=name,
                                     location=accounts.location_id(conn, loc, org=org_id),
                                     start=t0)
        # Last inside the transaction: a refused deployment leaves no password behind, and
        # a failing password file leaves no device.
        if rabbitmq_definitions:
            _set_rabbitmq_users(rabbitmq_definitions, {name: password},
                                obj.settings.topic_prefix)
        if mqtt_passwd_file:
            _set_mqtt_passwords(mqtt_passwd_file, {name: password})
    click.echo(f"device {name} id {did}, deployment {dep} at {loc} from {t0.isoformat()}")
    click.echo(f"mqtt username {name} password {password}")
    if mqtt_passwd_file:
        click.echo(_reload_broker(mqtt_passwd_file, broker_pid_file))
    if rabbitmq_definitions:
        click.echo(_RABBIT_RELOAD)
    click.echo(f"the device publishes to {obj.settings.topic_prefix}/{name}/readings; check "
               f"with: sds device publish-test {name}")


@device.command("list")
@click.option("--org", "org_name", default=None, help="Only this organisation (name or id).")
@click.option("--state", type=click.Choice(["New", "Active", "Inactive", "Retired"]),
              default=None)
@pass_ctx
def device_list(obj: _Context, org_name: str | None, state: str | None) -> None:
    """List devices: name, organisation, state, where it stands now, last reading."""
    with obj.conn() as conn:
        org_filter = accounts.org_id(conn, org_name) if org_name else None
        rows = conn.execute(_DEVICE_LIST, (org_filter, org_filter, state, state)).fetchall()
    click.echo(f"{'device':20} {'organisation':20} {'state':9} {'location':24} last reading")
    for name, org_label, dev_state, loc_name, last in rows:
        click.echo(f"{name:20} {org_label[:20]:20} {dev_state:9} {(loc_name or '-')[:24]:24} "
                   f"{last.isoformat() if last else '-'}")
    click.echo(f"{len(rows)} device(s)")


_DEVICE_LIST = """
SELECT d.name, o.name, d.state, l.name,
       (SELECT max(c.time) FROM calibrated c WHERE c.device = d.name)
FROM devices d JOIN organisations o ON o.id = d.org_id
LEFT JOIN deployments dp ON dp.device_id = d.id AND dp.during @> now()
LEFT JOIN locations l ON l.id = dp.location_id
WHERE (%s::uuid IS NULL OR d.org_id = %s::uuid) AND (%s::text IS NULL OR d.state = %s)
ORDER BY o.name, d.name
"""


@device.command("show")
@click.argument("name")
@pass_ctx
def device_show(obj: _Context, name: str) -> None:
    """A device's record, deployments, latest reading and health, and recent quarantine."""
    with obj.conn() as conn:
        row = conn.execute(
            "SELECT d.name, o.name, d.state, d.type, d.model, d.created_at, d.last_seen"
            " FROM devices d JOIN organisations o ON o.id = d.org_id WHERE d.name = %s",
            (name,)).fetchone()
        if row is None:
            raise click.ClickException(f"unknown device {name!r}")
        deployments = conn.execute(
            "SELECT l.name, l.tz_name, lower(dp.during), upper(dp.during) FROM deployments dp"
            " JOIN devices d ON d.id = dp.device_id JOIN locations l ON l.id = dp.location_id"
            " WHERE d.name = %s ORDER BY lower(dp.during)", (name,)).fetchall()
        last = conn.execute("SELECT max(time), count(*) FILTER (WHERE time > now() - interval"
                            " '1 day') FROM calibrated WHERE device = %s", (name,)).fetchone()
        health = conn.execute("SELECT time, batt_pct, rssi, fw FROM health WHERE device = %s"
                              " ORDER BY time DESC LIMIT 1", (name,)).fetchone()
        quarantined = conn.execute(
            "SELECT reason, count(*), max(received_at) FROM quarantine WHERE device = %s"
            " AND received_at > now() - interval '7 days' GROUP BY reason ORDER BY 2 DESC",
            (name,)).fetchall()
    dev, org_label, state, dev_type, model, created, seen = row
    click.echo(f"device:        {dev}\norganisation:  {org_label}\nstate:         {state}")
    click.echo(f"type / model:  {dev_type or '-'} / {model or '-'}")
    click.echo(f"registered:    {created.isoformat()}")
    click.echo(f"last seen:     {seen.isoformat() if seen else '-'}")
    click.echo("deployments:" + ("" if deployments else "   none (readings get no location)"))
    for loc_name, tz_name, lo, hi in deployments:
        click.echo(f"  {loc_name} ({tz_name}) from {lo.isoformat()} "
                   f"{'to ' + hi.isoformat() if hi else '(current)'}")
    assert last is not None
    click.echo(f"last reading:  {last[0].isoformat() if last[0] else '-'} "
               f"({last[1]} in the last 24 h)")
    if health:
        click.echo(f"last health:   {health[0].isoformat()} battery {health[1]} rssi "
                   f"{health[2]} fw {health[3]}")
    click.echo("quarantine, last 7 days:" + ("" if quarantined else " none"))
    for reason, count, latest in quarantined:
        click.echo(f"  {reason}: {count} (latest {latest.isoformat()})")


@device.command("retire")
@click.argument("name")
@click.option("--at", "at", required=True, help="ISO 8601 instant the device stopped, or `now`.")
@click.option("--mqtt-passwd-file", type=click.Path(path_type=Path), default=None,
              help="Also remove its broker password from this file and reload the broker.")
@click.option("--rabbitmq-definitions", type=click.Path(path_type=Path), default=None,
              help="Also remove its account from this RabbitMQ definitions file.")
@click.option("--broker-pid-file", type=click.Path(path_type=Path), default=None,
              help=_PID_HELP)
@pass_ctx
def device_retire(obj: _Context, name: str, at: str, mqtt_passwd_file: Path | None,
                  rabbitmq_definitions: Path | None, broker_pid_file: Path | None) -> None:
    """Retire device NAME: state Retired, its open deployment ended at --at, and (with
    --mqtt-passwd-file) its broker login removed. Its data stays."""
    t_end = _instant_or_now(at, "--at")
    with obj.conn() as conn:
        dev = conn.execute("SELECT id, state FROM devices WHERE name = %s", (name,)).fetchone()
        if dev is None:
            raise click.ClickException(f"unknown device {name!r}")
        if dev[1] == "Retired":
            raise click.ClickException(f"device {name!r} is already retired")
        later = conn.execute(
            "SELECT lower(during) FROM deployments WHERE device_id = %s AND lower(during) >= %s",
            (dev[0], t_end)).fetchone()
        if later:
            raise click.ClickException(
                f"--at {t_end.isoformat()} is not after the start of a deployment "
                f"({later[0].isoformat()}); choose a later instant")
        ended = conn.execute(
            "UPDATE deployments SET during = tstzrange(lower(during), %s, '[)')"
            " WHERE device_id = %s AND (upper_inf(during) OR upper(during) > %s)",
            (t_end, dev[0], t_end)).rowcount
        conn.execute("UPDATE devices SET state = 'Retired' WHERE id = %s", (dev[0],))
        removed = _remove_mqtt_user(mqtt_passwd_file, name) if mqtt_passwd_file else False
        removed_rabbit = False
        if rabbitmq_definitions and rabbitmq_definitions.exists():
            defs = rabbit.load(rabbitmq_definitions)
            removed_rabbit = rabbit.remove_user(defs, name)
            rabbit.save(rabbitmq_definitions, defs)
    click.echo(f"device {name} retired at {t_end.isoformat()}"
               + (", its deployment ended" if ended else ", it had no deployment to end"))
    if mqtt_passwd_file:
        if removed:
            click.echo("broker password removed; " + _reload_broker(mqtt_passwd_file,
                                                                    broker_pid_file))
        else:
            click.echo(f"no broker password for {name} in {mqtt_passwd_file}")
    if rabbitmq_definitions:
        click.echo(f"broker account removed; {_RABBIT_RELOAD}" if removed_rabbit
                   else f"no broker account for {name} in {rabbitmq_definitions}")


@device.command("rotate-password")
@click.argument("name")
@_broker_account_options
@pass_ctx
def device_rotate_password(obj: _Context, name: str, mqtt_passwd_file: Path | None,
                           rabbitmq_definitions: Path | None,
                           broker_pid_file: Path | None) -> None:
    """Give device NAME a new broker password (the old one stops working at the reload)."""
    _one_account_file(mqtt_passwd_file, rabbitmq_definitions)
    with obj.conn() as conn:
        dev = conn.execute("SELECT state FROM devices WHERE name = %s", (name,)).fetchone()
    if dev is None:
        raise click.ClickException(f"unknown device {name!r}")
    if dev[0] == "Retired":
        raise click.ClickException(f"device {name!r} is retired")
    password = secrets.token_urlsafe(18)
    if rabbitmq_definitions:
        _set_rabbitmq_users(rabbitmq_definitions, {name: password}, obj.settings.topic_prefix)
    if mqtt_passwd_file:
        _set_mqtt_passwords(mqtt_passwd_file, {name: password})
    click.echo(f"mqtt username {name} password {password}")
    if mqtt_passwd_file:
        click.echo(_reload_broker(mqtt_passwd_file, broker_pid_file))
    if rabbitmq_definitions:
        click.echo(_RABBIT_RELOAD)


@device.command("publish-test")
@click.argument("name")
@click.option("--reading", default=None,
              help="Send this JSON reading to the readings topic instead of a health report "
                   "(it is stored like any reading: use a real one).")
@click.option("--timeout", type=float, default=15.0, show_default=True,
              help="Seconds to wait for the message to land.")
@pass_ctx
def device_publish_test(obj: _Context, name: str, reading: str | None, timeout: float) -> None:
    """Publish as device NAME and show where the message landed: the stored row, or the
    quarantine reason. The device's broker password comes from SDS_DEVICE_PASSWORD or a
    prompt. By default it sends a health report stamped now, with the firmware version the
    device last reported (health times need not be on the 5-minute grid, so no reading slot
    is taken)."""
    password = os.environ.get("SDS_DEVICE_PASSWORD") or click.prompt(
        f"MQTT password of {name}", hide_input=True)
    settings = obj.settings
    sent_at = datetime.now(UTC).replace(microsecond=0)
    with obj.conn() as conn:
        since = conn.execute("SELECT now()").fetchone()[0]  # type: ignore[index]
        known = conn.execute("SELECT reported_fw FROM devices WHERE name = %s",
                             (name,)).fetchone()
    if known is None:
        raise click.ClickException(f"unknown device {name!r}")
    if reading is None:
        # A health report needs one field: the firmware the device last reported, which
        # changes nothing (or a marker until the device reports its own).
        kind, body = "health", json.dumps({"time": sent_at.isoformat().replace("+00:00", "Z"),
                                           "fw": known[0] or "publish-test"})
    else:
        kind, body = "readings", reading
    topic = f"{settings.topic_prefix}/{name}/{kind}"
    _publish_as_device(settings, name, password, topic, body.encode())
    click.echo(f"published to {topic}: {body}")
    deadline = time.monotonic() + timeout
    while True:
        with obj.conn() as conn:
            landed = _where_it_landed(conn, name, kind, body, since)
        if landed:
            for line in landed:
                click.echo(line)
            return
        if time.monotonic() > deadline:
            raise click.ClickException(
                f"nothing stored or quarantined within {timeout:.0f} s: is the ingester "
                "running and connected (sds aggregate status, .state/logs/ingest.log)?")
        time.sleep(0.25)


def _publish_as_device(settings: Settings, name: str, password: str, topic: str,
                       body: bytes) -> None:
    """Publish once with QoS 1 as the device; ClickException when the broker refuses."""
    # The RabbitMQ cluster profile speaks MQTT 3.1.1 and lets a device start a clean session
    # only under client ids of its own (shared/rabbit.py allows this one).
    protocol = mqtt.MQTTv311 if settings.mqtt_protocol == "3.1.1" else mqtt.MQTTv5
    client = mqtt.Client(mqtt.CallbackAPIVersion.VERSION2,
                         client_id=f"{name}{rabbit.PUBLISH_TEST_SUFFIX}", protocol=protocol)
    client.username_pw_set(name, password)
    if settings.mqtt_tls_ca:
        client.tls_set(ca_certs=settings.mqtt_tls_ca)
    outcome: dict[str, Any] = {}
    connected = threading.Event()

    def on_connect(_c: Any, _u: Any, _f: Any, reason: Any, _p: Any) -> None:
        outcome["reason"] = reason
        connected.set()

    client.on_connect = on_connect
    try:
        client.connect(settings.mqtt_host, settings.mqtt_port, keepalive=30)
    except OSError as exc:
        raise click.ClickException(
            f"cannot reach the broker at {settings.mqtt_host}:{settings.mqtt_port}: {exc}"
        ) from None
    client.loop_start()
    try:
        if not connected.wait(10):
            raise click.ClickException("the broker did not answer the connection within 10 s")
        if outcome["reason"].is_failure:
            raise click.ClickException(
                f"the broker refused {name}: {outcome['reason']} (wrong password, or the "
                "device has no broker login: sds device rotate-password)")
        info = client.publish(topic, body, qos=1)
        info.wait_for_publish(10)
        if not info.is_published():
            raise click.ClickException("the broker did not acknowledge the message within 10 s")
    finally:
        client.disconnect()
        client.loop_stop()


def _where_it_landed(conn: psycopg.Connection, name: str, kind: str, body: str,
                     since: datetime) -> list[str]:
    """Lines describing the row(s) or quarantine entries the published message made."""
    lines = []
    for reason, detail in conn.execute(
            "SELECT reason, detail FROM quarantine WHERE device = %s AND received_at >= %s"
            " AND payload = %s ORDER BY id", (name, since, body.encode())):
        lines.append(f"quarantined: {reason}: {detail}")
    try:
        parsed = json.loads(body)
    except ValueError:
        parsed = None
    items = parsed if isinstance(parsed, list) else [parsed]
    times = []
    for item in items:
        if isinstance(item, dict) and isinstance(item.get("time"), str):
            try:
                times.append(parse_instant(item["time"], name="time"))
            except ServiceError:
                pass
    table = "health" if kind == "health" else "calibrated"
    if times:
        stmt = sql.SQL("SELECT time, location FROM {} WHERE device = %s AND time = ANY(%s)"
                       " ORDER BY time").format(sql.Identifier(table))
        for t, loc in conn.execute(stmt, (name, times)):
            where = "no location (not deployed at that time)"
            if loc is not None:
                found = conn.execute("SELECT name FROM locations WHERE id = %s",
                                     (loc,)).fetchone()
                where = f"location {found[0] if found else loc}"
            lines.append(f"stored: {table} row {name} {t.isoformat()} at {where}")
    return lines


@main.group()
def apikey() -> None:
    """API keys (for bootstrapping; users manage keys through the API)."""


@apikey.command("create")
@click.option("--email", required=True, help="Owner of the key.")
@click.option("--scope", "scopes", multiple=True, required=True,
              help="Scope, repeatable (e.g. data:read).")
@click.option("--name", default="")
@click.option("--exp", default=None, help="ISO 8601 expiry.")
@pass_ctx
def apikey_create(obj: _Context, email: str, scopes: tuple[str, ...], name: str,
                  exp: str | None) -> None:
    """Create an API key and print it (it is shown only this once)."""
    with obj.conn() as conn:
        try:
            expiry = parse_instant(exp, name="--exp") if exp else None
        except ServiceError as exc:
            raise click.ClickException(exc.message) from None
        rec = accounts.create_api_key(conn, user=accounts.user_id(conn, email),
                                      scopes=list(scopes), name=name, exp=expiry,
                                      sealer=_sealer(obj.settings))
    click.echo(f"apikey {rec['apikey']} id {rec['id']} scopes {','.join(rec['scopes'])}")


def _sealer(settings: Settings) -> sealing.Sealer | None:
    # Quiet: scripts read these commands' output; `sds config` shows the setting.
    try:
        return sealing.from_settings(settings, warn=False)
    except sealing.SealError as exc:
        raise click.ClickException(str(exc)) from None


@apikey.command("new-seal-key")
def apikey_new_seal_key() -> None:
    """Print a new key for SDS_APIKEY_SEAL_KEYS (rotation: put it first, then `reseal`)."""
    click.echo(sealing.new_key())


@apikey.command("reseal")
@pass_ctx
def apikey_reseal(obj: _Context) -> None:
    """Seal every retrievable API key again with the first key of SDS_APIKEY_SEAL_KEYS.

    Run after putting a new key first in the list; afterwards the older keys can be removed.
    Keys no seal key opens are reported (their owners see them masked; they still work).
    """
    sealer = _sealer(obj.settings)
    if sealer is None:
        raise click.ClickException(
            "key retrieval is off (SDS_APIKEY_RETRIEVABLE=false or no SDS_APIKEY_SEAL_KEYS)")
    done = current = lost = 0
    with obj.conn() as conn:
        rows = conn.execute(
            "SELECT id, sealed FROM api_keys WHERE sealed IS NOT NULL FOR UPDATE").fetchall()
        for key_id, sealed in rows:
            if not sealer.needs_reseal(sealed):
                current += 1
                continue
            if sealer.open(sealed) is None:
                lost += 1
                continue
            conn.execute("UPDATE api_keys SET sealed = %s WHERE id = %s",
                         (sealer.reseal(sealed), key_id))
            done += 1
    click.echo(f"resealed {done}, already under the first key {current}, "
               f"opened by no key {lost}")
    if lost:
        raise click.ClickException(
            f"{lost} sealed key(s) open with none of SDS_APIKEY_SEAL_KEYS: was a key removed "
            "before resealing? Put it back (after the first) and run reseal again")


DEMO_ORG = "Demo Farms"
DEMO_EMAIL = "demo@example.com"
# (device, location name, zone, lat, lon, elev m, kc): zones chosen to exercise DST, a
# half-hour offset and a midnight DST gap.
DEMO_SITES = (
    ("A000101", "Ames corn field", "America/Chicago", 42.03, -93.62, 300.0, 1.15),
    ("A000102", "Salinas lettuce", "America/Los_Angeles", 36.68, -121.66, 20.0, 0.95),
    ("A000103", "Nashik vineyard", "Asia/Kolkata", 20.01, 73.79, 600.0, 0.7),
    ("A000104", "Curico orchard", "America/Santiago", -34.98, -71.24, 230.0, 0.9),
    ("A000105", "Wagga wheat", "Australia/Sydney", -35.12, 147.37, 180.0, 1.05),
)


@main.command("demo")
@click.option("--credentials-out", type=click.Path(path_type=Path), default=None,
              help="Write {device: mqtt password} JSON here for `sds simulate`.")
@click.option("--mqtt-passwd-file", type=click.Path(path_type=Path), default=None,
              help="mosquitto password file to add the demo devices to.")
@click.option("--rabbitmq-definitions", type=click.Path(path_type=Path), default=None,
              help="RabbitMQ definitions file to add the demo devices to (cluster profile).")
@click.option("--days", default=30, show_default=True, help="Deployments start this many days ago.")
@pass_ctx
def demo(obj: _Context, credentials_out: Path | None, mqtt_passwd_file: Path | None,
         rabbitmq_definitions: Path | None, days: int) -> None:
    """Create a demo organisation, user, locations in several zones, devices and an API key."""
    password = secrets.token_urlsafe(12)
    start = datetime.now(UTC).replace(hour=0, minute=0, second=0, microsecond=0) - timedelta(
        days=days)
    device_passwords: dict[str, str] = {}
    with obj.conn() as conn:
        exists = conn.execute("SELECT 1 FROM organisations WHERE name = %s",
                              (DEMO_ORG,)).fetchone()
        if exists:
            raise click.ClickException(f"the demo organisation {DEMO_ORG!r} already exists")
        oid = accounts.create_org(conn, name=DEMO_ORG)
        uid = accounts.create_user(conn, org=oid, email=DEMO_EMAIL, password=password,
                                   name="Demo user", is_admin=True)
        for dev, loc_name, tz, lat, lon, elev, kc in DEMO_SITES:
            lid = accounts.create_location(conn, org=oid, loc=accounts.LocationInput(
                name=loc_name, tz_name=tz, lat=lat, lon=lon, elev=elev, kc=kc))
            accounts.register_device(conn, org=oid, name=dev, type="weather", model="SDS-1")
            accounts.deploy_device(conn, device=dev, location=lid, start=start)
            device_passwords[dev] = secrets.token_urlsafe(18)
        key = accounts.create_api_key(
            conn, user=uid, name="demo", scopes=["data:read", "devices:read", "locations:read",
                                                 "apikeys:read"], sealer=_sealer(obj.settings))
        if mqtt_passwd_file:
            _set_mqtt_passwords(mqtt_passwd_file, device_passwords)
        if rabbitmq_definitions:
            _set_rabbitmq_users(rabbitmq_definitions, device_passwords,
                                obj.settings.topic_prefix)
    if credentials_out:
        credentials_out.write_text(json.dumps(device_passwords, indent=2))
        credentials_out.chmod(0o600)
    click.echo(f"organisation: {DEMO_ORG} ({oid})")
    click.echo(f"user:         {DEMO_EMAIL}")
    click.echo(f"password:     {password}")
    click.echo(f"api key:      {key['apikey']}  (scopes {', '.join(key['scopes'])})")
    click.echo("devices:      " + ", ".join(d[0] for d in DEMO_SITES))


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
