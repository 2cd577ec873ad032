"""Rollups of `calibrated` into `hourly`, `local_hourly` and `daily`, as recomputations.

Every rollup row is recomputed from the raw 5-minute rows of its bucket and upserted, never
incremented, so running anything twice is harmless (reliability plan R24, R35). Incremental work
comes from dirty marks: `process_marks` claims marks with DELETE ... RETURNING and recomputes
those buckets in the same transaction, so a reading committed after the claim leaves a new mark
behind instead of being lost (finding 7). Functions take `conn` first and never commit.

Buckets are half-open UTC ranges from shared.timeutil: UTC hours; local hours and local days of
the zone of the location on the readings (`calibrated.location -> locations.tz_name`). Readings
without a location (device not deployed) roll up into `hourly` only.
"""

from __future__ import annotations

import logging
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import date, datetime, timedelta
from functools import cache
from typing import Any
from uuid import UUID

import psycopg

from aggregate import et, statements
from shared import dirty
from shared.columns import TABLES, Rollup
from shared.timeutil import (
    hour_bounds,
    local_date,
    local_day_start,
    local_hour_bounds,
    slots,
    zone,
)

log = logging.getLogger(__name__)

# Fixed order in which tables are processed, so concurrent workers take locks in one order.
TABLE_ORDER = ("hourly", "local_hourly", "daily")
LOCAL_TABLES = frozenset({"local_hourly", "daily"})
# How far after a marked bucket start to look for the readings' locations (longest bucket).
_SPAN = {"local_hourly": timedelta(hours=2), "daily": timedelta(hours=26)}


@dataclass(frozen=True, slots=True)
class Bucket:
    """One rollup bucket of one device: `[start, end)` UTC, at `location` (None: any)."""

    device: str
    start: datetime
    end: datetime
    location: UUID | None = None
    tz: str | None = None

    @property
    def slots(self) -> int:
        """5-minute slots in the bucket (12 per hour; 276/288/294/300 per local day)."""
        return slots(self.start, self.end)


@dataclass(frozen=True, slots=True)
class Site:
    """What evapotranspiration needs to know about a location."""

    id: UUID
    tz: str
    lat: float | None
    lon: float | None
    elev: float | None
    sensor_height: float
    kc: float | None
    schedule: tuple[tuple[date, float], ...]  # (start_date, kc), ascending

    def kc_on(self, day: date) -> float | None:
        """The crop coefficient in force on local date `day`: the dated schedule's latest entry
        on or before it, else the location's constant kc."""
        found = None
        for start, kc in self.schedule:
            if start <= day:
                found = kc
            else:
                break
        return found if found is not None else self.kc


def bucket_of(table: str, t: datetime, tz: str | None) -> tuple[datetime, datetime]:
    """The `[start, end)` of the `table` bucket containing instant `t` (zone for local tables)."""
    if table == "hourly":
        return hour_bounds(t)
    if tz is None:
        raise ValueError(f"{table} buckets need a time zone")
    z = zone(tz)
    if table == "local_hourly":
        return local_hour_bounds(t, z)
    day = local_date(t, z)
    return local_day_start(day, z), local_day_start(day + timedelta(days=1), z)


def claim_marks(conn: psycopg.Connection, *, table: str, limit: int) -> list[tuple[str, datetime]]:
    """Claim (delete and return) up to `limit` pending marks of `table`, in (device, bucket)
    order. Marks locked by another worker are skipped, not waited for."""
    rows = conn.execute(statements.CLAIM, {"rollup": table, "limit": limit}).fetchall()
    return sorted((r[0], r[1]) for r in rows)


def resolve_marks(
    conn: psycopg.Connection, *, table: str, marks: Sequence[tuple[str, datetime]]
) -> list[Bucket]:
    """The buckets the claimed `marks` name.

    A local mark carries only (device, start); the bucket's location is the one on the
    readings whose zone starts a bucket at exactly that instant. A mark that matches no
    location (its readings were moved or deleted) yields no bucket, and its row is removed.
    """
    if table == "hourly":
        return [Bucket(d, s, hour_bounds(s)[1]) for d, s in marks]
    if not marks:
        return []
    rows = conn.execute(statements.CANDIDATE_LOCATIONS, {
        "device": [m[0] for m in marks], "bucket": [m[1] for m in marks],
        "span": _SPAN[table]}).fetchall()
    found: list[Bucket] = []
    for device, start, location, tz in rows:
        b_start, b_end = bucket_of(table, start, tz)
        if b_start == start:
            found.append(Bucket(device, start, b_end, location, tz))
    return sorted(found, key=lambda b: (b.device, b.start, str(b.location)))


