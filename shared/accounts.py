"""Organisations, users, locations, devices and deployments: the write operations shared by
the operator CLI, the demo and the API. Functions take `conn` first and never commit."""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, cast
from uuid import UUID, uuid4

import psycopg
from psycopg import errors as pgerr
from psycopg.rows import dict_row
from psycopg.types.range import Range

from shared import credentials, dirty, locations
from shared.errors import (
    BadParameter,
    Conflict,
    DuplicateName,
    OverlappingDeployment,
    UnknownDevice,
    UnknownLocation,
    UnknownObject,
)
from shared.timeutil import zone

if TYPE_CHECKING:
    from shared.sealing import Sealer


def create_org(conn: psycopg.Connection, *, name: str) -> UUID:
    """A new organisation; DuplicateName when the name is taken."""
    try:
        with conn.transaction():
            row = conn.execute(
                "INSERT INTO organisations (name) VALUES (%s) RETURNING id", (name,)).fetchone()
    except pgerr.UniqueViolation:
        raise DuplicateName(f"organisation {name!r} already exists") from None
    assert row
    return cast(UUID, row[0])


def org_id(conn: psycopg.Connection, name_or_id: str) -> UUID:
    """The id of the organisation named (or identified by) `name_or_id`."""
    row = conn.execute(
        "SELECT id FROM organisations WHERE name = %s OR id::text = %s",
        (name_or_id, name_or_id)).fetchone()
    if not row:
        raise UnknownObject(f"unknown organisation {name_or_id!r}")
    return cast(UUID, row[0])


def create_user(
    conn: psycopg.Connection, *, org: UUID, email: str, password: str, name: str | None = None,
    role: str = "member", email_proven: bool = True,
) -> UUID:
    """A new user with an argon2id password hash, a member of `org` (their home organisation)
    with `role`; DuplicateName for a taken email (any case). `email_proven`: whether the email
    is proven (users.email_verified_at, migration 0165): the operator's accounts are vouched
    for; an account made from an invitation link shown to its inviter is not."""
    problem = credentials.password_problem(password)
    if problem:
        raise BadParameter(problem)
    if "@" not in email:
        raise BadParameter(f"email: {email!r} is not an email address")
    if role not in credentials.ROLES:
        raise BadParameter(f"role: one of {', '.join(credentials.ROLES)}")
    # The id is made here, not RETURNING'd: under the API role (an accepted invitation,
    # serve/links.py) the new row is not visible until its membership exists, and RETURNING
    # would have to read it.
    user = uuid4()
    try:
        with conn.transaction():
            conn.execute(
                "INSERT INTO users (id, org_id, email, name, password_hash, email_verified_at)"
                " VALUES (%s, %s, %s, %s, %s, CASE WHEN %s THEN now() END)",
                (user, org, email.strip(), name, credentials.hash_password(password),
                 email_proven))
            conn.execute("INSERT INTO memberships (user_id, org_id, role) VALUES (%s, %s, %s)",
                         (user, org, role))
    except pgerr.UniqueViolation:
        raise DuplicateName(f"a user with email {email!r} already exists") from None
    return user


def add_membership(conn: psycopg.Connection, *, user: UUID, org: UUID, role: str,
                   teams_only: bool = False) -> None:
    """Make an existing user a member of `org` with `role` (reactivating an account whose
    last membership had ended); Conflict when they are a member already."""
    if role not in credentials.ROLES:
        raise BadParameter(f"role: one of {', '.join(credentials.ROLES)}")
    if teams_only and role not in ("member", "viewer"):
        raise BadParameter("teams_only: only for the roles member and viewer")
    try:
        with conn.transaction():
            conn.execute("INSERT INTO memberships (user_id, org_id, role, teams_only)"
                         " VALUES (%s, %s, %s, %s)", (user, org, role, teams_only))
            # A user whose memberships had all ended was deactivated (migration 0150); the new
            # one brings them back, homed in it.
            conn.execute("UPDATE users SET active = true, org_id = %s WHERE id = %s"
                         " AND NOT active", (org, user))
    except pgerr.UniqueViolation:
        raise Conflict("that user is a member of the organisation already") from None


def user_id(conn: psycopg.Connection, email: str) -> UUID:
    """The id of the user with `email` (case-insensitive)."""
    row = conn.execute(
        "SELECT id FROM users WHERE lower(email) = lower(%s)", (email,)).fetchone()
    if not row:
        raise UnknownObject(f"unknown user {email!r}")
    return cast(UUID, row[0])


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
    rollup buckets marked dirty, so rollups follow the move.
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
    except pgerr.ExclusionViolation:
        raise OverlappingDeployment(
            f"device {device!r} is already deployed during that time; end or move the other "
            "deployment first") from None
    assert row
    return Move(deployment=cast(int, row[0]), marked=marked)


def create_api_key(
    conn: psycopg.Connection, *, user: UUID, scopes: list[str], name: str = "",
    exp: datetime | None = None, active: bool = True, sealer: Sealer | None = None,
    org: UUID | None = None,
) -> dict[str, Any]:
    """A new API key for `user`, acting in `org` (None: their home organisation); the
    returned record holds the key value. With a `sealer`
    its sealed copy is stored too, so the owner can read it again (shared.sealing); without,
    the value is shown this once."""
    unknown = sorted(set(scopes) - set(credentials.SCOPES))
    if not scopes:
        raise BadParameter("scopes: at least one scope is required")
    if unknown:
        raise BadParameter(f"scopes: unknown scope(s) {', '.join(unknown)}; valid: "
                           + ", ".join(credentials.SCOPES))
    if exp is not None and exp <= datetime.now(UTC):
        raise BadParameter("exp: must be in the future")
    secret = credentials.new_api_key()
    with conn.cursor(row_factory=dict_row) as cur:
        cur.execute(
            "INSERT INTO api_keys (user_id, org_id, name, prefix, last4, digest, sealed, scopes,"
            " exp, active, created_by) SELECT u.id, coalesce(%s, u.org_id), %s, %s, %s, %s, %s,"
            " %s, %s, %s, u.id FROM users u WHERE u.id = %s"
            " RETURNING id, name, scopes, exp, active, created, updated, created_by, last_seen",
            (org, name, secret.prefix, secret.last4, secret.digest,
             sealer.seal(secret.value) if sealer is not None else None, sorted(set(scopes)),
             exp, active, user))
        record = cur.fetchone()
    if record is None:
        raise UnknownObject(f"unknown user {user}")
    record["apikey"] = secret.value
    return record
