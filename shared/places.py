"""Locations, devices and deployments: the write operations shared by the operator CLI, the demo
and the API. Functions take `conn` first and never commit. (Organisations, users and keys:
people/accounts.py.)"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime
from typing import cast
from uuid import UUID

import psycopg
from psycopg import errors as pgerr
from psycopg.types.range import Range

from shared import dirty, locations
from shared.errors import (
    BadParameter,
    Conflict,
    DuplicateName,
    OverlappingDeployment,
    UnknownDevice,
    UnknownLocation,
)
from shared.timeutil import zone


@dataclass(frozen=True, slots=True)
class LocationInput:
    """Fields of a new location."""

    name: str
    tz_name: str
    lat: float | None = None
    lon: float | None = None
    elev: float | None = None
    kc: float | None = None
    sensor_height: float = 2.0


def create_location(conn: psycopg.Connection, *, org: UUID, loc: LocationInput) -> UUID:
    """A new location; BadParameter for an unknown zone or out-of-range coordinates."""
    for field in ("name", "tz_name", "lat", "lon", "elev", "kc", "sensor_height"):
        locations.check_field(field, getattr(loc, field))  # BadParameter naming the field
    try:
        with conn.transaction():
            row = conn.execute(
                "INSERT INTO locations (org_id, name, tz_name, lat, lon, elev, kc, sensor_height,"
                " start_date) VALUES (%s, %s, %s, %s, %s, %s, %s, %s, current_date) RETURNING id",
                (org, loc.name, loc.tz_name, loc.lat, loc.lon, loc.elev, loc.kc,
                 loc.sensor_height),
            ).fetchone()
    except pgerr.UniqueViolation:
        raise DuplicateName(f"location {loc.name!r} already exists in this organisation") from None
    assert row
    return cast(UUID, row[0])


def location_id(conn: psycopg.Connection, name_or_id: str, *, org: UUID | None = None) -> UUID:
    """The id of a location given by id or by name (within `org` when given)."""
    row = conn.execute(
        "SELECT id FROM locations WHERE (id::text = %s OR name = %s)"
        " AND (%s::uuid IS NULL OR org_id = %s::uuid) ORDER BY (id::text = %s) DESC LIMIT 1",
        (name_or_id, name_or_id, org, org, name_or_id)).fetchone()
    if not row:
        raise UnknownLocation(f"unknown location {name_or_id!r}")
    return cast(UUID, row[0])


# A device's name is its broker user name and, on the shipped broker, its MQTT client id
# (use_username_as_clientid). These names belong to the ingester's broker accounts (one per
# shard: ingester, ingester-1, ...), so no device may ever have one: its password entry would
# replace the ingester's, and its session would be the ingester's.
RESERVED_DEVICE_NAMES = re.compile(r"^ingester(-[0-9]+)?$")
# The alert accounts' names (docs/alerts.md "MQTT"): the deliverer's alerts-publisher and each
# organisation's reader alerts-<organisation id>, which may read alerts/...; no device may have
# a name of this form, or it would take over such an account's password entry and grants.
RESERVED_ALERT_NAMES = re.compile(r"^alerts-")
# What a device name may be, the Python side of the devices.name CHECK constraints (0001, 0085):
# 1-64 letters, digits, '_', '.' or '-', and not dots only ('.', '..' cannot be used in a path).
DEVICE_NAME = re.compile(r"^(?!\.+$)[A-Za-z0-9_.-]{1,64}$")
DEVICE_NAME_RULE = "1-64 letters, digits, '_', '.' or '-', not dots only"


def register_device(
    conn: psycopg.Connection, *, org: UUID, name: str, type: str | None = None,
    model: str | None = None,
) -> UUID:
    """A new device in state New; DuplicateName when the name is taken, BadParameter when it is
    reserved for the ingester's broker accounts."""
    if RESERVED_DEVICE_NAMES.match(name):
        raise BadParameter(f"device name {name!r} is reserved for the ingester's broker account")
    if RESERVED_ALERT_NAMES.match(name):
        raise BadParameter(f"device name {name!r}: names starting alerts- are reserved for the "
                           "alert accounts of the broker")
    if not DEVICE_NAME.match(name):
        raise BadParameter(f"device name {name!r}: {DEVICE_NAME_RULE}")
    try:
        with conn.transaction():
            row = conn.execute(
                "INSERT INTO devices (org_id, name, type, model) VALUES (%s, %s, %s, %s)"
                " RETURNING id", (org, name, type, model)).fetchone()
    except pgerr.CheckViolation:
        raise BadParameter(
            f"device name {name!r}: {DEVICE_NAME_RULE}") from None
    except pgerr.UniqueViolation:
        raise DuplicateName(f"device {name!r} is already registered") from None
    assert row
    return cast(UUID, row[0])


def deploy_device(
    conn: psycopg.Connection, *, device: str, location: UUID, start: datetime,
    end: datetime | None = None,
) -> int:
    """Place `device` at `location` from `start` (until `end`, or open-ended); the new
    deployment's id (the rules are move_device's)."""
    return move_device(conn, device=device, location=location, start=start, end=end).deployment


@dataclass(frozen=True)
class Move:
    """A new deployment and the number of rollup buckets its relabelled readings marked."""

    deployment: int
    marked: int


