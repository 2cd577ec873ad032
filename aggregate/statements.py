"""Rollup SQL, generated from the column registry (shared.columns) with psycopg.sql.

Each rollup column's `rule`, `source` and `param` decide what it needs from the raw rows;
nothing here names a data column. A recompute is two statements in the caller's transaction:

1. `load_partials_*`: one pass over the calibrated rows into **partial aggregates per cell**
   (session temp table `_sds_partials`): a cell is the piece of one UTC hour, one local hour
   and one UTC offset of the reading's zone (shared.timeutil.cells: one or two per UTC hour).
   A partial holds sums and counts, minima and maxima, sums of wind unit vectors, counts above
   thresholds and the extreme readings with their time and companions, all of which merge.
   Which cell holds a reading comes from the offset runs Python computed for each location
   (`_sds_segments`); the cells' local hours and days come from Python too (`_sds_cells`).
2. `write(table)`: merge the partials into `table`'s buckets, compute FAO-56 ET next to them
   (aggregate/et_statements.py, on the SQL functions of migrations 0061 and 0090), round
   every value to its column's precision, and
   write each row once (INSERT ... ON CONFLICT DO UPDATE, `create_time` kept); the same
   statement deletes the rows of named buckets that no longer have readings.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache

from psycopg import sql

from aggregate.coldrows import readings
from aggregate.et_statements import CELLS, PARTIALS, column_of, et_expr, rs_fill, so_far
from shared.columns import TABLES, Column, Rollup
from shared.units import stored_rounding

_BOOKKEEPING = frozenset({Rollup.CREATE_TIME, Rollup.UPDATE_TIME})
_KEYS = ("time", "device", "location")
WATER_RULES = frozenset({Rollup.ET, Rollup.ETC, Rollup.KC, Rollup.WATER_BALANCE})

# Stored unit of a rollup column vs. its source: only time units differ (lfw: minutes wet per
# 5-minute reading, summed to hours in `daily`).
_UNIT_SCALE = {("min", "min"): 1.0, ("min", "h"): 1 / 60}
SLOT_SECONDS = 300  # one calibrated reading covers 5 minutes
SLOTS_PER_HOUR = 3600 // SLOT_SECONDS
_COMPASS = ("N", "NNE", "NE", "ENE", "E", "ESE", "SE", "SSE",
            "S", "SSW", "SW", "WSW", "W", "WNW", "NW", "NNW")

SEGMENTS = "_sds_segments"


def _i(name: str) -> sql.Identifier:
    return sql.Identifier(name)


# ---- the partial state: which statistics each rule needs ------------------------------------

@dataclass(frozen=True, slots=True)
class Stat:
    """One partial statistic: its column in `_sds_partials`, how a cell computes it from raw
    rows `c`, and how cells merge it."""

    name: str
    sql_type: str
    per_cell: sql.Composable
    merge: str  # aggregate that merges cells: sum, min, max


def _src(name: str) -> sql.Composable:
    return sql.SQL("c.{}").format(_i(name))


def _extreme_companions() -> dict[tuple[str, str], tuple[str, ...]]:
    """(column of the extreme, max|min) -> companion columns read at that reading."""
    found: dict[tuple[str, str], list[str]] = {}
    for t in ("hourly", "local_hourly", "daily"):
        for c in TABLES[t].columns:
            if c.rollup in (Rollup.TIME_OF_MAX, Rollup.TIME_OF_MIN):
                found.setdefault((c.source or "", "max" if c.rollup is Rollup.TIME_OF_MAX
                                  else "min"), [])
            elif c.rollup in (Rollup.AT_MAX_OF, Rollup.AT_MIN_OF):
                key = (str(c.param), "max" if c.rollup is Rollup.AT_MAX_OF else "min")
                comp = found.setdefault(key, [])
                if c.source not in comp:
                    comp.append(c.source or "")
    return {k: tuple(v) for k, v in sorted(found.items())}


def _extreme_stat(of: str, pick: str, companions: tuple[str, ...]) -> Stat:
    # max()/min() over float8 arrays compare element by element: [value, +-epoch, companions]:
    # the extreme, then the earliest reading at it (epoch negated for max).
    epoch = sql.SQL("date_part('epoch', c.time)")
    parts = [sql.SQL("{}::float8").format(_src(of)),
             sql.SQL("-{}").format(epoch) if pick == "max" else epoch]
    parts += [sql.SQL("{}::float8").format(_src(n)) for n in companions]
    expr = sql.SQL("{fn}(ARRAY[{parts}]) FILTER (WHERE {of} IS NOT NULL)").format(
        fn=sql.SQL(pick), parts=sql.SQL(", ").join(parts), of=_src(of))
    return Stat(f"x{pick}_{of}", "float8[]", expr, pick)


ALL_TABLES = ("hourly", "local_hourly", "daily")


@cache
def stats(tables: tuple[str, ...] = ALL_TABLES) -> tuple[Stat, ...]:
    """Every partial statistic the rules of `tables` need, once each (a recompute of one
    table computes only its own; a backfill all of them)."""
    out: dict[str, Stat] = {
        "n": Stat("n", "bigint", sql.SQL("count(*)"), "sum"),
        "last": Stat("last", "timestamptz", sql.SQL("max(c.time)"), "max"),
    }

    def add(stat: Stat) -> None:
        out.setdefault(stat.name, stat)

    for t in tables:
        for c in TABLES[t].columns:
            s, rule = c.source or "", c.rollup
            if rule in (Rollup.MEAN, Rollup.SUM, Rollup.ENERGY):
                add(Stat(f"s_{s}", "float8", sql.SQL("sum({}::float8)").format(_src(s)), "sum"))
                # ENERGY: a partial day's hourly ET needs the hours' mean flux (et_statements).
                if rule in (Rollup.MEAN, Rollup.ENERGY):
                    add(Stat(f"n_{s}", "bigint", sql.SQL("count({})").format(_src(s)), "sum"))
            if rule in (Rollup.MIN, Rollup.GDD):
                add(Stat(f"lo_{s}", "float8", sql.SQL("min({})::float8").format(_src(s)),
                         "min"))
            # hi_ of an hour count: NULL when the source has no value in the bucket.
            if rule in (Rollup.MAX, Rollup.MAX_RATE, Rollup.GDD, Rollup.HOURS_WITH_ANY,
                        Rollup.HOURS_ABOVE):
                add(Stat(f"hi_{s}", "float8", sql.SQL("max({})::float8").format(_src(s)),
                         "max"))
            if rule in (Rollup.CIRCULAR_MEAN, Rollup.COMPASS):
                rad = sql.SQL("radians({})").format(_src(s))
                add(Stat(f"sin_{s}", "float8", sql.SQL("sum(sin({}))").format(rad), "sum"))
                add(Stat(f"cos_{s}", "float8", sql.SQL("sum(cos({}))").format(rad), "sum"))
            if rule is Rollup.HOURS_ABOVE:
                p = float(c.param or 0)
                add(Stat(f"above_{s}_{p:g}", "bigint", sql.SQL(
                    "count(*) FILTER (WHERE {} > {})").format(_src(s), sql.Literal(p)), "sum"))
    wanted = {(str(c.param) if c.rollup in (Rollup.AT_MAX_OF, Rollup.AT_MIN_OF) else c.source,
               "max" if c.rollup in (Rollup.TIME_OF_MAX, Rollup.AT_MAX_OF) else "min")
              for t in tables for c in TABLES[t].columns if c.rollup in (
                  Rollup.TIME_OF_MAX, Rollup.TIME_OF_MIN, Rollup.AT_MAX_OF, Rollup.AT_MIN_OF)}
    for (of, pick), companions in _extreme_companions().items():
        if (of, pick) in wanted:
            add(_extreme_stat(of, pick, companions))
    return tuple(out.values())


def _p(name: str) -> sql.Composable:
    return sql.SQL("p.{}").format(_i(name))


def _merged(name: str) -> sql.Composable:
    stat = next(s for s in stats() if s.name == name)
    return sql.SQL("{}({})").format(sql.SQL(stat.merge), _p(name))


# ---- temp tables --------------------------------------------------------------------------

TEMP_EXISTS = sql.SQL(
    "SELECT to_regclass({}) IS NOT NULL, set_config('work_mem', '64MB', true),"
    " set_config('jit', 'off', true)").format(sql.Literal(f"pg_temp.{PARTIALS}"))
"""Whether this session has its work tables (a cheap check; CREATE ... IF NOT EXISTS of three
tables took 6 ms), and the transaction's settings in the same round trip: work_mem so a backfill
piece's groups fit in memory; JIT off, since compiling the ~100 aggregate expressions costs more
than it saves."""


@cache
def create_temp() -> sql.Composed:
    """The session's work tables (rows vanish at commit): partials, offset runs, cells."""
    cols = sql.SQL(", ").join(sql.SQL("{} {}").format(_i(s.name), sql.SQL(s.sql_type))
                              for s in stats())
    return sql.SQL(
        "CREATE TEMP TABLE IF NOT EXISTS {p} (device text NOT NULL, location uuid,"
        " cell timestamptz NOT NULL, {cols}) ON COMMIT DELETE ROWS;"
        " CREATE TEMP TABLE IF NOT EXISTS {s} (location uuid NOT NULL, lo timestamptz NOT NULL,"
        " hi timestamptz NOT NULL, shift interval NOT NULL) ON COMMIT DELETE ROWS;"
        " CREATE TEMP TABLE IF NOT EXISTS {c} (tz text NOT NULL, start timestamptz NOT NULL,"
        " lh_start timestamptz NOT NULL, lh_end timestamptz NOT NULL, day date NOT NULL,"
        " day_start timestamptz NOT NULL, day_end timestamptz NOT NULL)"
        " ON COMMIT DELETE ROWS").format(
        p=_i(PARTIALS), s=_i(SEGMENTS), c=_i(CELLS), cols=cols)


