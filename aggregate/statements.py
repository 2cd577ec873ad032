"""Rollup SQL, generated from the column registry (shared.columns) with psycopg.sql.

Each rollup column's `rule`, `source` and `param` decide its aggregate expression; nothing here
names a data column. A recompute runs in four statements inside the caller's transaction:

1. `stage`: aggregate the calibrated rows of each bucket into a session temp table (one row per
   bucket that has readings). Buckets arrive as arrays (device, location, start, end, slots,
   zone) computed in Python by shared.timeutil, so a bucket is always [start, next start).
2. the caller reads the evapotranspiration inputs from the stage and writes back `et`, `etc`,
   `kc` and the water balance (aggregate.et, in Python);
3. `upsert`: insert or update the target rows from the stage, keeping `create_time`;
4. `delete_empty`: remove target rows of buckets that no longer have any reading.
"""

from __future__ import annotations

from functools import cache

from psycopg import sql
from psycopg.adapt import PyFormat

from shared.columns import TABLES, Column, Rollup, Table

# Rules computed in Python after the stage statement (aggregate.et and the kc schedule).
PYTHON_RULES = frozenset({Rollup.ET, Rollup.ETC, Rollup.KC, Rollup.WATER_BALANCE})
_BOOKKEEPING = frozenset({Rollup.CREATE_TIME, Rollup.UPDATE_TIME})
_KEYS = ("time", "device", "location")

# Stored unit of a rollup column vs. its source: only time units differ (lfw: minutes wet per
# 5-minute reading, summed to hours in `daily`).
_UNIT_SCALE = {("min", "min"): 1.0, ("min", "h"): 1 / 60}
SLOT_SECONDS = 300  # one calibrated reading covers 5 minutes
SLOTS_PER_HOUR = 3600 // SLOT_SECONDS
_COMPASS = ("N", "NNE", "NE", "ENE", "E", "ESE", "SE", "SSE",
            "S", "SSW", "SW", "WSW", "W", "WNW", "NW", "NNW")

# Extra stage columns next to the target table's own.
STAGE_EXTRA = (("bucket_end", "timestamptz"), ("slots", "integer"), ("tz", "text"),
               ("n", "integer"))


def stage_name(table: str) -> str:
    """Name of the session temp table that stages one recompute of `table`."""
    return f"_stage_{table}"


def _c(name: str) -> sql.Composable:
    return sql.SQL("c.{}").format(sql.Identifier(name))


def _src(col: Column) -> sql.Composable:
    assert col.source is not None, col
    return _c(col.source)


def _scaled(expr: sql.Composable, col: Column) -> sql.Composable:
    src_unit = TABLES["calibrated"].column(col.source or "").unit
    if col.unit == src_unit or src_unit is None or col.unit is None:
        return expr
    scale = _UNIT_SCALE.get((src_unit, col.unit))
    if scale is None:
        raise ValueError(f"no rule converts {src_unit} to {col.unit} for {col.name}")
    return sql.SQL("({} * {})").format(expr, sql.Literal(scale))


def _circular_mean(col: Column) -> sql.Composable:
    # Mean of unit vectors; identical aggregate calls are computed once per group by PostgreSQL.
    rad = sql.SQL("radians({})").format(_src(col))
    deg = sql.SQL("degrees(atan2(avg(sin({r})), avg(cos({r}))))").format(r=rad)
    # Rounded before the modulo so a mean a hair below 0 reads 0, not 360.
    return sql.SQL("mod(round(({d} + 360)::numeric, 6), 360)::float8").format(d=deg)


def _compass(col: Column) -> sql.Composable:
    names = sql.SQL(", ").join(sql.Literal(n) for n in _COMPASS)
    return sql.SQL("(ARRAY[{names}])[mod(floor(({deg} + 11.25) / 22.5)::int, 16) + 1]").format(
        names=names, deg=_circular_mean(col))