def move_device(
    conn: psycopg.Connection, *, device: str, location: UUID, start: datetime,
    end: datetime | None = None,
) -> Move:
    """Place `device` at `location` from `start` (until `end`, or open-ended).

    A device's current open-ended deployment that began before `start` is closed at `start`
    (the device moved). Any other overlap raises OverlappingDeployment and changes nothing.
    Readings already stored in the new range are relabelled with the location and their
    rollup buckets marked dirty, so rollups follow the move; readings of the range already in
    the cold tier are queued for the scheduler to relabel (aggregate/coldrelabel.py).
    """
    if start.tzinfo is None:
        raise BadParameter("start: must include a UTC offset")
    if end is not None and end <= start:
        raise BadParameter("end: must be after start")
    dev = conn.execute("SELECT id FROM devices WHERE name = %s", (device,)).fetchone()
    if not dev:
        raise UnknownDevice(f"unknown device {device!r}")
    tz_row = conn.execute("SELECT tz_name FROM locations WHERE id = %s", (location,)).fetchone()
    if not tz_row:
        raise UnknownLocation(f"unknown location {location}")
    try:
        with conn.transaction():
            conn.execute(
                "UPDATE deployments SET during = tstzrange(lower(during), %s, '[)')"
                " WHERE device_id = %s AND upper_inf(during) AND lower(during) < %s",
                (start, dev[0], start))
            row = conn.execute(
                "INSERT INTO deployments (device_id, location_id, during)"
                " VALUES (%s, %s, %s) RETURNING id",
                (dev[0], location, Range(start, end, "[)"))).fetchone()
            # FOR UPDATE conflicts with the FOR KEY SHARE an ingest batch holds on the row
            # (ingest/writer.py): the relabelling below waits for such a batch and sees its
            # rows, and a batch that starts later waits for this one and sees the deployment.
            conn.execute("SELECT 1 FROM devices WHERE id = %s FOR UPDATE", (dev[0],))
            conn.execute(
                "UPDATE devices SET last_deploy = greatest(last_deploy, %s) WHERE id = %s",
                (start, dev[0]))
            moved = conn.execute(
                "UPDATE calibrated SET location = %s WHERE device = %s AND time >= %s"
                " AND (%s::timestamptz IS NULL OR time < %s) AND location IS DISTINCT FROM %s"
                " RETURNING time",
                (location, device, start, end, end, location)).fetchall()
            conn.execute(
                "UPDATE health SET location = %s WHERE device = %s AND time >= %s"
                " AND (%s::timestamptz IS NULL OR time < %s)",
                (location, device, start, end, end))
            marked = dirty.write_marks(conn, dirty.bucket_marks(
                device, (r[0] for r in moved), zone(tz_row[0]))) if moved else 0
            # Readings already in the cold tier are relabelled by the scheduler, which rewrites
            # their files (aggregate/coldrelabel.py) and marks their rollups then.
            conn.execute(
                "INSERT INTO cold_relabels (device, location, lo, hi) SELECT %s, %s, %s, %s"
                " WHERE EXISTS (SELECT 1 FROM cold_files f JOIN devices d ON d.org_id = f.org_id"
                " WHERE d.name = %s AND f.state IN ('verified', 'live') AND f.last_time >= %s"
                " AND (%s::timestamptz IS NULL OR f.first_time < %s))",
                (device, location, start, end, device, start, end, end))
    except pgerr.ExclusionViolation:
        raise OverlappingDeployment(
            f"device {device!r} is already deployed during that time; end or move the other "
            "deployment first") from None
    assert row
    return Move(deployment=cast(int, row[0]), marked=marked)




def add_device(
    conn: psycopg.Connection, *, org: UUID, name: str, location: UUID, start: datetime,
    type: str | None = None, model: str | None = None,
) -> tuple[UUID, int]:
    """Register `name` in `org` and deploy it at `location` (of the same organisation) from
    `start`, in one transaction: (device id, deployment id). Nothing is left when either
    step is refused (`sds device add` and `POST /api/v2/devices`)."""
    with conn.transaction():
        did = register_device(conn, org=org, name=name, type=type, model=model)
        found = conn.execute("SELECT 1 FROM locations WHERE id = %s AND org_id = %s",
                             (location, org)).fetchone()
        if found is None:
            raise UnknownLocation(f"unknown location {location}")
        return did, deploy_device(conn, device=name, location=location, start=start)


def retire_device(conn: psycopg.Connection, *, name: str, at: datetime,
                  org: UUID | None = None) -> tuple[UUID, bool]:
    """State Retired and the open deployment ended at `at`; (device id, whether a deployment
    was ended). UnknownDevice, Conflict when already retired, BadParameter when `at` is not
    after the start of a deployment (`sds device retire`, `POST .../devices/{name}/retire`)."""
    dev = conn.execute("SELECT id, state FROM devices WHERE name = %s"
                       " AND (%s::uuid IS NULL OR org_id = %s::uuid)",
                       (name, org, org)).fetchone()
    if dev is None:
        raise UnknownDevice(f"unknown device {name!r}")
    if dev[1] == "Retired":
        raise Conflict(f"device {name!r} is already retired")
    later = conn.execute(
        "SELECT lower(during) FROM deployments WHERE device_id = %s AND lower(during) >= %s",
        (dev[0], at)).fetchone()
    if later:
        raise BadParameter(
            f"at: {at.isoformat()} is not after the start of a deployment "
            f"({later[0].isoformat()}); choose a later instant", errors={"at": ["too early"]})
    ended = conn.execute(
        "UPDATE deployments SET during = tstzrange(lower(during), %s, '[)')"
        " WHERE device_id = %s AND (upper_inf(during) OR upper(during) > %s)",
        (at, dev[0], at)).rowcount
    conn.execute("UPDATE devices SET state = 'Retired' WHERE id = %s", (dev[0],))
    return cast(UUID, dev[0]), bool(ended)