CLEAR_TEMP = sql.SQL("TRUNCATE {}, {}, {}").format(_i(PARTIALS), _i(SEGMENTS), _i(CELLS))
DELETE_TEMP = sql.SQL("DELETE FROM {}; DELETE FROM {}; DELETE FROM {}").format(
    _i(PARTIALS), _i(SEGMENTS), _i(CELLS))

LOAD_CELLS = sql.SQL(
    "WITH cells AS (INSERT INTO {c} SELECT * FROM unnest(%(tz)b::text[],"
    " %(start)b::timestamptz[], %(lh_start)b::timestamptz[], %(lh_end)b::timestamptz[],"
    " %(day)b::date[], %(day_start)b::timestamptz[], %(day_end)b::timestamptz[]) RETURNING 1)"
    " INSERT INTO {s} SELECT l.id, z.lo, z.hi, make_interval(secs => z.shift)"
    " FROM unnest(%(run_tz)b::text[], %(lo)b::timestamptz[], %(hi)b::timestamptz[],"
    " %(shift)b::int[]) AS z(tz, lo, hi, shift) JOIN locations l ON l.tz_name = z.tz"
).format(c=_i(CELLS), s=_i(SEGMENTS))
"""Cells of zones as computed by shared.timeutil.cells, and the zones' offset runs for every
location in them, in one statement (a data-modifying WITH runs whether read or not; binary
arrays: text arrays took longer to quote than the
statement to run). A local hour starts where the UTC clock, shifted by `shift`, starts an hour,
or at the run's start (an offset change)."""