def _extreme(col: Column, *, of: str, pick: str, want_time: bool) -> sql.Composable:
    """Value of `col.source` (or the time) at the max/min of column `of`; earliest on ties.

    max()/min() over float8 arrays compare element by element: [value, +-epoch, companion].
    """
    epoch = sql.SQL("date_part('epoch', c.time)")
    signed = sql.SQL("-{}").format(epoch) if pick == "max" else epoch
    arr = sql.SQL("ARRAY[{of}::float8, {t}, {src}::float8]").format(
        of=_c(of), t=signed, src=_c(col.source or of))
    agg = sql.SQL("({fn}({arr}) FILTER (WHERE {of} IS NOT NULL))").format(
        fn=sql.SQL(pick), arr=arr, of=_c(of))
    if want_time:
        sign = sql.SQL("-") if pick == "max" else sql.SQL("")
        return sql.SQL("to_timestamp({s}{agg}[2])").format(s=sign, agg=agg)
    return sql.SQL("{agg}[3]").format(agg=agg)


def _local_hour(tz: sql.Composable) -> sql.Composable:
    # The instant the reading's local clock hour began: distinct for a repeated fall-back hour
    # and right for :30/:45 offsets.
    local = sql.SQL("(c.time AT TIME ZONE {})").format(tz)
    return sql.SQL("(c.time - ({l} - date_trunc('hour', {l})))").format(l=local)


def aggregate_expr(col: Column) -> sql.Composable:
    """The SQL expression computing rollup column `col` over calibrated rows `c` of bucket `b`."""
    rule = col.rollup
    if rule is Rollup.MEAN:
        return _scaled(sql.SQL("avg({})").format(_src(col)), col)
    if rule is Rollup.MIN:
        return _scaled(sql.SQL("min({})").format(_src(col)), col)
    if rule is Rollup.MAX:
        return _scaled(sql.SQL("max({})").format(_src(col)), col)
    if rule is Rollup.SUM:
        return _scaled(sql.SQL("sum({})").format(_src(col)), col)
    if rule is Rollup.CIRCULAR_MEAN:
        return _circular_mean(col)
    if rule is Rollup.COMPASS:
        return _compass(col)
    if rule is Rollup.MAX_RATE:
        return sql.SQL("(max({}) * {})").format(_src(col), sql.Literal(SLOTS_PER_HOUR))
    if rule is Rollup.TIME_OF_MAX:
        return _extreme(col, of=col.source or "", pick="max", want_time=True)
    if rule is Rollup.TIME_OF_MIN:
        return _extreme(col, of=col.source or "", pick="min", want_time=True)
    if rule is Rollup.AT_MAX_OF:
        return _extreme(col, of=str(col.param), pick="max", want_time=False)
    if rule is Rollup.AT_MIN_OF:
        return _extreme(col, of=str(col.param), pick="min", want_time=False)
    if rule is Rollup.ENERGY:
        # W/m2 (or umol/m2/s) x 300 s per reading, in MJ/m2 (mol/m2).
        return sql.SQL("(sum({}) * {} / 1e6)").format(_src(col), sql.Literal(SLOT_SECONDS))
    if rule is Rollup.HOURS_ABOVE:
        return sql.SQL("(count(*) FILTER (WHERE {s} > {p}))::float8 / {k}").format(
            s=_src(col), p=sql.Literal(float(col.param or 0)), k=sql.Literal(SLOTS_PER_HOUR))
    if rule is Rollup.HOURS_WITH_ANY:
        return sql.SQL("(count(DISTINCT {h}) FILTER (WHERE {s} > 0))::float8").format(
            h=_local_hour(sql.SQL("b.tz")), s=_src(col))
    if rule is Rollup.GDD:
        return sql.SQL("greatest(0, (max({s}) + min({s})) / 2 - {p})").format(
            s=_src(col), p=sql.Literal(float(col.param or 0)))
    if rule is Rollup.SAMPLE_PCT:
        return sql.SQL("count(*)::float8 / b.slots")
    if rule is Rollup.LOW_QUALITY:
        return sql.SQL("count(*)::float8 * 100 / b.slots < {}").format(
            sql.Placeholder("low_quality_pct"))
    raise ValueError(f"rule {rule} of {col.name} is not an SQL aggregate")


