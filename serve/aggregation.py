"""Aggregation on `/data/calibrated`: `interval=` and `points=` (docs/api.md "Aggregation").

A bucket holds the readings of one device from its start to the next bucket's start. Buckets
shorter than a day start on the UTC clock (as `hourly` does: the same instants for every
device, so `1h` is exactly an `hourly` row); day and week buckets start at the device's local
midnight in the zone of the location each reading was taken at (as `daily` does: DST days
last 23 or 25 hours, Lord Howe's 23.5 or 24.5). Each column aggregates by the registry's rule
for it (shared.columns.reading_rule: the rule of the hourly column rolled up from it), and a
mean column is followed by the bucket's lowest and highest reading (`<name>_min`,
`<name>_max`) for a chart's band. Every bucket also carries `samples` (readings in it),
`expected` (its 5-minute slots) and `complete` (as many readings as slots, and ended).

The answer holds the buckets that *start* within [start_time, end_time], each whole, in
keyset order (bucket start, device), so a cursor names a bucket exactly as it names a row.

Where a stored rollup answers exactly, it is read instead of the readings (X-Aggregated-From):
`1h` from `hourly` and `1d` from `daily`, when every column asked for is a stored column of that
table under the same rule and unit. A stored row is used only when its reading count equals the
count of readings now stored in its bucket (readings are written once, never changed: equal
counts mean the row was computed from these very readings), or when retention has deleted
them all since; a bucket whose rollup is missing or behind is computed from the readings in
the same statement.
"""

from __future__ import annotations

import csv
import dataclasses
import io
import math
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta, tzinfo
from typing import Any
from zoneinfo import ZoneInfo

import psycopg
from psycopg import sql

from serve import coldagg, queries, render
from serve.cursor import Position
from shared import spreadsheet, units
from shared.columns import TABLES, Column, Rollup, reading_rule
from shared.errors import BadParameter
from shared.units import Unit

_SLOT = timedelta(minutes=5)
# Day and week buckets: a local day lasts up to 25 h, so the bucket after a start lies
# within its nominal width plus this.
_DST_MARGIN = timedelta(hours=2)
SAMPLES, EXPECTED, COMPLETE = "samples", "expected", "complete"
BOOKKEEPING = (SAMPLES, EXPECTED, COMPLETE)


@dataclass(frozen=True, slots=True)
class Interval:
    """One bucket width of the ladder: its label, width, and whether it is cut in local time."""

    label: str
    width: timedelta
    local: bool  # days and weeks: local midnight in the device's zone

    @property
    def shortest(self) -> timedelta:
        """The shortest a bucket can last (a local day loses an hour to DST)."""
        return self.width - timedelta(hours=1) if self.local else self.width


# Every interval divides a day (or is whole days), so buckets line up with hours and days.
LADDER: tuple[Interval, ...] = tuple(
    [Interval(f"{m}m", timedelta(minutes=m), False) for m in (5, 10, 15, 20, 30)]
    + [Interval(f"{h}h", timedelta(hours=h), False) for h in (1, 2, 3, 4, 6, 8, 12)]
    + [Interval("1d", timedelta(days=1), True), Interval("7d", timedelta(days=7), True)])
_BY_WIDTH = {i.width: i for i in LADDER}
_UNITS = {"m": 60, "min": 60, "h": 3600, "hr": 3600, "d": 86400, "w": 7 * 86400}
# ASCII digits only, as every number of a request (serve/counts.py).
_FORM = re.compile(r"^\s*(\d{1,4})\s*(m|min|h|hr|d|w)\s*$", re.IGNORECASE | re.ASCII)
_CHOICES = ", ".join(i.label for i in LADDER)


def parse_interval(raw: str) -> Interval:
    """The ladder interval `raw` names (`15m`, `1h`, `60min`, `1w` = `7d`); BadParameter else."""
    match = _FORM.match(raw)
    found = None
    if match:
        seconds = int(match.group(1)) * _UNITS[match.group(2).lower()]
        found = _BY_WIDTH.get(timedelta(seconds=seconds))
    if found is None:
        raise BadParameter(f"interval: {raw[:40]!r} is not a bucket width; valid: {_CHOICES}",
                           errors={"interval": [f"must be one of {_CHOICES}"]})
    return found


