"""Read SQL of the API: tenant-checked lookups and the keyset page statements of `/data`.

A page is read in keyset order (time, device), ascending or descending, never with OFFSET over
the listing, so a page costs the same whatever the history or page number: device queries walk
the primary key (device, time), location queries the index (location, time, device). Values are
converted and rounded in SQL with the factors of `shared.units`, so Python only serialises:
a stored `real` is read as `col::text::float8`, its shortest float32 text (PostgreSQL >= 12),
so 21.3 stays 21.3 rather than 21.299999237060547; a converted value is rounded to the decimals
the registry declares for that column and unit. Functions take `conn` first and never commit.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import date, datetime, timedelta, tzinfo
from functools import lru_cache
from typing import Any
from uuid import UUID
from zoneinfo import ZoneInfo

import psycopg
from psycopg import sql

from serve.cursor import Position
from shared import coldfiles, spreadsheet, units
from shared.columns import TABLES as TABLES_BY_NAME
from shared.columns import TS, Column, Table
from shared.errors import UnknownDevice, UnknownLocation
from shared.units import Unit

# Local midnight lies within 14 h before and 12 h after UTC midnight; a day of margin covers it.
_LOCAL_DAY_MARGIN = timedelta(days=1)


@dataclass(frozen=True, slots=True)
class Scan:
    """One page of one `/data` listing, resolved to UTC instants. `device` is the name as sent:
    every statement carries its tenant check; `location` is the caller's, already looked up."""

    table: Table
    columns: tuple[Column, ...]  # output columns, in request order
    units: Mapping[str, Unit]  # unit parameter -> unit in effect
    org: UUID
    device: str | None
    location: UUID | None
    start: datetime  # inclusive window of the listing
    end: datetime
    start_day: date | None = None  # daily: local-date bounds from date-only parameters
    end_day: date | None = None
    after: Position | None = None  # first row of this page (inclusive), from the cursor
    descending: bool = False
    limit: int = 1000
    csv: bool = False  # values formatted as CSV text in SQL (for COPY)
    # Location listings: restrict to these devices (the caller's), set only when a device of
    # another organisation was ever deployed at the location (see find_location).
    only_devices: tuple[str, ...] | None = None
    # Several devices (device=A,B): their names, each already checked to be the caller's by
    # find_devices; `device` is then None.
    devices: tuple[str, ...] | None = None
    # updated_since: rows with updated_since <= update_time < updated_before (the listing's
    # watermark, see sync_watermark).
    updated_since: datetime | None = None
    updated_before: datetime | None = None
    # calibrated: the page's rows from the cold tier (serve.coldread), read with the table's.
    cold: ColdRows | None = None
    # calibrated, read in autocommit: the statement itself checks that no readable cold file
    # of the organisation overlaps the window, so its rows are the whole listing (an empty
    # answer may mean a file is there: serve.api.data then reads the page in a snapshot).
    guard: bool = False


@dataclass(frozen=True, slots=True)
class ColdRows:
    """A page's rows from the cold tier, as SQL array parameters, and the files read."""

    files: tuple[int, ...]
    arrays: dict[str, str]  # column name -> its values joined by ',' (serve.coldread)
    first: datetime | None = None  # the span and devices of the rows
    last: datetime | None = None
    devices: tuple[str, ...] = ()
    # The whole page (its rows and the next page's first, as an Arrow table) when no hot row
    # lies in its span: serve.coldpage writes it without PostgreSQL; `arrays` is then empty.
    page: Any = None


def find_device(conn: psycopg.Connection, *, org: UUID, name: str) -> str:
    """The device called `name` in organisation `org`; UnknownDevice otherwise (any org)."""
    row = conn.execute(
        "SELECT name FROM devices WHERE name = %s AND org_id = %s", (name, org)).fetchone()
    if row is None:
        raise UnknownDevice(f"unknown device {name!r}", errors={"device": ["unknown device"]})
    return str(row[0])


def find_devices(conn: psycopg.Connection, *, org: UUID, names: tuple[str, ...]) -> None:
    """UnknownDevice for the first of `names` (in request order) that is not a device of
    `org`: the same 404 as for one device."""
    found = {r[0] for r in conn.execute(
        "SELECT name FROM devices WHERE org_id = %s AND name = ANY(%s)", (org, list(names)))}
    for name in names:
        if name not in found:
            raise UnknownDevice(f"unknown device {name!r}", errors={"device": ["unknown device"]})


def sync_watermark(conn: psycopg.Connection) -> datetime:
    """The instant before which every row's update_time is final for readers: no transaction
    that could still commit such a row is running (migration 0080). Must run in its own
    statement before the snapshot that reads the rows."""
    row = conn.execute("SELECT sds_sync_watermark()").fetchone()
    assert row is not None
    return row[0]