def _cell_of_reading() -> sql.Composable:
    # The cell holding reading c: the latest of its UTC hour start, its local hour start at the
    # run's offset, and the run's start (an offset change). Readings without a location
    # (s.* NULL) get their UTC hour.
    return sql.SQL("greatest(time_bucket('1 hour', c.time),"
                   " time_bucket('1 hour', c.time, s.shift), s.lo)")


def _load(source: sql.Composable, where: sql.Composable, tables: tuple[str, ...]
          ) -> sql.Composed:
    names = sql.SQL(", ").join(_i(s.name) for s in stats(tables))
    exprs = sql.SQL(", ").join(s.per_cell for s in stats(tables))
    return sql.SQL(
        "INSERT INTO {p} (device, location, cell, {names})"
        " SELECT c.device, c.location, {cell}, {exprs} FROM {source}"
        " LEFT JOIN {s} s ON s.location = c.location AND c.time >= s.lo AND c.time < s.hi"
        "{where} GROUP BY 1, 2, 3").format(
        p=_i(PARTIALS), names=names, cell=_cell_of_reading(), exprs=exprs, source=source,
        s=_i(SEGMENTS), where=where)


@cache
def load_partials_buckets(table: str, cold: bool = False) -> sql.Composed:
    """Partials for `table` of the readings in the buckets %(device)s/%(location)s/%(start)s/
    %(end)s (arrays): each bucket is one index range scan on (device, time); for the local
    tables only the readings taken at the bucket's location."""
    by_location = table != "hourly"
    match = sql.SQL(" AND c.location = b.location") if by_location else sql.SQL("")
    source = sql.SQL(
        "unnest(%(device)b::text[], %(location)b::uuid[], %(start)b::timestamptz[],"
        " %(end)b::timestamptz[]) AS b(device, location, start, \"end\")"
        " JOIN {r} c ON c.device = b.device AND c.time >= b.start AND c.time < b.end{m}"
    ).format(m=match, r=readings(cold))
    return _load(source, sql.SQL(""), (table,))


