"""`sds demo`: a demo organisation, user, locations in several zones (each with soil, roots and a
crop for the root-zone water balance), devices, an API key and a frost alert rule."""

from __future__ import annotations

import json
import secrets
from datetime import UTC, datetime, timedelta
from pathlib import Path

import click

from admin import demohistory
from admin.brokeraccounts import set_mqtt_passwords, set_rabbitmq_users
from admin.context import Context, pass_ctx
from admin.people import sealer
from people import accounts
from shared import alertrules, alertstore, irrigation, places

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

# The root-zone water balance of each site (docs/waterbalance.md): FAO-56 Table 19 soil class,
# root depth (m) and Table 22 crop (its p).
DEMO_WATER = {
    "A000101": ("silt loam", 1.0, "maize"),
    "A000102": ("sandy loam", 0.3, "lettuce"),
    "A000103": ("clay", 1.0, "wine grape"),
    "A000104": ("loam", 1.2, "apple"),
    "A000105": ("clay", 1.2, "wheat"),
}

# One alert rule (docs/alerts.md), so a newcomer sees events: frost at any demo site. The
# simulated nights dip below 0 C at the mid-latitude sites in their winter (Ames from November,
# Wagga and Curico from May), and the simulator's last day is evaluated at start.
DEMO_RULE = {"name": "Frost", "table": "calibrated", "column": "tair",
             "scope": {"organisation": True}, "condition": {"op": "<", "threshold": 0},
             "for": 900, "clear": {"op": ">=", "threshold": 1}, "units": {"temp": "c"}}


@click.command("demo")
@click.option("--credentials-out", type=click.Path(path_type=Path), default=None,
              help="Write {device: mqtt password} JSON here for `sds simulate`.")
@click.option("--mqtt-passwd-file", type=click.Path(path_type=Path), default=None,
              help="mosquitto password file to add the demo devices to.")
@click.option("--rabbitmq-definitions", type=click.Path(path_type=Path), default=None,
              help="RabbitMQ definitions file to add the demo devices to (cluster profile).")
@click.option("--days", default=30, show_default=True, help="Deployments start this many days ago.")
@click.option("--history-days", default=0, show_default=True, type=click.IntRange(min=0),
              help="Write this many days of 5-minute readings up to --history-until days ago "
                   "(and their rollups), deployed from then (deploy/run.sh: 500).")
@click.option("--history-until", default=3, show_default=True, type=click.IntRange(min=0),
              help="Days before today where the written history ends (the simulator's "
                   "backfill covers the rest).")
@pass_ctx
def demo(obj: Context, credentials_out: Path | None, mqtt_passwd_file: Path | None,
         rabbitmq_definitions: Path | None, days: int, history_days: int,
         history_until: int) -> None:
    """Create a demo organisation, user, locations in several zones, devices and an API key."""
    password = secrets.token_urlsafe(12)
    today = datetime.now(UTC).replace(hour=0, minute=0, second=0, microsecond=0)
    start = today - timedelta(days=max(days, history_days))
    history: list[tuple[str, object, float, float, float]] = []
    device_passwords: dict[str, str] = {}
    with obj.conn() as conn:
        exists = conn.execute("SELECT 1 FROM organisations WHERE name = %s",
                              (DEMO_ORG,)).fetchone()
        if exists:
            raise click.ClickException(f"the demo organisation {DEMO_ORG!r} already exists")
        oid = accounts.create_org(conn, name=DEMO_ORG)
        uid = accounts.create_user(conn, org=oid, email=DEMO_EMAIL, password=password,
                                   name="Demo user", role="owner")
        for dev, loc_name, tz, lat, lon, elev, kc in DEMO_SITES:
            lid = places.create_location(conn, org=oid, loc=places.LocationInput(
                name=loc_name, tz_name=tz, lat=lat, lon=lon, elev=elev, kc=kc))
            places.register_device(conn, org=oid, name=dev, type="weather", model="SDS-1")
            places.deploy_device(conn, device=dev, location=lid, start=start)
            history.append((dev, lid, lat, lon, elev))
            soil, roots, crop = DEMO_WATER[dev]
            irrigation.put_settings(conn, lid, {"soil": soil, "root_depth": roots,
                                                "crop": crop})
            device_passwords[dev] = secrets.token_urlsafe(18)
        alertstore.create(conn, oid, alertrules.parse(DEMO_RULE))
        key = accounts.create_api_key(
            conn, user=uid, name="demo", scopes=["data:read", "devices:read", "locations:read",
                                                 "apikeys:read", "notifications:read"],
            sealer=sealer(obj.settings))
        if mqtt_passwd_file:
            set_mqtt_passwords(mqtt_passwd_file, device_passwords)
        if rabbitmq_definitions:
            set_rabbitmq_users(rabbitmq_definitions, device_passwords,
                                obj.settings.topic_prefix)
    if history_days > history_until:
        with obj.conn() as conn:
            n = demohistory.seed(conn, history, start, today - timedelta(days=history_until),
                                 low_quality_pct=obj.settings.low_quality_pct,
                                 cold_path=obj.settings.cold_path)
        click.echo(f"history:      {n} readings from {start:%Y-%m-%d}, rolled up")
    if credentials_out:
        credentials_out.write_text(json.dumps(device_passwords, indent=2))
        credentials_out.chmod(0o600)
    click.echo(f"organisation: {DEMO_ORG} ({oid})")
    click.echo(f"user:         {DEMO_EMAIL}")
    click.echo(f"password:     {password}")
    click.echo(f"api key:      {key['apikey']}  (scopes {', '.join(key['scopes'])})")
    click.echo("devices:      " + ", ".join(d[0] for d in DEMO_SITES))