def find_location(conn: psycopg.Connection, *, org: UUID, ref: str) -> tuple[UUID, bool]:
    """The location of `org` with id `ref` (or, failing that, named `ref`), and whether a
    device of another organisation was ever deployed there; UnknownLocation otherwise.

    That second answer is normally false (deployments pair a location with its own
    organisation's devices); asking it here, in the same query, keeps location scans plain
    ordered index scans in the normal case and still never shows another tenant's rows.
    """
    try:
        as_id: UUID | None = uuid.UUID(ref)
    except ValueError:
        as_id = None
    row = None
    if as_id is not None:
        row = conn.execute(_LOCATION.format(sql.SQL("l.id = %s")), (org, as_id)).fetchone()
    if row is None:
        row = conn.execute(_LOCATION.format(sql.SQL("l.name = %s")), (org, ref)).fetchone()
    if row is None:
        raise UnknownLocation(f"unknown location {ref!r}",
                              errors={"location": ["unknown location"]})
    return UUID(str(row[0])), bool(row[1])


# The foreign-device check must see other organisations' deployments, which row-level
# security hides from the API role: migration 0050's narrow SECURITY DEFINER function answers it.
_LOCATION = sql.SQL(
    "SELECT l.id, sds_location_has_foreign_devices(l.id)"
    " FROM locations l WHERE l.org_id = %s AND {}")


def org_device_names(conn: psycopg.Connection, *, org: UUID) -> tuple[str, ...]:
    """Names of the devices of `org`."""
    rows = conn.execute("SELECT name FROM devices WHERE org_id = %s ORDER BY name", (org,))
    return tuple(r[0] for r in rows)


def unit_for(col: Column, chosen: Mapping[str, Unit]) -> Unit | None:
    """The unit in effect for `col`, or None when no unit parameter converts it."""
    if col.measure is None:
        return None
    return chosen.get(units.param_for(col.measure))


def column_expr(col: Column, unit: Unit | None, *, csv: bool = False) -> sql.Composable:
    """SQL for one output column, aliased to its name.

    csv=True formats the value as CSV text in SQL (for COPY): times as
    `2019-07-01T00:00:00+0000`, booleans as true/false; numbers print as float8 text; text
    that would start a spreadsheet formula gets a leading `'`.
    """
    ref = sql.SQL("t.{}").format(sql.Identifier(col.name))
    expr: sql.Composable = ref
    if col.dtype == "real":
        shortest = sql.SQL("{}::text::float8").format(ref)
        expr = shortest
        if unit is not None:
            scale, offset = units.factors(col, unit)
            if (scale, offset) != (1.0, 0.0):
                # Rounded in float8 (round half to even, as Python's round): the quotient of
                # two exact doubles is the double nearest the decimal, and this is twice as
                # fast as a numeric round trip.
                power = sql.Literal(float(10 ** units.decimals(col, unit)))
                expr = sql.SQL("round(({} * {} + {}) * {}) / {}").format(
                    shortest, sql.Literal(scale), sql.Literal(offset), power, power)
    elif col.dtype == "uuid":
        expr = sql.SQL("{}::text").format(ref)
    elif col.dtype == "boolean" and csv:
        expr = sql.SQL("CASE {} WHEN true THEN 'true' WHEN false THEN 'false' END").format(ref)
    elif col.dtype == TS and csv:
        expr = sql.SQL("sds_iso_time({}, interval '0')").format(ref)
    elif col.dtype == "text" and csv:
        # A device-set text (fw, a device name) starting like a formula would run as one when
        # the CSV is opened in a spreadsheet (shared/spreadsheet.py). Only text columns:
        # numbers, negative ones included, stay numbers.
        expr = spreadsheet.text_expr(ref)
    return sql.SQL("{} AS {}").format(expr, sql.Identifier(col.name))


def bounds(scan: Scan) -> tuple[datetime, datetime]:
    """The inclusive time range a page's statement reads (the window, the cursor's side)."""
    lo, hi = scan.start, scan.end
    if scan.start_day is not None:
        lo = lo - _LOCAL_DAY_MARGIN
    if scan.end_day is not None:
        hi = hi + _LOCAL_DAY_MARGIN
    if scan.after is not None:
        if scan.descending:
            hi = min(hi, scan.after.time)
        else:
            lo = max(lo, scan.after.time)
    return lo, hi


@dataclass(frozen=True, slots=True)
class _Shape:
    """Everything that decides the text of a statement (values go in parameters)."""

    table: str
    device: bool
    devices: bool
    updated: bool
    location: bool
    only_devices: bool
    after_row: bool  # keyset predicate on (time, device); a device listing needs time only
    start_day: bool
    end_day: bool
    descending: bool
    cold: bool = False
    guard: bool = False