@cache
def load_partials_range(tables: tuple[str, ...] = ALL_TABLES, cold: bool = False
                        ) -> sql.Composed:
    """Partials of every reading in [%(lo)s, %(hi)s), of the devices %(devices)s (NULL: all)
    in worker share %(share)s of %(shares)s (hash of the device name; bigint, since abs() of the
    smallest integer hashtext can return overflows an integer)."""
    where = sql.SQL(
        " WHERE c.time >= %(lo)s AND c.time < %(hi)s"
        " AND (%(devices)s::text[] IS NULL OR c.device = ANY(%(devices)s::text[]))"
        " AND (%(shares)s::int = 1 OR abs(hashtext(c.device)::bigint) %% %(shares)s::int"
        " = %(share)s::int)")
    return _load(sql.SQL("{} c").format(readings(cold)), where, tables)


UNMATCHED_CELLS = sql.SQL(
    "(SELECT count(*) FROM {p} p JOIN locations l ON l.id = p.location"
    " LEFT JOIN {c} z ON z.tz = l.tz_name AND z.start = p.cell WHERE z.start IS NULL)"
).format(p=_i(PARTIALS), c=_i(CELLS))
"""Partials whose cell the cell table does not hold (a mismatch of the two time rules): the
local tables' write returns it, and a recompute that finds any fails."""


# ---- merging partials into a table's buckets ------------------------------------------------

def _scaled(expr: sql.Composable, col: Column) -> sql.Composable:
    src_unit = TABLES["calibrated"].column(col.source or "").unit
    if col.unit == src_unit or src_unit is None or col.unit is None:
        return expr
    scale = _UNIT_SCALE.get((src_unit, col.unit))
    if scale is None:
        raise ValueError(f"no rule converts {src_unit} to {col.unit} for {col.name}")
    return sql.SQL("({} * {})").format(expr, sql.Literal(scale))


def _direction() -> sql.Composable:
    return sql.SQL("degrees(atan2({}, {}))")


_HOUR_SLOTS = sql.SQL("12")