def bucket_bound(interval: Interval, start: datetime, end: datetime) -> int:
    """At most how many buckets of one device start within [start, end]."""
    return math.floor((end - start) / interval.shortest) + 1


def for_points(points: int, start: datetime, end: datetime) -> Interval:
    """The finest interval giving at most `points` buckets per device over [start, end]."""
    for interval in LADDER:
        if bucket_bound(interval, start, end) <= points:
            return interval
    weeks = bucket_bound(LADDER[-1], start, end)
    raise BadParameter(
        f"points: {points} is too few for this window ({weeks} weekly buckets, the widest "
        f"interval); ask for at least {weeks} or a shorter window",
        errors={"points": [f"at least {weeks} for this window"]})


# What a reading aggregated costs against a row served (serve.fairshare's heavy pages): a year
# of one device's readings (105,120) aggregated in every column took 1.4-1.9x as long as
# serving the year's 8,760 hourly rows (docs/benchmarks.md "Aggregation on /data"), about 1/8
# of a row each; one column with its band costs less, so this errs on the heavy side.
READINGS_PER_ROW = 8


@dataclass(frozen=True, slots=True)
class Bucketing:
    """What a request asked for: a fixed interval, or a number of points for the window."""

    interval: Interval | None
    points: int | None

    def resolve(self, start: datetime, end: datetime) -> Interval:
        """The interval of the listing over its window (a cursor carries the window, so every
        page of a `points=` listing resolves to the same interval)."""
        if self.interval is not None:
            return self.interval
        assert self.points is not None
        return for_points(self.points, start, end)

    def binding(self) -> dict[str, object]:
        """The cursor binding's key for it: a cursor fits only the same aggregation."""
        if self.interval is not None:
            return {"interval": self.interval.label}
        return {"points": self.points}