def _shape(scan: Scan) -> _Shape:
    return _Shape(
        scan.table.name, scan.device is not None, scan.devices is not None,
        scan.updated_since is not None, scan.location is not None,
        scan.only_devices is not None and scan.device is None,
        scan.after is not None and scan.device is None, scan.start_day is not None,
        scan.end_day is not None, scan.descending, bool(scan.cold and scan.cold.arrays),
        scan.guard)


def _cold_source(table: str) -> sql.Composable:
    """The table's rows and the cold rows passed as arrays (serve.coldread): the cold ones
    only of devices the caller sees (the hypertables' own policy, 0051/0155) and only when
    no hot copy exists (a file verified but not yet live; a late duplicate)."""
    cols = [c for c in TABLES_BY_NAME[table].columns]
    names = sql.SQL(", ").join(sql.Identifier(c.name) for c in cols)
    arrays = sql.SQL(", ").join(
        sql.SQL("string_to_array({}, ',', '')::{}[]").format(
            sql.Placeholder(f"cold_{c.name}"), sql.SQL(c.dtype)) for c in cols)
    # The hot copies are looked up once, in the cold rows' span and devices (a hash anti
    # join): probed row by row, every chunk of the window was searched for each cold row.
    return sql.SQL(
        "(WITH hot_keys AS MATERIALIZED (SELECT device, time FROM {table}"
        " WHERE time >= %(cold_lo)s AND time <= %(cold_hi)s AND device = ANY(%(cold_devices)s))"
        " SELECT {names} FROM {table} UNION ALL SELECT {names} FROM unnest({arrays}) AS c({names})"
        " WHERE c.device IN (SELECT name FROM devices) AND NOT EXISTS (SELECT 1 FROM hot_keys h"
        " WHERE h.device = c.device AND h.time = c.time)) t").format(
        names=names, table=sql.Identifier(table), arrays=arrays)


@lru_cache(maxsize=256)
def _tail_sql(shape: _Shape) -> str:
    """FROM ... WHERE ... ORDER BY ... shared by the page and next-key statements."""
    source: sql.Composable = sql.SQL("{} t").format(sql.Identifier(shape.table))
    if shape.cold:
        source = _cold_source(shape.table)
    where: list[sql.Composable] = [sql.SQL("t.time >= %(lo)s"), sql.SQL("t.time <= %(hi)s")]
    if shape.device:
        # The tenant check rides along (a one-time filter), so a device page is one statement;
        # an empty answer is told apart from an unknown device by find_device afterwards.
        where.append(sql.SQL("t.device = %(device)s AND EXISTS (SELECT 1 FROM devices d"
                             " WHERE d.name = %(device)s AND d.org_id = %(org)s)"))
    if shape.devices:
        where.append(sql.SQL("t.device = ANY(%(devices)s)"))
    if shape.updated:
        # No index on update_time: this filters the rows the time/device keys select, so a
        # sync costs a read of the listing's window (docs/api.md "Changed rows").
        where.append(sql.SQL("t.update_time >= %(updated_since)s"
                             " AND t.update_time < %(updated_before)s"))
    if shape.location:
        where.append(sql.SQL("t.location = %(location)s"))
    if shape.guard:
        # Uncorrelated: one index probe of the catalogue per statement (a one-time filter).
        where.append(sql.SQL("NOT EXISTS (SELECT 1 FROM cold_files f WHERE f.org_id = %(org)s"
                             " AND f.state IN ({}) AND f.first_time <= %(hi)s"
                             " AND f.last_time >= %(lo)s)").format(
            sql.SQL(", ").join(sql.Literal(s) for s in coldfiles.READABLE)))
    if shape.only_devices:
        where.append(sql.SQL("t.device = ANY(%(only_devices)s)"))
    if shape.after_row:
        cmp = sql.SQL("<=" if shape.descending else ">=")
        where.append(sql.SQL("(t.time, t.device) {} (%(after_time)s, %(after_device)s)")
                     .format(cmp))
    if shape.start_day or shape.end_day:
        # `daily` rows start at local midnight: a date alone names local days, whatever the
        # zone of the location each row was recorded at.
        source = sql.SQL("{} LEFT JOIN locations z ON z.id = t.location").format(source)
        local_day = sql.SQL("(t.time AT TIME ZONE coalesce(z.tz_name, 'UTC'))::date")
        if shape.start_day:
            where.append(sql.SQL("{} >= %(start_day)s").format(local_day))
        if shape.end_day:
            where.append(sql.SQL("{} <= %(end_day)s").format(local_day))
    direction = sql.SQL("DESC" if shape.descending else "ASC")
    return sql.SQL("FROM {} WHERE {} ORDER BY t.time {}, t.device {}").format(
        source, sql.SQL(" AND ").join(where), direction, direction).as_string()