def aggregate_expr(col: Column, slots: sql.Composable = _HOUR_SLOTS) -> sql.Composable:
    """How column `col` of a bucket merges from its cells' partials `p` (unrounded); `slots`
    is the bucket's number of 5-minute slots."""
    rule, s = col.rollup, col.source or ""
    if rule is Rollup.MEAN:
        return _scaled(sql.SQL("({} / nullif({}, 0))").format(
            _merged(f"s_{s}"), _merged(f"n_{s}")), col)
    if rule is Rollup.MIN:
        return _scaled(_merged(f"lo_{s}"), col)
    if rule is Rollup.MAX:
        return _scaled(_merged(f"hi_{s}"), col)
    if rule is Rollup.SUM:
        return _scaled(_merged(f"s_{s}"), col)
    if rule in (Rollup.CIRCULAR_MEAN, Rollup.COMPASS):
        # Mean of unit vectors, in [0, 360).
        deg = sql.SQL("(degrees(atan2({}, {})) + 360)").format(
            _merged(f"sin_{s}"), _merged(f"cos_{s}"))
        if rule is Rollup.COMPASS:
            names = sql.SQL(", ").join(sql.Literal(n) for n in _COMPASS)
            return sql.SQL("(ARRAY[{names}])[mod(floor((mod(round({d}::numeric, 6), 360)"
                           "::float8 + 11.25) / 22.5)::int, 16) + 1]").format(names=names, d=deg)
        return deg  # taken mod 360 after rounding (see _rounded), so 359.96 reads 0.0
    if rule is Rollup.MAX_RATE:
        return sql.SQL("({} * {})").format(_merged(f"hi_{s}"), sql.Literal(SLOTS_PER_HOUR))
    if rule in (Rollup.TIME_OF_MAX, Rollup.TIME_OF_MIN, Rollup.AT_MAX_OF, Rollup.AT_MIN_OF):
        pick = "max" if rule in (Rollup.TIME_OF_MAX, Rollup.AT_MAX_OF) else "min"
        of = s if rule in (Rollup.TIME_OF_MAX, Rollup.TIME_OF_MIN) else str(col.param)
        arr = sql.SQL("({})").format(_merged(f"x{pick}_{of}"))
        if rule in (Rollup.TIME_OF_MAX, Rollup.TIME_OF_MIN):
            sign = sql.SQL("-") if pick == "max" else sql.SQL("")
            return sql.SQL("to_timestamp({}{}[2])").format(sign, arr)
        k = _extreme_companions()[(of, pick)].index(s) + 3
        return sql.SQL("{}[{}]").format(arr, sql.Literal(k))
    if rule is Rollup.ENERGY:
        # W/m2 (or umol/m2/s) x 300 s per reading, in MJ/m2 (mol/m2).
        return sql.SQL("({} * {} / 1e6)").format(_merged(f"s_{s}"), sql.Literal(SLOT_SECONDS))
    # Hour counts are NULL, not 0, when the source has no value in the bucket (a station
    # without a rain gauge has no precip_hours).
    if rule is Rollup.HOURS_ABOVE:
        return sql.SQL("CASE WHEN {} IS NOT NULL THEN {}::float8 / {} END").format(
            _merged(f"hi_{s}"), _merged(f"above_{s}_{float(col.param or 0):g}"),
            sql.Literal(SLOTS_PER_HOUR))
    if rule is Rollup.HOURS_WITH_ANY:
        # Local clock hours with any amount: each counted at its first such cell (a window in
        # `_buckets` marks it; count(DISTINCT) sorted every group on its own).
        return sql.SQL("CASE WHEN {} IS NOT NULL THEN (count(*) FILTER (WHERE p.{}))::float8"
                       " END").format(_merged(f"hi_{s}"), _i(f"first_any_{s}"))
    if rule is Rollup.GDD:
        # NULL without a temperature reading, like the hour counts: GREATEST ignores NULL, so
        # greatest(0, NULL) alone would serve 0.0 degree days for a day with no thermometer.
        return sql.SQL("CASE WHEN {hi} IS NOT NULL THEN greatest(0, ({hi} + {lo}) / 2 - {b})"
                       " END").format(hi=_merged(f"hi_{s}"), lo=_merged(f"lo_{s}"),
                                      b=sql.Literal(float(col.param or 0)))
    if rule is Rollup.SAMPLE_PCT:
        return sql.SQL("(sum(p.n)::float8 / {})").format(slots)
    if rule is Rollup.LOW_QUALITY:
        return sql.SQL("(sum(p.n)::float8 * 100 / {} < %(low_quality_pct)s::float8)").format(
            slots)
    raise ValueError(f"rule {rule} of {col.name} is not a merge of partials")


def _rounded(expr: sql.Composable, col: Column) -> sql.Composable:
    """`expr` rounded to the decimals that give `col` its declared precision in every unit
    (float8 round: half to even, as the API's conversion rounds)."""
    rounded = stored_rounding(expr, col)  # text columns pass through
    if col.rollup is Rollup.CIRCULAR_MEAN:
        return sql.SQL("mod({}::numeric, 360)::float8").format(rounded)
    return rounded


def _value_columns(table: str) -> list[Column]:
    return [c for c in TABLES[table].columns
            if c.rollup not in WATER_RULES | _BOOKKEEPING and c.name not in _KEYS]