def process_marks(
    conn: psycopg.Connection, *, table: str, limit: int, low_quality_pct: float
) -> int:
    """Claim up to `limit` marks of `table` and recompute their buckets; returns marks claimed."""
    marks = claim_marks(conn, table=table, limit=limit)
    if not marks:
        log.debug("already rolled up %s: no pending marks", table)
        return 0
    buckets = resolve_marks(conn, table=table, marks=marks)
    rows = recompute(conn, table=table, buckets=buckets, clear=marks,
                     low_quality_pct=low_quality_pct)
    log.info("rolled up %s %s-%s: %d rows from %d marks", table, marks[0][1].isoformat(),
             max(m[1] for m in marks).isoformat(), rows, len(marks))
    return len(marks)


def recompute(
    conn: psycopg.Connection, *, table: str, buckets: Sequence[Bucket],
    clear: Iterable[tuple[str, datetime]] = (), low_quality_pct: float,
) -> int:
    """Recompute `buckets` of `table` from calibrated and upsert them; returns rows written.

    Rows at the (device, start) pairs in `clear` or `buckets` that end up with no readings
    are deleted. The caller owns the transaction.
    """
    conn.execute(statements.create_stage(table))
    conn.execute("SET LOCAL work_mem = '64MB'")  # a backfill piece's groups fit in memory
    # JIT compiling the ~40 aggregate expressions cost more than it saved (measured 1.3-1.7 s
    # vs 0.7-1.1 s for a week of 100 devices' hourly buckets).
    conn.execute("SET LOCAL jit = off")
    if buckets:
        # The bucket arrays defeat the planner's row estimates (it picked a merge join that
        # compared 100x more rows than it kept): each bucket is one index range scan on
        # (device, time).
        conn.execute("SET LOCAL enable_mergejoin = off")
        conn.execute("SET LOCAL enable_hashjoin = off")
        conn.execute(statements.stage(table, by_location=table in LOCAL_TABLES), {
            "device": [b.device for b in buckets],
            "location": [b.location for b in buckets],
            "start": [b.start for b in buckets],
            "end": [b.end for b in buckets],
            "slots": [b.slots for b in buckets],
            "tz": [b.tz for b in buckets],
            "low_quality_pct": low_quality_pct,
        })
        conn.execute("RESET enable_mergejoin")
        conn.execute("RESET enable_hashjoin")
        _fill_python_columns(conn, table)
    written = conn.execute(statements.upsert(table)).rowcount
    pairs = sorted({(b.device, b.start) for b in buckets} | set(clear))
    if pairs:
        gone = conn.execute(statements.delete_empty(table), {
            "device": [p[0] for p in pairs], "start": [p[1] for p in pairs]}).rowcount
        if gone:
            log.info("removed %d %s rows whose buckets have no readings", gone, table)
    # Empty the stage now: a transaction may recompute several batches before it commits.
    conn.execute(statements.truncate_stage(table))
    return written


# ---- evapotranspiration and crop water, per staged row -------------------------------------

def _col(table: str, rule: Rollup, source: str) -> str:
    """The column of `table` computed by `rule` from calibrated column `source`."""
    for c in TABLES[table].columns:
        if c.rollup is rule and c.source == source:
            return c.name
    raise KeyError(f"{table} has no {rule} of {source}")


@cache
def _inputs(table: str) -> dict[str, str]:
    if table == "daily":
        return {"tmax": _col(table, Rollup.MAX, "tair"), "tmin": _col(table, Rollup.MIN, "tair"),
                "rh_max": _col(table, Rollup.MAX, "rh"), "rh_min": _col(table, Rollup.MIN, "rh"),
                "wind": _col(table, Rollup.MEAN, "wind_speed"),
                "rs": _col(table, Rollup.ENERGY, "swdw"),
                "precip": _col(table, Rollup.SUM, "precip")}
    return {"tair": _col(table, Rollup.MEAN, "tair"), "rh": _col(table, Rollup.MEAN, "rh"),
            "wind": _col(table, Rollup.MEAN, "wind_speed"),
            "swdw": _col(table, Rollup.MEAN, "swdw"),
            "precip": _col(table, Rollup.SUM, "precip")}


