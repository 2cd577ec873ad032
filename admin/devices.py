"""`sds device ...`: devices and their life cycle (register, deploy, add, list, show, retire,
password rotation) and the test publish (admin/publish.py)."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import click

from admin import rabbit, recovery
from admin.brokeraccounts import (
    PID_HELP,
    RABBIT_RELOAD,
    broker_account_options,
    end_mqtt_session,
    has_mqtt_user,
    one_account_file,
    reload_broker,
    remove_mqtt_user,
    set_mqtt_passwords,
    set_rabbitmq_users,
)
from admin.context import Context, audit_operator, pass_ctx
from admin.publish import publish_test
from people import accounts
from shared import places
from shared.brokeraccounts import new_password
from shared.errors import ServiceError
from shared.timeutil import parse_instant


@click.group("device")
def device() -> None:
    """Devices and deployments."""



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
def device_register(obj: Context, name: str, org_name: str, dev_type: str | None,
                    model: str | None, mqtt_passwd_file: Path | None,
                    rabbitmq_definitions: Path | None) -> None:
    """Register device NAME (state New until its first reading)."""
    password = new_password()
    with obj.conn() as conn:
        did = places.register_device(conn, org=accounts.org_id(conn, org_name), name=name,
                                       type=dev_type, model=model)
        audit_operator(conn, of="devices", row=did, action="device.register",
                       target_type="device", details={"name": name, "type": dev_type,
                                                      "model": model})
        if mqtt_passwd_file:
            set_mqtt_passwords(mqtt_passwd_file, {name: password})
        if rabbitmq_definitions:
            set_rabbitmq_users(rabbitmq_definitions, {name: password},
                                obj.settings.topic_prefix)
    click.echo(f"device {name} id {did}")
    if mqtt_passwd_file or rabbitmq_definitions:
        click.echo(f"mqtt username {name} password {password} "
                   "(reload the broker: deploy/services.sh reload-broker)")
        recovery.remember(obj.settings)


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
def device_deploy(obj: Context, name: str, loc: str, start: str, end: str | None) -> None:
    """Deploy device NAME at a location from a time (ends its current deployment there)."""
    t0 = _instant_or_now(start, "--from")
    t1 = _instant_or_now(end, "--to") if end else None
    with obj.conn() as conn:
        location = places.location_id(conn, loc)
        dep = places.deploy_device(conn, device=name, location=location, start=t0, end=t1)
        audit_operator(conn, of="locations", row=location, action="device.deploy",
                       target_type="device", target_id=name,
                       details={"deployment": dep, "location": location, "from": t0,
                                "to": t1})
    click.echo(f"deployment {dep}: {name} at {loc} from {t0.isoformat()}"
               + (f" to {t1.isoformat()}" if t1 else ""))




@device.command("add")
@click.argument("name")
@click.option("--org", "org_name", required=True, help="Organisation name or id.")
@click.option("--location", "loc", required=True, help="Location id or name.")
@click.option("--from", "start", required=True, help=_FROM_HELP)
@click.option("--type", "dev_type", default=None)
@click.option("--model", default=None)
@broker_account_options
@pass_ctx
def device_add(obj: Context, name: str, org_name: str, loc: str, start: str,
               dev_type: str | None, model: str | None, mqtt_passwd_file: Path | None,
               rabbitmq_definitions: Path | None, broker_pid_file: Path | None) -> None:
    """Add device NAME in one step: register it, deploy it at a location, give it a broker
    password and reload the broker. Prints the password (shown only this once)."""
    one_account_file(mqtt_passwd_file, rabbitmq_definitions)
    t0 = _instant_or_now(start, "--from")
    password = new_password()
    with obj.conn() as conn:
        org_id = accounts.org_id(conn, org_name)
        location = places.location_id(conn, loc, org=org_id)
        did, dep = places.add_device(conn, org=org_id, name=name, location=location, start=t0,
                                     type=dev_type, model=model)
        audit_operator(conn, of="devices", row=did, action="device.add", target_type="device",
                       details={"name": name, "type": dev_type, "model": model,
                                "deployment": dep, "location": location, "from": t0})
        # Last inside the transaction: a refused deployment leaves no password behind, and
        # a failing password file leaves no device.
        if rabbitmq_definitions:
            set_rabbitmq_users(rabbitmq_definitions, {name: password},
                                obj.settings.topic_prefix)
        if mqtt_passwd_file:
            set_mqtt_passwords(mqtt_passwd_file, {name: password})
    click.echo(f"device {name} id {did}, deployment {dep} at {loc} from {t0.isoformat()}")
    click.echo(f"mqtt username {name} password {password}")
    recovery.remember(obj.settings)
    if mqtt_passwd_file:
        click.echo(reload_broker(mqtt_passwd_file, broker_pid_file))
    if rabbitmq_definitions:
        click.echo(RABBIT_RELOAD)
    click.echo(f"the device publishes to {obj.settings.topic_prefix}/{name}/readings; check "
               f"with: sds device publish-test {name}")


@device.command("list")
@click.option("--org", "org_name", default=None, help="Only this organisation (name or id).")
@click.option("--state", type=click.Choice(["New", "Active", "Inactive", "Retired"]),
              default=None)
@pass_ctx
def device_list(obj: Context, org_name: str | None, state: str | None) -> None:
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
def device_show(obj: Context, name: str) -> None:
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
              help=PID_HELP)
@pass_ctx
def device_retire(obj: Context, name: str, at: str, mqtt_passwd_file: Path | None,
                  rabbitmq_definitions: Path | None, broker_pid_file: Path | None) -> None:
    """Retire device NAME: state Retired, its open deployment ended at --at, and (with
    --mqtt-passwd-file) its broker login removed. Its data stays."""
    t_end = _instant_or_now(at, "--at")
    with obj.conn() as conn:
        did, ended = places.retire_device(conn, name=name, at=t_end)
        audit_operator(conn, of="devices", row=did, action="device.retire",
                       target_type="device", details={"name": name, "at": t_end,
                                                      "deployment_ended": ended})
        # A throwaway password first: the session is ended with it, then the login removed.
        throwaway = new_password()
        removed = mqtt_passwd_file is not None and has_mqtt_user(mqtt_passwd_file, name)
        if mqtt_passwd_file is not None and removed:
            set_mqtt_passwords(mqtt_passwd_file, {name: throwaway})
        removed_rabbit = False
        if rabbitmq_definitions and rabbitmq_definitions.exists():
            defs = rabbit.load(rabbitmq_definitions)
            removed_rabbit = rabbit.remove_user(defs, name)
            rabbit.save(rabbitmq_definitions, defs)
    click.echo(f"device {name} retired at {t_end.isoformat()}"
               + (", its deployment ended" if ended else ", it had no deployment to end"))
    if mqtt_passwd_file:
        if removed:
            try:
                end_mqtt_session(obj.settings, name, throwaway, mqtt_passwd_file,
                                 broker_pid_file)
            finally:  # the login goes even when the session could not be ended
                remove_mqtt_user(mqtt_passwd_file, name)
                click.echo("broker password removed; " + reload_broker(mqtt_passwd_file,
                                                                        broker_pid_file))
        else:
            click.echo(f"no broker password for {name} in {mqtt_passwd_file}")
    if rabbitmq_definitions:
        click.echo(f"broker account removed; {RABBIT_RELOAD}" if removed_rabbit
                   else f"no broker account for {name} in {rabbitmq_definitions}")
    recovery.remember(obj.settings)


@device.command("rotate-password")
@click.argument("name")
@broker_account_options
@pass_ctx
def device_rotate_password(obj: Context, name: str, mqtt_passwd_file: Path | None,
                           rabbitmq_definitions: Path | None,
                           broker_pid_file: Path | None) -> None:
    """Give device NAME a new broker password (the old one stops working at the reload) and
    end its broker session, online or offline, with whatever it subscribed to."""
    one_account_file(mqtt_passwd_file, rabbitmq_definitions)
    with obj.conn() as conn:
        dev = conn.execute("SELECT state, id FROM devices WHERE name = %s", (name,)).fetchone()
        if dev is None:
            raise click.ClickException(f"unknown device {name!r}")
        if dev[0] == "Retired":
            raise click.ClickException(f"device {name!r} is retired")
        password = new_password()
        # Inside the transaction: a failing password file leaves no entry (the password is
        # never in it).
        if rabbitmq_definitions:
            set_rabbitmq_users(rabbitmq_definitions, {name: password},
                               obj.settings.topic_prefix)
        if mqtt_passwd_file:
            set_mqtt_passwords(mqtt_passwd_file, {name: password})
        audit_operator(conn, of="devices", row=dev[1], action="device.rotate_password",
                       target_type="device", details={"name": name})
    click.echo(f"mqtt username {name} password {password}")
    recovery.remember(obj.settings)
    if mqtt_passwd_file:
        end_mqtt_session(obj.settings, name, password, mqtt_passwd_file, broker_pid_file)
    if rabbitmq_definitions:
        click.echo(RABBIT_RELOAD)


device.add_command(publish_test)