def _buckets(table: str) -> sql.Composable:
    """GROUP BY source of `table`'s buckets: partials `p` (with cells `z` for local tables),
    yielding time, device, location, b_end, b_slots and (local) day."""
    value_cols = _value_columns(table)
    if table == "hourly":
        exprs = sql.SQL(", ").join(sql.SQL("{} AS {}").format(aggregate_expr(c), _i(c.name))
                                   for c in value_cols)
        # The row's location is that of the hour's latest reading: the partial with the
        # latest reading names it (a window over the partials, not an ordered aggregate,
        # which would sort every group on its own).
        return sql.SQL(
            "SELECT p.hour AS time, p.device, p.latest AS location,"
            " p.hour + interval '1 hour' AS b_end, sum(p.n) AS n, NULL::date AS day, {exprs}"
            " FROM (SELECT q.*, time_bucket('1 hour', q.cell) AS hour,"
            "  first_value(q.location) OVER (PARTITION BY q.device, time_bucket('1 hour', q.cell)"
            "  ORDER BY q.last DESC) AS latest FROM {p} q) p"
            " GROUP BY p.hour, p.device, p.latest").format(exprs=exprs, p=_i(PARTIALS))
    start, end = ("lh_start", "lh_end") if table == "local_hourly" else ("day_start",
                                                                          "day_end")
    slots = sql.SQL("(date_part('epoch', p.{e} - p.{s}) / {slot})::int").format(
        s=_i(start), e=_i(end), slot=sql.Literal(SLOT_SECONDS))
    exprs = sql.SQL(", ").join(sql.SQL("{} AS {}").format(aggregate_expr(c, slots), _i(c.name))
                               for c in value_cols)
    # For each "hours with any" column, whether a cell is the first of its local hour with
    # any amount (a local hour holds one or two cells).
    firsts = [sql.SQL(
        ", q.{hi} > 0 AND NOT coalesce(bool_or(q.{hi} > 0) OVER (PARTITION BY q.device,"
        " q.location, z.lh_start ORDER BY q.cell ROWS BETWEEN UNBOUNDED PRECEDING AND"
        " 1 PRECEDING), false) AS {name}").format(
        hi=_i(f"hi_{c.source}"), name=_i(f"first_any_{c.source}"))
        for c in value_cols if c.rollup is Rollup.HOURS_WITH_ANY]
    return sql.SQL(
        "SELECT p.{s} AS time, p.device, p.location, p.{e} AS b_end, sum(p.n) AS n,"
        " min(p.day) AS day, {exprs}"
        " FROM (SELECT q.*, z.{s}, z.{e}, z.day{firsts} FROM {p} q"
        "  JOIN locations l ON l.id = q.location"
        "  JOIN {c} z ON z.tz = l.tz_name AND z.start = q.cell) p"
        " GROUP BY p.{s}, p.device, p.location, p.{e}").format(
        s=_i(start), e=_i(end), exprs=exprs, p=_i(PARTIALS), c=_i(CELLS),
        firsts=sql.SQL("").join(firsts))