def _value_columns(t: Table) -> list[Column]:
    return [c for c in t.columns if c.rollup not in PYTHON_RULES | _BOOKKEEPING
            and c.name not in _KEYS]


@cache
def create_stage(table: str) -> sql.Composed:
    """CREATE TEMP TABLE IF NOT EXISTS for the stage of `table` (rows vanish at commit)."""
    extra = sql.SQL(", ").join(
        sql.SQL("{} {}").format(sql.Identifier(n), sql.SQL(t)) for n, t in STAGE_EXTRA)
    return sql.SQL(
        "CREATE TEMP TABLE IF NOT EXISTS {s} (LIKE {t} INCLUDING DEFAULTS, {extra})"
        " ON COMMIT DELETE ROWS").format(
        s=sql.Identifier(stage_name(table)), t=sql.Identifier(table), extra=extra)


@cache
def stage(table: str, *, by_location: bool) -> sql.Composed:
    """Aggregate each bucket of the arrays %(device)s ... %(tz)s into the stage of `table`.

    With `by_location` (local tables) a bucket reads only the readings taken at its location;
    otherwise (UTC `hourly`) every reading of the device, and the row carries the location of
    the bucket's latest reading.
    """
    t = TABLES[table]
    cols = _value_columns(t)
    names = [sql.Identifier(n) for n in ("time", "device", "location", "bucket_end", "slots",
                                         "tz", "n")]
    names += [sql.Identifier(c.name) for c in cols]
    if by_location:
        location: sql.Composable = sql.SQL("b.location")
        match = sql.SQL(" AND c.location = b.location")
    else:
        location = sql.SQL(
            "(SELECT x.location FROM calibrated x WHERE x.device = b.device"
            " AND x.time >= b.start AND x.time < b.end ORDER BY x.time DESC LIMIT 1)")
        match = sql.SQL("")
    exprs = [sql.SQL("b.start"), sql.SQL("b.device"), location, sql.SQL("b.end"),
             sql.SQL("b.slots"), sql.SQL("b.tz"), sql.SQL("count(*)")]
    exprs += [aggregate_expr(c) for c in cols]
    return sql.SQL(
        "INSERT INTO {s} ({names}) SELECT {exprs}"
        " FROM unnest(%(device)b::text[], %(location)b::uuid[], %(start)b::timestamptz[],"
        " %(end)b::timestamptz[], %(slots)b::int[], %(tz)b::text[])"
        " AS b(device, location, start, \"end\", slots, tz)"
        " JOIN calibrated c ON c.device = b.device AND c.time >= b.start AND c.time < b.end{m}"
        " GROUP BY b.device, b.location, b.start, b.end, b.slots, b.tz").format(
        s=sql.Identifier(stage_name(table)), names=sql.SQL(", ").join(names),
        exprs=sql.SQL(", ").join(exprs), m=match)


@cache
def stage_inputs(table: str, names: tuple[str, ...]) -> sql.Composed:
    """Rows of the stage with a location: keys, bucket end, zone and the named columns."""
    cols = sql.SQL(", ").join(sql.Identifier(n) for n in names)
    return sql.SQL(
        "SELECT device, time, bucket_end, location, tz, {cols} FROM {s}"
        " WHERE location IS NOT NULL").format(cols=cols, s=sql.Identifier(stage_name(table)))


@cache
def stage_update(table: str) -> sql.Composed:
    """Write the Python-computed columns (et, etc, kc, water balance) into the stage."""
    t = TABLES[table]
    py = [c for c in t.columns if c.rollup in PYTHON_RULES]
    sets = sql.SQL(", ").join(
        sql.SQL("{n} = v.{n}").format(n=sql.Identifier(c.name)) for c in py)
    arrays = sql.SQL(", ").join(
        sql.SQL("{}::float8[]").format(sql.Placeholder(c.name, PyFormat.BINARY)) for c in py)
    alias = sql.SQL(", ").join(sql.Identifier(c.name) for c in py)
    return sql.SQL(
        "UPDATE {s} s SET {sets} FROM unnest(%(device)b::text[], %(time)b::timestamptz[],"
        " {arrays}) AS v(device, time, {alias}) WHERE s.device = v.device AND s.time = v.time"
    ).format(s=sql.Identifier(stage_name(table)), sets=sets, arrays=arrays, alias=alias)