def load_sites(conn: psycopg.Connection, ids: Iterable[UUID]) -> dict[UUID, Site]:
    """Location facts (coordinates, sensor height, kc and its dated schedule) by id."""
    wanted = sorted(set(ids), key=str)
    if not wanted:
        return {}
    schedule: dict[UUID, list[tuple[date, float]]] = defaultdict(list)
    for loc, start, kc in conn.execute(
            "SELECT location_id, start_date, kc FROM crop_coefficients"
            " WHERE location_id = ANY(%s) ORDER BY location_id, start_date", (wanted,)):
        schedule[loc].append((start, float(kc)))
    sites = {}
    for row in conn.execute(
            "SELECT id, tz_name, lat, lon, elev, sensor_height, kc FROM locations"
            " WHERE id = ANY(%s)", (wanted,)):
        sites[row[0]] = Site(row[0], row[1], row[2], row[3], row[4], float(row[5]),
                             None if row[6] is None else float(row[6]),
                             tuple(schedule.get(row[0], ())))
    return sites


def compute_water(table: str, row: dict[str, Any], site: Site) -> dict[str, float | None]:
    """et, etc, kc and (daily) crop water demand of one staged row, by the registry's rules."""
    names = _inputs(table)
    v = {k: row.get(n) for k, n in names.items()}
    z = zone(site.tz)
    day = local_date(row["time"], z)
    kc = site.kc_on(day)
    value: float | None = None
    if table == "daily":
        needed = ("tmax", "tmin", "rh_max", "rh_min", "wind", "rs")
        if site.lat is not None and all(v[k] is not None for k in needed):
            value = et.daily_et(
                tmax=v["tmax"], tmin=v["tmin"], rh_max=v["rh_max"], rh_min=v["rh_min"],
                wind=v["wind"], height=site.sensor_height, rs=v["rs"], lat=site.lat,
                elevation=site.elev or 0.0, doy=day.timetuple().tm_yday)
    else:
        needed = ("tair", "rh", "wind", "swdw")
        if site.lat is not None and site.lon is not None and all(
                v[k] is not None for k in needed):
            value = et.period_et(
                start=row["time"], end=row["bucket_end"], tair=v["tair"], rh=v["rh"],
                wind=v["wind"], height=site.sensor_height, swdw=v["swdw"], lat=site.lat,
                lon=site.lon, elevation=site.elev or 0.0)
    crop = value * kc if value is not None and kc is not None else None
    out: dict[str, float | None] = {}
    for c in statements.python_columns(table):
        if c.rollup is Rollup.ET:
            out[c.name] = value
        elif c.rollup is Rollup.ETC:
            out[c.name] = crop
        elif c.rollup is Rollup.KC:
            out[c.name] = kc
        elif c.rollup is Rollup.WATER_BALANCE:
            precip = v.get("precip")
            out[c.name] = precip - crop if precip is not None and crop is not None else None
    return out


def _fill_python_columns(conn: psycopg.Connection, table: str) -> None:
    names = _inputs(table)
    cols = tuple(sorted(set(names.values())))
    with conn.cursor() as cur:
        cur.execute(statements.stage_inputs(table, cols))
        keys = ["device", "time", "bucket_end", "location", "tz", *cols]
        rows = [dict(zip(keys, r, strict=True)) for r in cur.fetchall()]
    if not rows:
        return
    sites = load_sites(conn, (r["location"] for r in rows))
    pycols = statements.python_columns(table)
    arrays: dict[str, list[Any]] = {"device": [], "time": []}
    arrays.update({c.name: [] for c in pycols})
    for r in rows:
        site = sites.get(r["location"])
        if site is None:
            continue
        values = compute_water(table, r, site)
        arrays["device"].append(r["device"])
        arrays["time"].append(r["time"])
        for c in pycols:
            arrays[c.name].append(values[c.name])
    if arrays["device"]:
        conn.execute(statements.stage_update(table), arrays)


# ---- ranges (backfill) and location changes ----------------------------------------------