@cache
def write(table: str, *, scope: str) -> sql.Composed:
    """Merge the partials into `table` and write each bucket once; delete stale rows.

    Rows come from the partials' buckets whose start lies in [%(lo)s, %(hi)s) and whose end is
    after %(after)s (NULL: no bound). The same statement deletes the rows of `table` that no
    write touched: with scope "pairs" at the (%(device)s, %(start)s) pairs; with scope "range"
    every row starting in [%(del_lo)s, %(del_hi)s) of
    the devices %(devices)s (NULL: all) in worker share %(share)s of %(shares)s. A bucket found
    at two locations (a device moved between zones whose buckets share a start) keeps the
    location with more readings. Returns one row: (rows written, rows deleted, partials
    outside every cell: must be 0).
    """
    t = TABLES[table]
    daily = table == "daily"
    local_date = (sql.SQL("a.day") if table != "hourly"
                  else sql.SQL("(a.time AT TIME ZONE l.tz_name)::date"))
    values: list[tuple[str, sql.Composable]] = []
    for c in t.columns:
        if c.rollup in _BOOKKEEPING:
            continue
        if c.name in _KEYS:
            values.append((c.name, sql.SQL("a.{}").format(_i(c.name))))
        elif c.rollup is Rollup.ET:
            values.append((c.name, _rounded(sql.SQL("a.et"), c)))
        elif c.rollup is Rollup.ETC:
            values.append((c.name, _rounded(sql.SQL("a.et * a.kc"), c)))
        elif c.rollup is Rollup.KC:
            values.append((c.name, _rounded(sql.SQL("a.kc"), c)))
        elif c.rollup is Rollup.WATER_BALANCE:
            precip = sql.SQL("a.{}").format(_i(column_of(table, Rollup.SUM, "precip")))
            values.append((c.name, _rounded(
                sql.SQL("({} - a.et * a.kc)").format(precip), c)))
        else:
            values.append((c.name, _rounded(sql.SQL("a.{}").format(_i(c.name)), c)))
    names = sql.SQL(", ").join(_i(n) for n, _ in values)
    exprs = sql.SQL(", ").join(e for _, e in values)
    sets = sql.SQL(", ").join(sql.SQL("{n} = EXCLUDED.{n}").format(n=_i(n))
                              for n, _ in values if n not in ("time", "device"))
    if scope == "pairs":
        stale = sql.SQL(
            "DELETE FROM {t} r USING unnest(%(device)b::text[], %(start)b::timestamptz[])"
            " AS e(device, start) WHERE r.device = e.device AND r.time = e.start"
            " AND NOT EXISTS (SELECT 1 FROM w WHERE w.device = e.device AND w.time = e.start)"
        ).format(t=_i(table))
    elif scope == "range":
        stale = sql.SQL(
            "DELETE FROM {t} r WHERE r.time >= %(del_lo)s AND r.time < %(del_hi)s"
            " AND (%(devices)s::text[] IS NULL OR r.device = ANY(%(devices)s::text[]))"
            " AND (%(shares)s::int = 1 OR abs(hashtext(r.device)::bigint) %% %(shares)s::int"
            " = %(share)s::int)"
            " AND NOT EXISTS (SELECT 1 FROM w WHERE w.device = r.device AND w.time = r.time)"
        ).format(t=_i(table))
    else:
        raise ValueError(scope)
    return sql.SQL(
        "WITH kcs AS (SELECT location_id, start_date, kc::float8 AS kc, lead(start_date, 1,"
        "  'infinity') OVER (PARTITION BY location_id ORDER BY start_date) AS until"
        "  FROM crop_coefficients),{so_far}"
        " w AS (INSERT INTO {t} ({names}, create_time, update_time)"
        "  SELECT DISTINCT ON (a.device, a.time) {exprs}, now(), now()"
        "  FROM (SELECT a.*, {et} AS et, coalesce(kcs.kc, l.kc::float8) AS kc"
        "   FROM ({buckets}) a LEFT JOIN locations l ON l.id = a.location"
        "   LEFT JOIN kcs ON kcs.location_id = a.location AND {d} >= kcs.start_date"
        "    AND {d} < kcs.until{join_so_far}"
        "   WHERE (%(lo)s::timestamptz IS NULL OR a.time >= %(lo)s)"
        "    AND (%(hi)s::timestamptz IS NULL OR a.time < %(hi)s)"
        "    AND (%(after)s::timestamptz IS NULL OR a.b_end > %(after)s)"
        "   OFFSET 0) a"  # OFFSET 0: ET computed once per row, not once per use
        "  ORDER BY a.device, a.time, a.n DESC"
        "  ON CONFLICT (device, time) DO UPDATE SET {sets}, update_time = EXCLUDED.update_time"
        "  RETURNING device, time),"
        " gone AS ({stale} RETURNING 1)"
        " SELECT (SELECT count(*) FROM w), (SELECT count(*) FROM gone), {unmatched}").format(
        unmatched=UNMATCHED_CELLS if table != "hourly" else sql.SQL("0"),
        t=_i(table), names=names, exprs=exprs, buckets=_buckets(table), d=local_date,
        et=et_expr(table), sets=sets, stale=stale,
        so_far=sql.SQL(" so_far AS ({}), rs_fill AS ({}),").format(so_far(), rs_fill())
        if daily else sql.SQL(""),
        join_so_far=sql.SQL(" LEFT JOIN so_far s ON s.device = a.device"
                            " AND s.location = a.location AND s.day_start = a.time"
                            " LEFT JOIN rs_fill f ON f.device = a.device"
                            " AND f.location = a.location AND f.day_start = a.time")
        if daily else sql.SQL(""))


CLAIM = sql.SQL(
    "DELETE FROM rollup_dirty WHERE (rollup, device, bucket) IN ("
    " SELECT rollup, device, bucket FROM rollup_dirty WHERE rollup = %(rollup)s"
    " ORDER BY device, bucket LIMIT %(limit)s FOR UPDATE SKIP LOCKED)"
    " RETURNING device, bucket")
"""Claim up to %(limit)s marks of one rollup: SKIP LOCKED lets a second worker take others."""

@cache
def candidate_locations(cold: bool = False) -> sql.Composed:
    """Locations a device's readings carry just after each marked bucket start (with zones)."""
    return sql.SQL(
        "SELECT m.device, m.bucket, l.id, l.tz_name FROM"
        " unnest(%(device)b::text[], %(bucket)b::timestamptz[]) AS m(device, bucket)"
        " CROSS JOIN LATERAL (SELECT DISTINCT c.location FROM {r} c"
        "  WHERE c.device = m.device AND c.time >= m.bucket AND c.time < m.bucket + %(span)s"
        "  AND c.location IS NOT NULL) AS f"
        " JOIN locations l ON l.id = f.location").format(r=readings(cold))