@cache
def python_columns(table: str) -> tuple[Column, ...]:
    """The columns of `table` computed in Python (ET and crop water), in registry order."""
    return tuple(c for c in TABLES[table].columns if c.rollup in PYTHON_RULES)


@cache
def upsert(table: str) -> sql.Composed:
    """Insert or update `table` from its stage; one row per (device, time), create_time kept.

    A bucket staged twice (the device moved mid-bucket between two zones whose buckets share
    a start) keeps the location with more readings.
    """
    t = TABLES[table]
    values = [c.name for c in t.columns if c.rollup not in _BOOKKEEPING]
    cols = sql.SQL(", ").join(sql.Identifier(n) for n in values + ["create_time",
                                                                    "update_time"])
    picks = sql.SQL(", ").join(sql.Identifier(n) for n in values)
    sets = sql.SQL(", ").join(
        sql.SQL("{n} = EXCLUDED.{n}").format(n=sql.Identifier(n))
        for n in values + ["update_time"] if n not in ("time", "device"))
    return sql.SQL(
        "INSERT INTO {t} ({cols}) SELECT DISTINCT ON (device, time) {picks}, now(), now()"
        " FROM {s} ORDER BY device, time, n DESC"
        " ON CONFLICT (device, time) DO UPDATE SET {sets}").format(
        t=sql.Identifier(table), cols=cols, picks=picks, sets=sets,
        s=sql.Identifier(stage_name(table)))


@cache
def delete_empty(table: str) -> sql.Composed:
    """Delete rows of `table` at (%(device)s, %(start)s) pairs that the stage has no row for."""
    return sql.SQL(
        "DELETE FROM {t} t USING unnest(%(device)b::text[], %(start)b::timestamptz[])"
        " AS e(device, start) WHERE t.device = e.device AND t.time = e.start"
        " AND NOT EXISTS (SELECT 1 FROM {s} s WHERE s.device = e.device"
        " AND s.time = e.start)").format(
        t=sql.Identifier(table), s=sql.Identifier(stage_name(table)))


@cache
def truncate_stage(table: str) -> sql.Composed:
    """Empty the stage of `table`."""
    return sql.SQL("TRUNCATE {}").format(sql.Identifier(stage_name(table)))


@cache
def rows_at_location(table: str) -> sql.Composed:
    """(device, time) of the rows of `table` at one location (%s)."""
    return sql.SQL("SELECT device, time FROM {} WHERE location = %s").format(
        sql.Identifier(table))


CLAIM = sql.SQL(
    "DELETE FROM rollup_dirty WHERE (rollup, device, bucket) IN ("
    " SELECT rollup, device, bucket FROM rollup_dirty WHERE rollup = %(rollup)s"
    " ORDER BY device, bucket LIMIT %(limit)s FOR UPDATE SKIP LOCKED)"
    " RETURNING device, bucket")
"""Claim up to %(limit)s marks of one rollup: SKIP LOCKED lets a second worker take others."""

CANDIDATE_LOCATIONS = sql.SQL(
    "SELECT m.device, m.bucket, l.id, l.tz_name FROM"
    " unnest(%(device)b::text[], %(bucket)b::timestamptz[]) AS m(device, bucket)"
    " CROSS JOIN LATERAL (SELECT DISTINCT c.location FROM calibrated c"
    "  WHERE c.device = m.device AND c.time >= m.bucket AND c.time < m.bucket + %(span)s"
    "  AND c.location IS NOT NULL) AS f"
    " JOIN locations l ON l.id = f.location")
"""Locations a device's readings carry just after each marked bucket start (with zones)."""