def zone_buckets(table: str, tz: str | None, start: datetime, end: datetime
                 ) -> list[tuple[datetime, datetime]]:
    """Every `table` bucket overlapping `[start, end)`, in order (zone for local tables)."""
    out = []
    t = start
    while t < end:
        b = bucket_of(table, t, tz)
        out.append(b)
        t = b[1]
    return out


Span = tuple[str, UUID | None, str | None, datetime, datetime]


def location_spans(
    conn: psycopg.Connection, *, start: datetime, end: datetime,
    devices: Sequence[str] | None = None,
) -> list[Span]:
    """(device, location, zone, first, last reading) for readings in `[start, end)`."""
    return conn.execute(
        "SELECT c.device, c.location, l.tz_name, min(c.time), max(c.time) FROM calibrated c"
        " LEFT JOIN locations l ON l.id = c.location"
        " WHERE c.time >= %(start)s AND c.time < %(end)s"
        " AND (%(devices)s::text[] IS NULL OR c.device = ANY(%(devices)s))"
        " GROUP BY c.device, c.location, l.tz_name ORDER BY 1, 4",
        {"start": start, "end": end, "devices": list(devices) if devices else None},
    ).fetchall()


def buckets_in_range(
    conn: psycopg.Connection, *, table: str, start: datetime, end: datetime,
    devices: Sequence[str] | None = None, spans: Sequence[Span] | None = None,
) -> list[Bucket]:
    """The buckets of `table` holding readings in `[start, end)` (of `devices`, or all).

    Found from the readings' (device, location) spans (`location_spans`, or given), so a
    device that moved gets the buckets of each location's zone for the time it stood there.
    """
    rows = spans if spans is not None else location_spans(
        conn, start=start, end=end, devices=devices)
    cache: dict[tuple[str | None, datetime, datetime], list[tuple[datetime, datetime]]] = {}
    out: list[Bucket] = []
    for device, location, tz, first, last in rows:
        if table == "hourly":
            key: tuple[str | None, datetime, datetime] = (None, first, last)
        elif location is None:
            continue  # undeployed readings have no local zone: hourly only (docs/aggregate.md)
        else:
            key = (tz, first, last)
        lo = bucket_of(table, first, key[0])[0]
        hi = bucket_of(table, last, key[0])[1]
        spans = cache.get((key[0], lo, hi))
        if spans is None:
            spans = cache[(key[0], lo, hi)] = zone_buckets(table, key[0], lo, hi)
        loc = location if table in LOCAL_TABLES else None
        tzn = tz if table in LOCAL_TABLES else None
        out.extend(Bucket(device, s, e, loc, tzn) for s, e in spans)
    # One bucket per (device, start, location): hourly spans of two locations may overlap.
    unique = {(b.device, b.start, b.location): b for b in out}
    return sorted(unique.values(), key=lambda b: (b.device, b.start, str(b.location)))


def mark_location_dirty(conn: psycopg.Connection, location: UUID) -> int:
    """Mark every local bucket of `location` dirty, under its current zone and its old rows.

    Call in the transaction that changes the location's `tz_name` (reliability plan R29):
    the buckets of the new zone are recomputed, and rows bucketed by the old zone, which no
    longer start a bucket, are removed by the next run. Returns the marks written.
    """
    row = conn.execute("SELECT tz_name FROM locations WHERE id = %s", (location,)).fetchone()
    if row is None:
        raise ValueError(f"unknown location {location}")
    tz = zone(row[0])
    marks: set[dirty.Mark] = set()
    by_device: dict[str, list[datetime]] = defaultdict(list)
    # A server-side cursor streams the readings; it needs a transaction (a savepoint inside
    # the caller's).
    with conn.transaction(), conn.cursor(name="location_readings") as cur:
        cur.itersize = 10000
        cur.execute("SELECT device, time FROM calibrated WHERE location = %s", (location,))
        for device, t in cur:
            by_device[device].append(t)
    for device, times in by_device.items():
        marks |= {m for m in dirty.bucket_marks(device, times, tz) if m[0] in LOCAL_TABLES}
    for table in ("local_hourly", "daily"):
        stale = conn.execute(
            statements.rows_at_location(table), (location,)).fetchall()
        marks |= {(table, d, t) for d, t in stale}
    return dirty.write_marks(conn, marks)

