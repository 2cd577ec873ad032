"""The operator CLI, `sds`: database migrations, organisations, users, locations, devices,
deployments, API keys and the demo. `ingest` and `aggregate` add their own command groups
(`simulate`, `aggregate`) through the `sds.commands` entry point, so this module imports
neither."""

from __future__ import annotations

import json
import os
import secrets
import shutil
import subprocess  # nosec B404  runs mosquitto_passwd only
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from importlib.metadata import entry_points
from pathlib import Path

import click
import psycopg

from shared import accounts, config, migrate
from shared.config import Settings
from shared.errors import ServiceError
from shared.logs import configure_logging
from shared.timeutil import parse_instant


class _Context:
    def __init__(self) -> None:
        try:
            self.settings = Settings.from_env(os.environ)
        except ValueError as exc:
            raise click.ClickException(f"bad configuration: {exc}") from None

    @contextmanager
    def conn(self) -> Iterator[psycopg.Connection]:
        """A connection whose work is committed on success, rolled back on error."""
        try:
            conn = psycopg.connect(self.settings.database_url)
        except psycopg.OperationalError as exc:
            raise click.ClickException(
                f"cannot connect to the database (SDS_DATABASE_URL): {exc}".strip()) from None
        try:
            with conn:
                yield conn
        except ServiceError as exc:
            raise click.ClickException(exc.message) from None
        finally:
            conn.close()


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


@device.command("register")
@click.argument("name")
@click.option("--org", "org_name", required=True, help="Organisation name or id.")
@click.option("--type", "dev_type", default=None)
@click.option("--model", default=None)
@click.option("--mqtt-passwd-file", type=click.Path(path_type=Path), default=None,
              help="Also give the device a broker password in this mosquitto password file.")
@pass_ctx
def device_register(obj: _Context, name: str, org_name: str, dev_type: str | None,
                    model: str | None, mqtt_passwd_file: Path | None) -> None:
    """Register device NAME (state New until its first reading)."""
    with obj.conn() as conn:
        did = accounts.register_device(conn, org=accounts.org_id(conn, org_name), name=name,
                                       type=dev_type, model=model)
        if mqtt_passwd_file:
            password = secrets.token_urlsafe(18)
            _set_mqtt_passwords(mqtt_passwd_file, {name: password})
    click.echo(f"device {name} id {did}")
    if mqtt_passwd_file:
        click.echo(f"mqtt username {name} password {password} (reload the broker: SIGHUP)")


@device.command("deploy")
@click.argument("name")
@click.option("--location", "loc", required=True, help="Location id or name.")
@click.option("--from", "start", default=None, help="ISO 8601 start (default now).")
@click.option("--to", "end", default=None, help="ISO 8601 end (default open-ended).")
@pass_ctx
def device_deploy(obj: _Context, name: str, loc: str, start: str | None, end: str | None) -> None:
    """Deploy device NAME at a location from a time (ends its current deployment there)."""
    with obj.conn() as conn:
        try:
            t0 = parse_instant(start, name="--from") if start else datetime.now(UTC)
            t1 = parse_instant(end, name="--to") if end else None
        except ServiceError as exc:
            raise click.ClickException(exc.message) from None
        dep = accounts.deploy_device(conn, device=name, location=accounts.location_id(conn, loc),
                                     start=t0, end=t1)
    click.echo(f"deployment {dep}: {name} at {loc} from {t0.isoformat()}"
               + (f" to {t1.isoformat()}" if t1 else ""))


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
                                      scopes=list(scopes), name=name, exp=expiry)
    click.echo(f"apikey {rec['apikey']} id {rec['id']} scopes {','.join(rec['scopes'])}")


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
@click.option("--days", default=30, show_default=True, help="Deployments start this many days ago.")
@pass_ctx
def demo(obj: _Context, credentials_out: Path | None, mqtt_passwd_file: Path | None,
         days: int) -> None:
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
                                                 "apikeys:read"])
        if mqtt_passwd_file:
            _set_mqtt_passwords(mqtt_passwd_file, device_passwords)
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