# What a next-page key statement reads of a cold row: the rest of its columns are sent as NULL
# (unnest pads them), which saves parsing 20 arrays of up to 10,000 values.
_COLD_KEYS = frozenset({"time", "device", "location"})


def _params(scan: Scan, *, keys_only: bool = False) -> dict[str, Any]:
    lo, hi = bounds(scan)
    params: dict[str, Any] = {"lo": lo, "hi": hi, "device": scan.device,
                              "location": scan.location, "org": scan.org}
    if scan.only_devices is not None:
        params["only_devices"] = list(scan.only_devices)
    if scan.devices is not None:
        params["devices"] = list(scan.devices)
    if scan.updated_since is not None:
        params["updated_since"] = scan.updated_since
        params["updated_before"] = scan.updated_before
    if scan.after is not None:
        params["after_time"] = scan.after.time
        params["after_device"] = scan.after.device
    if scan.cold is not None and scan.cold.arrays:
        params.update({f"cold_{name}": values if not keys_only or name in _COLD_KEYS else None
                       for name, values in scan.cold.arrays.items()})
        params.update(cold_lo=scan.cold.first, cold_hi=scan.cold.last,
                      cold_devices=list(scan.cold.devices))
    params["start_day"] = scan.start_day
    params["end_day"] = scan.end_day
    return params


@lru_cache(maxsize=256)
def _select_sql(columns: tuple[Column, ...], chosen: tuple[Unit | None, ...], csv: bool,
                local: str | None) -> str:
    exprs = [column_expr(c, u, csv=csv) for c, u in zip(columns, chosen, strict=True)]
    if csv:
        if local == "zone":
            exprs.append(sql.SQL("sds_iso_time(t.time, %(local_zone)s::text) AS local_time"))
        elif local == "flat":
            exprs.append(sql.SQL(
                "sds_iso_time(t.time, make_interval(secs => %(local_offset)s)) AS local_time"))
    else:
        exprs.append(sql.SQL("t.time AS {}, t.device AS {}").format(
            sql.Identifier("__time"), sql.Identifier("__device")))
    return sql.SQL(", ").join(exprs).as_string()


def page_statement(
    scan: Scan, *, limit: int | None = None, local_tz: tzinfo | None = None,
) -> tuple[str, dict[str, Any]]:
    """SELECT of a page's rows. JSON (scan.csv false): the output columns, then the row key
    (time, device) as two hidden trailing columns (for local_time and the next page's key).
    CSV: the columns formatted as text, then local_time (for `local_tz`) formatted in SQL.
    `limit` overrides scan.limit. Statement text is cached per shape; values are parameters.
    """
    local: str | None = None
    params = _params(scan)
    if scan.csv and local_tz is not None:
        if isinstance(local_tz, ZoneInfo):
            local, params["local_zone"] = "zone", local_tz.key
        else:
            offset = local_tz.utcoffset(None)
            local, params["local_offset"] = "flat", int(offset.total_seconds()) if offset else 0
    chosen = tuple(unit_for(c, scan.units) for c in scan.columns)
    text = (f"SELECT {_select_sql(scan.columns, chosen, scan.csv, local)} "
            f"{_tail_sql(_shape(scan))} LIMIT %(limit)s")
    params["limit"] = scan.limit if limit is None else limit
    return text, params


def copy_statement(scan: Scan, *, local_tz: tzinfo | None = None) -> tuple[str, dict[str, Any]]:
    """COPY (page as CSV) TO STDOUT: PostgreSQL writes the CSV lines (header excluded)."""
    text, params = page_statement(scan, local_tz=local_tz)
    return f"COPY ({text}) TO STDOUT WITH (FORMAT csv)", params


def next_key_statement(scan: Scan) -> tuple[str, dict[str, Any]]:
    """SELECT of the key (time, device) of the first row after the page, if any.

    The OFFSET here is bounded by the page size (at most 10000 index entries), not by the
    position in the listing, which the keyset predicate already skips.
    """
    params = _params(scan, keys_only=True)
    params["limit"] = scan.limit
    return f"SELECT t.time, t.device {_tail_sql(_shape(scan))} OFFSET %(limit)s LIMIT 1", params


def any_hot_row(conn: psycopg.Connection, scan: Scan) -> bool:
    """Whether the listing has a hot row in the span `scan` reads (its cold rows aside)."""
    params = _params(scan)
    shape = _shape(scan)
    assert not shape.cold
    return conn.execute(f"SELECT 1 {_tail_sql(shape)} LIMIT 1", params).fetchone() is not None


def next_key(conn: psycopg.Connection, scan: Scan) -> Position | None:
    """Key of the row that starts the next page, or None on the last page."""
    stmt, params = next_key_statement(scan)
    row = conn.execute(stmt, params).fetchone()
    return Position(row[0], row[1]) if row else None