def cost(bucketing: Bucketing | None, start: datetime, end: datetime, devices: int,
         limit: int) -> int:
    """Estimated cost, in rows served, of a /data page over [start, end] of `devices` devices
    named (0: a location's, not known before it is read), what makes it heavy
    (serve.fairshare). A page of rows costs its `limit`. An aggregated page costs the buckets
    it answers (at most `limit`) plus the readings of its whole window at READINGS_PER_ROW to
    a row: the whole window whatever `limit`, since a `1h` or `1d` page read from a rollup
    counts every bucket's readings to check the rollup is current (`_from_stored`). A
    location's page is counted full, and its window for one device at least. BadParameter
    when `points` fits no interval."""
    if bucketing is None:
        return limit
    interval = bucketing.resolve(start, end)
    per_device = bucket_bound(interval, start, end)
    slots = max(1, interval.width // _SLOT)
    if not devices:
        buckets, readings = limit, max(limit, per_device) * slots
    else:
        buckets = min(limit, per_device * devices)
        readings = per_device * devices * slots
    return buckets + readings // READINGS_PER_ROW


def parse(args: Mapping[str, Any], table: str) -> Bucketing | None:
    """The aggregation a request asks for, or None; BadParameter naming the parameter."""
    raw, points = args.get("interval"), args.get("points")
    if raw is None and points is None:
        return None
    if raw is not None and points is not None:
        raise BadParameter(
            "interval and points: send one (points picks the interval for the window)",
            errors={"interval": ["not with points"], "points": ["not with interval"]})
    name = "interval" if raw is not None else "points"
    if table != "calibrated":
        raise BadParameter(
            f"{name}: aggregation is served on calibrated (the readings), which reads hourly "
            f"and daily itself where they answer exactly; {table} rows are served as stored",
            errors={name: [f"not available on {table}"]})
    return Bucketing(parse_interval(raw) if raw is not None else None, points)


# ---- the answer's columns ---------------------------------------------------------------------

_RULE_WORDS = {Rollup.MEAN: "mean", Rollup.SUM: "total", Rollup.MAX: "highest",
               Rollup.MIN: "lowest", Rollup.CIRCULAR_MEAN: "circular mean"}


def output_columns(selected: tuple[Column, ...]) -> tuple[Column, ...]:
    """The aggregated answer's registry-shaped columns for the calibrated columns `selected`:
    keys as they are, each value column under its reading rule (source = itself), a mean
    followed by its band (`_min`, `_max`)."""
    out: list[Column] = []
    for col in selected:
        if col.rollup is Rollup.KEY:
            out.append(col)
            continue
        rule = reading_rule(col.name)
        out.append(dataclasses.replace(
            col, rollup=rule, source=col.name,
            description=f"{col.description}, {_RULE_WORDS[rule]} of the bucket's readings"))
        if rule is Rollup.MEAN:
            for suffix, band in (("min", Rollup.MIN), ("max", Rollup.MAX)):
                out.append(dataclasses.replace(
                    col, name=f"{col.name}_{suffix}", rollup=band, source=col.name,
                    description=f"{col.description}, {_RULE_WORDS[band]} of the bucket's "
                                f"readings"))
    return tuple(out)


def stored_source(columns: tuple[Column, ...], interval: Interval) -> str | None:
    """The rollup table that holds every column of `columns` for `interval`'s buckets (the
    same rule of the same reading column, in the same unit), or None."""
    table = {"1h": "hourly", "1d": "daily"}.get(interval.label)
    if table is None:
        return None
    return table if all(c.rollup is Rollup.KEY or stored_column(table, c) is not None
                        for c in columns) else None


def stored_column(table: str, col: Column) -> Column | None:
    """The column of rollup `table` computing `col`'s rule from the same reading column."""
    for stored in TABLES[table].columns:
        if (stored.source == col.source and stored.rollup is col.rollup
                and stored.unit == col.unit):
            return stored
    return None


# ---- SQL -------------------------------------------------------------------------------------

def _i(name: str) -> sql.Identifier:
    return sql.Identifier(name)


def _reading_expr(col: Column) -> sql.Composable:
    """The unrounded value of `col` over the bucket's readings `t`: the rule's formula, as
    aggregate.statements merges its partial sums (an average is its sum over its count)."""
    ref = sql.SQL("t.{}").format(_i(col.source or col.name))
    if col.rollup is Rollup.MEAN:
        # avg of a real accumulates float8 sums: the sum over the count, in one aggregate.
        return sql.SQL("avg({})").format(ref)
    if col.rollup is Rollup.SUM:
        return sql.SQL("sum({}::float8)").format(ref)
    if col.rollup is Rollup.MIN:
        return sql.SQL("min({})::float8").format(ref)
    if col.rollup is Rollup.MAX:
        return sql.SQL("max({})::float8").format(ref)
    if col.rollup is Rollup.CIRCULAR_MEAN:
        # Mean of unit vectors, in [0, 360) once rounded (see _out).
        return sql.SQL("(degrees(atan2(sum(sin(radians({0}))), sum(cos(radians({0}))))) + 360)"
                       ).format(ref)
    raise ValueError(f"rule {col.rollup} of {col.name} does not aggregate readings")


def _out(col: Column, unit: Unit | None, csv: bool) -> sql.Composable:
    """The output expression of `col` from the bucket row `b`: converted and rounded as
    every /data value is (serve.queries.column_expr), formatted for CSV when `csv`."""
    ref = sql.SQL("b.{}").format(_i(col.name))
    if col.name == "time":
        return sql.SQL("sds_iso_time(b.time, interval '0')") if csv else ref
    if col.name == "device":
        return spreadsheet.text_expr(ref) if csv else ref
    if col.name == "location":
        return sql.SQL("b.location::text")
    scale, offset = units.factors(col, unit) if unit is not None else (1.0, 0.0)
    power = sql.Literal(float(10 ** units.decimals(col, unit)))
    value = sql.SQL("round(({} * {} + {}) * {}) / {}").format(
        ref, sql.Literal(scale), sql.Literal(offset), power, power)
    if col.rollup is Rollup.CIRCULAR_MEAN:
        value = sql.SQL("mod(({})::numeric, 360)::float8").format(value)
    return sql.SQL("({})::text").format(value) if csv else value


def _filters(alias: str, scan: queries.Scan) -> list[sql.Composable]:
    """The tenant and selection predicates of serve.queries' listings, on table `alias`."""
    a = sql.Identifier(alias)
    where: list[sql.Composable] = []
    if scan.device is not None:
        where.append(sql.SQL("{a}.device = %(device)s AND EXISTS (SELECT 1 FROM devices d"
                             " WHERE d.name = %(device)s AND d.org_id = %(org)s)").format(a=a))
    if scan.devices is not None:
        where.append(sql.SQL("{a}.device = ANY(%(devices)s)").format(a=a))
    if scan.location is not None:
        where.append(sql.SQL("{a}.location = %(location)s").format(a=a))
    if scan.only_devices is not None and scan.device is None:
        where.append(sql.SQL("{a}.device = ANY(%(only_devices)s)").format(a=a))
    return where


def _bucket(interval: Interval) -> tuple[sql.Composable, sql.Composable, sql.Composable]:
    """(join, bucket start, bucket end) of reading `t`: local buckets in its location's zone."""
    if not interval.local:
        return (sql.SQL(""), sql.SQL("time_bucket(%(width)s, t.time)"),
                sql.SQL("b.time + %(width)s"))
    return (sql.SQL(" LEFT JOIN locations z ON z.id = t.location"),
            sql.SQL("time_bucket(%(width)s, t.time, coalesce(z.tz_name, 'UTC'))"),
            sql.SQL("time_bucket(%(width)s, b.time + %(width)s + %(margin)s, b.tz)"))


def _from_readings(columns: tuple[Column, ...], interval: Interval, scan: queries.Scan,
                   only: sql.Composable | None = None) -> sql.Composable:
    """SELECT of the buckets computed from the readings (`only`: a predicate on the bucket
    start and device that restricts which buckets are computed)."""
    join, start, _end = _bucket(interval)
    values = [sql.SQL("{} AS {}").format(_reading_expr(c), _i(c.name))
              for c in columns if c.rollup is not Rollup.KEY]
    where = [sql.SQL("t.time >= %(lo)s"), sql.SQL("t.time < %(hi)s"), *_filters("t", scan)]
    if only is not None:
        where.append(only)
    if coldagg.partials(scan):  # cold buckets' partials (serve.coldagg) merged with the hot
        return coldagg.buckets(columns, scan, start, join, where, local=interval.local,
                               behind=only is not None)
    tz = sql.SQL("min(coalesce(z.tz_name, 'UTC'))") if interval.local else sql.SQL("'UTC'")
    # OFFSET 0 keeps the outer filter on the bucket start out of the scan: pushed down, its
    # guessed selectivity made the planner sort the readings (to disk) instead of reading
    # them in bucket order. The ORDER BY in the listing's direction lets a descending page
    # group the readings newest first too, so it stops after its buckets as an ascending one
    # does (grouped ascending, it aggregated the whole window before its LIMIT).
    direction = sql.SQL("DESC" if scan.descending else "ASC")
    return sql.SQL(
        "SELECT {start} AS time, t.device, last(t.location, t.time) AS location, {tz} AS tz,"
        " count(*)::int AS samples{values} FROM calibrated t{join} WHERE {where}"
        " GROUP BY 1, 2 ORDER BY 1 {d}, 2 {d} OFFSET 0").format(
        start=start, tz=tz, values=sql.SQL("").join(sql.SQL(", ") + v for v in values),
        join=join, where=sql.SQL(" AND ").join(where), d=direction)


def _from_stored(table: str, columns: tuple[Column, ...], interval: Interval, scan: queries.Scan
                 ) -> sql.Composable:
    """SELECT of the buckets: stored rows of `table` whose reading count is that of the
    readings now in their bucket (or whose readings retention has deleted since), and the
    other buckets computed from the readings."""
    join, start, _end = _bucket(interval)
    values = [sql.SQL("s.{}::float8 AS {}").format(_i(stored.name), _i(c.name))
              for c in columns if c.rollup is not Rollup.KEY
              for stored in [stored_column(table, c)] if stored is not None]
    tz = (sql.SQL("coalesce(z.tz_name, 'UTC')") if interval.local else sql.SQL("'UTC'"))
    slots = (sql.SQL("date_part('epoch', time_bucket(%(width)s, s.time + %(width)s"
                     " + %(margin)s, {tz}) - s.time) / 300").format(tz=tz)
             if interval.local else sql.SQL("12"))
    counts = coldagg.counts(scan, start, join, sql.SQL(" AND ").join(
        [sql.SQL("t.time >= %(lo)s"), sql.SQL("t.time < %(hi)s"), *_filters("t", scan)]))
    stored_rows = sql.SQL(
        "SELECT s.time, s.device, s.location, {tz} AS tz,"
        " round(s.sample_pct * {slots})::int AS samples{values}"
        " FROM {table} s LEFT JOIN locations z ON z.id = s.location"
        " WHERE {where}").format(
        tz=tz, slots=slots, values=sql.SQL("").join(sql.SQL(", ") + v for v in values),
        table=_i(table), where=sql.SQL(" AND ").join(
            [sql.SQL("s.time >= %(lo)s"), sql.SQL("s.time < %(hi)s"), *_filters("s", scan)]))
    behind = sql.SQL(
        "({start}, t.device) IN (SELECT c.time, c.device FROM counts c LEFT JOIN stored s"
        " ON s.time = c.time AND s.device = c.device WHERE s.samples IS DISTINCT FROM c.n)"
    ).format(start=start)
    return sql.SQL(
        "WITH counts AS MATERIALIZED ({counts}), stored AS MATERIALIZED ({stored})"
        " SELECT s.* FROM stored s LEFT JOIN counts c ON c.time = s.time"
        " AND c.device = s.device WHERE c.n = s.samples OR c.n IS NULL"
        " UNION ALL {readings}").format(
        counts=counts, stored=stored_rows,
        readings=_from_readings(columns, interval, scan, only=behind))


def statement(scan: queries.Scan, columns: tuple[Column, ...], interval: Interval, *, source: str,
              limit: int, local: str | int | None = None) -> tuple[sql.Composed, dict[str, Any]]:
    """SELECT of one page of buckets: the output columns (CSV: as text), `samples`,
    `expected`, `complete`, [local_time in CSV: `local` a zone name or a flat offset in
    seconds], then the key (time, device) as two hidden trailing columns; `limit` rows."""
    _join, _start, end = _bucket(interval)
    inner = (_from_readings(columns, interval, scan) if source == "calibrated"
             else _from_stored(source, columns, interval, scan))
    exprs: list[sql.Composable] = [sql.SQL("{} AS {}").format(
        _out(c, _unit_for(c, scan.units), scan.csv), _i(c.name)) for c in columns]
    exprs.append(sql.SQL("b.samples, b.expected, {} AS complete").format(
        sql.SQL("CASE WHEN b.complete THEN 'true' ELSE 'false' END") if scan.csv
        else sql.SQL("b.complete")))
    if isinstance(local, str):
        exprs.append(sql.SQL("sds_iso_time(b.time, %(local)s::text) AS local_time"))
    elif local is not None:
        exprs.append(sql.SQL(
            "sds_iso_time(b.time, make_interval(secs => %(local)s)) AS local_time"))
    where: list[sql.Composable] = [sql.SQL("b.time >= %(start)s"),
                                   sql.SQL("b.time <= %(end)s")]
    cmp = "<=" if scan.descending else ">="
    if scan.after is not None:
        where.append(sql.SQL("(b.time, b.device) {} (%(after_time)s, %(after_device)s)")
                     .format(sql.SQL(cmp)))
    direction = sql.SQL("DESC" if scan.descending else "ASC")
    text = sql.SQL(
        "SELECT {exprs}, b.time AS __time, b.device AS __device FROM ("
        " SELECT b.*, (date_part('epoch', b.b_end - b.time) / 300)::int AS expected,"
        "  b.samples * 300 >= date_part('epoch', b.b_end - b.time) AND b.b_end <= now()"
        "  AS complete FROM (SELECT b.*, {end} AS b_end FROM ({inner}) b) b) b"
        " WHERE {where} ORDER BY b.time {d}, b.device {d} LIMIT %(limit)s").format(
        exprs=sql.SQL(", ").join(exprs), end=end, inner=inner,
        where=sql.SQL(" AND ").join(where), d=direction)
    return text, _params(scan, interval, limit, local)


def _unit_for(col: Column, chosen: Mapping[str, Unit]) -> Unit | None:
    return None if col.measure is None else chosen.get(units.param_for(col.measure))


def _params(scan: queries.Scan, interval: Interval, limit: int, local: str | int | None
            ) -> dict[str, Any]:
    lo, hi = reading_window(scan, interval)
    after: Position | None = scan.after
    params: dict[str, Any] = {
        "lo": lo, "hi": hi, "start": scan.start, "end": scan.end, "width": interval.width,
        "margin": _DST_MARGIN, "device": scan.device, "location": scan.location,
        "org": scan.org, "limit": limit, "local": local}
    if scan.devices is not None:
        params["devices"] = list(scan.devices)
    if scan.only_devices is not None:
        params["only_devices"] = list(scan.only_devices)
    if after is not None:
        params["after_time"], params["after_device"] = after.time, after.device
    params.update(coldagg.params(scan))
    return params


def reading_window(scan: queries.Scan, interval: Interval) -> tuple[datetime, datetime]:
    """[lo, hi): the readings a page of buckets reads (its cold rows too, serve.coldagg)."""
    # Rows of the buckets starting in [start, end]: a bucket starts at or before its readings,
    # so none is before start; the last one ends within a width (and a DST hour) after end.
    reach = interval.width + (_DST_MARGIN if interval.local else timedelta(0))
    lo, hi = scan.start, scan.end + reach
    if scan.after is not None:
        if scan.descending:
            hi = min(hi, scan.after.time + reach)
        else:
            lo = max(lo, scan.after.time)
    return lo, hi


def header_names(columns: tuple[Column, ...]) -> list[str]:
    """The answer's field names in order (local_time, when asked for, follows)."""
    return [c.name for c in columns] + list(BOOKKEEPING)



# ---- one page ----------------------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class BucketPage:
    """A page of buckets read whole: its body, the next page's key and its headers."""

    body: Iterator[bytes]
    following: Position | None
    headers: dict[str, str]


_SETTINGS = ("SELECT set_config('jit', 'off', true),"
             " set_config('max_parallel_workers_per_gather', '0', true)")
"""For the page's statement only: JIT compiling its ~60 aggregates cost more than it saved, and
parallel workers sorted what one process reads in bucket order (docs/benchmarks.md)."""


def read_page(conn: psycopg.Connection, scan: queries.Scan, bucketing: Bucketing, start: datetime,
              end: datetime, local_tz: tzinfo | None) -> BucketPage:
    """Read one page of buckets (at most 10,000, so in one statement, plus one bucket for the
    next page's key) and format it; `start`/`end` are the listing's window."""
    interval = bucketing.resolve(start, end)
    columns = output_columns(scan.columns)
    source = stored_source(columns, interval) or "calibrated"
    local: str | int | None = None
    if scan.csv and local_tz is not None:
        offset = local_tz.utcoffset(None)
        local = local_tz.key if isinstance(local_tz, ZoneInfo) else (
            int(offset.total_seconds()) if offset else 0)
    stmt, params = statement(scan, columns, interval, source=source, limit=scan.limit + 1,
                             local=local)
    with conn.transaction(), conn.cursor(binary=True) as cur:
        cur.execute(_SETTINGS)
        # Never prepared: psycopg prepares a statement after its fifth run on a connection,
        # and PostgreSQL then switches to a generic plan, which cannot exclude chunks at plan
        # time and aggregated a year a third slower in CPU (docs/benchmarks.md). Planning
        # it for each request costs about 10 ms.
        rows = cur.execute(stmt, params, prepare=False).fetchall()
    if not rows and scan.device is not None:
        queries.find_device(conn, org=scan.org, name=scan.device)  # 404 when not the caller's
    following = None
    if len(rows) > scan.limit:
        following = Position(rows[scan.limit][-2], rows[scan.limit][-1])
        rows = rows[:scan.limit]
    names = header_names(columns)
    if scan.csv:
        buf = io.StringIO()
        out = csv.writer(buf, lineterminator="\n")
        out.writerow(names + (["local_time"] if local is not None else []))
        out.writerows(r[:-2] for r in rows)
        body: Iterator[bytes] = iter((buf.getvalue().encode(),))
    else:
        writer = render.JsonRows(names, local_tz)
        body = render.json_body(writer, rows, list, len(rows) + 1)
    return BucketPage(body, following, {"X-Aggregated-From": source,
                                        "X-Aggregation-Interval": interval.label})
