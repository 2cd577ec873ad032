"""Aggregated `/data/calibrated` pages (`interval`, `points`: serve.aggregation) across the
cold tier, answering exactly as an all-hot page: the same bucket edges (UTC, or each reading's
local zone by PostgreSQL's rules), values, units, `local_time`, CSV, cursor and stored-rollup
shortcut (a stored `hourly`/`daily` row is used when its count equals the readings now in its
bucket, hot and cold).

The cold readings of the page's window are read with pyarrow from the organisation's readable
files (shared.coldstore), only the columns the buckets need; rows of devices the caller does
not see (another team's) and rows that also exist hot (the hot copy wins) are dropped; then
they are pre-aggregated per bucket, device and location into partials each rule can merge: a
count and a float8 sum (mean: the sum over the count, as `avg` computes it), a sum, a lowest, a
highest, sums of sines and cosines (circular mean), the readings and the newest time (for the
bucket's location). The page's SQL computes the same partials from its hot rows, merges both
per bucket and applies the registry's formulas, so a bucket half hot and half cold is whole.
A local day or week's edges come from PostgreSQL (`time_bucket` in the location's zone), so
Python never applies time zone rules of its own.

A float8 sum of float32 readings (24-bit mantissas) is exact while a bucket's nonzero values
span fewer than 29 - log2(readings) binary orders of magnitude (18 for a week of 5-minute
readings), so merged partials give the very mean and total the hot page gives, in whatever
order they are added; sines and cosines may differ from PostgreSQL's in the last bit, far
below the tenth of a degree the answer is rounded to.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from datetime import datetime, timedelta
from typing import Any

import numpy as np
import psycopg
import pyarrow as pa
import pyarrow.compute as pc
from psycopg import sql

from serve.coldread import files, joined
from serve.queries import ColdRows, Scan
from shared.coldstore import open_store
from shared.columns import Column, Rollup

_UTC = pa.timestamp("us", tz="UTC")
_SUM = pc.ScalarAggregateOptions(min_count=1)  # a sum of no values is NULL, as in SQL


def reading_names(columns: Iterable[Column]) -> tuple[str, ...]:
    """The reading columns the buckets of `columns` (aggregation.output_columns) need."""
    names = ["time", "device", "location"]
    names += [c.source for c in columns if c.source and c.rollup is not Rollup.KEY]
    return tuple(dict.fromkeys(names))


def _filter(scan: Scan, lo: datetime, hi: datetime) -> pc.Expression:
    time, device = pc.field("time"), pc.field("device")
    expr = (time >= pa.scalar(lo, _UTC)) & (time < pa.scalar(hi, _UTC))
    if scan.device is not None:
        expr &= device == scan.device
    if scan.devices is not None:
        expr &= device.isin(list(scan.devices))
    if scan.location is not None:
        expr &= pc.field("location") == str(scan.location)
    if scan.only_devices is not None and scan.device is None:
        expr &= device.isin(list(scan.only_devices))
    return expr


def _partial_columns(col: Column) -> tuple[tuple[str, str], ...]:
    """(partial name, kind) of one output column: what its rule merges."""
    kinds = {Rollup.MEAN: ("sum", "count"), Rollup.SUM: ("sum",), Rollup.MIN: ("min",),
             Rollup.MAX: ("max",), Rollup.CIRCULAR_MEAN: ("sin", "cos")}[col.rollup]
    return tuple((f"{col.name}__{k}", k) for k in kinds)


def attach(conn: psycopg.Connection, scan: Scan, window: tuple[datetime, datetime],
           columns: Iterable[Column], width: timedelta, local: bool, cold_path: str) -> Scan:
    """`scan` with the partials of every cold reading of `window` ([lo, hi),
    aggregation.reading_window) per bucket of `width` (`local`: local days or weeks) for the
    output `columns`, or unchanged when no cold file overlaps it. pyarrow's errors (a file
    missing or unreadable) propagate: serve.coldtier answers them."""
    lo, hi = window
    if scan.table.name != "calibrated":
        return dataclasses.replace(scan, cold=None)
    found = files(conn, scan.org, lo, hi)
    if not found:
        return dataclasses.replace(scan, cold=None)
    columns = tuple(c for c in columns if c.rollup is not Rollup.KEY)
    table = open_store(cold_path).dataset(rel for _, rel in found).to_table(
        columns=list(reading_names(columns)), filter=_filter(scan, lo, hi))
    table = _kept(conn, table)
    ids = tuple(i for i, _ in found)
    if not table.num_rows:
        return dataclasses.replace(scan, cold=ColdRows(ids, {}))
    span = pc.min_max(table.column("time")).as_py()
    devices = tuple(pc.unique(table.column("device")).to_pylist())
    parts = _partials(table, columns, _buckets(conn, table, width, local, lo, hi))
    arrays = {name: joined(parts.column(name)) for name in parts.column_names}
    return dataclasses.replace(scan, cold=ColdRows(ids, arrays, span["min"], span["max"],
                                                   devices))


def _kept(conn: psycopg.Connection, table: pa.Table) -> pa.Table:
    """The rows of `table` of devices the caller sees and with no hot copy."""
    seen = pc.unique(table.column("device")).to_pylist()
    visible = [r[0] for r in conn.execute("SELECT name FROM devices WHERE name = ANY(%s)",
                                          (seen,)).fetchall()] if seen else []
    table = table.filter(pc.field("device").isin(visible)) if visible else table.slice(0, 0)
    if not table.num_rows:
        return table
    span = pc.min_max(table.column("time")).as_py()
    hot = conn.execute(
        "SELECT device, time FROM calibrated WHERE time >= %s AND time <= %s"
        " AND device = ANY(%s)", (span["min"], span["max"], visible)).fetchall()
    if not hot:
        return table
    keys = pa.table({"device": pa.array([r[0] for r in hot], pa.string()),
                     "time": pa.array([r[1] for r in hot], _UTC)})
    return table.join(keys, ["device", "time"], join_type="left anti")


def _buckets(conn: psycopg.Connection, table: pa.Table, width: timedelta, local: bool,
             lo: datetime, hi: datetime) -> tuple[np.ndarray, list[str]]:
    """Each row's bucket start (epoch microseconds) and zone name, as the page's SQL buckets
    it: `time_bucket(width, time)` on the UTC clock, or in the zone of the row's location."""
    micros = table.column("time").cast(pa.int64()).to_numpy()
    step = int(width / timedelta(microseconds=1))
    if not local:
        return (micros // step) * step, ["UTC"] * len(micros)
    places = table.column("location").to_pylist()
    known: dict[str, str] = dict(conn.execute(
        "SELECT id::text, tz_name FROM locations WHERE id = ANY(%s::uuid[])",
        ([p for p in set(places) if p is not None],)).fetchall())
    zones = [known.get(p, "UTC") if p is not None else "UTC" for p in places]
    starts = np.empty(len(micros), dtype=np.int64)
    names = np.array(zones, dtype=object)
    for tz in set(zones):
        # Every bucket lasts at least 23 hours: hourly samples name every edge in the window.
        edges = [r[0] for r in conn.execute(
            "SELECT DISTINCT time_bucket(%s, g, %s) AS e FROM generate_series("
            " %s::timestamptz - %s - interval '2 hours', %s::timestamptz + interval '1 hour',"
            " interval '1 hour') g ORDER BY e", (width, tz, lo, width, hi)).fetchall()]
        edge_us = np.array([int(e.timestamp()) * 1_000_000 for e in edges], dtype=np.int64)
        rows = names == tz
        starts[rows] = edge_us[np.searchsorted(edge_us, micros[rows], side="right") - 1]
    return starts, zones


def _partials(table: pa.Table, columns: tuple[Column, ...],
              buckets: tuple[np.ndarray, list[str]]) -> pa.Table:
    """One row per (bucket, device, location): the readings, the newest time and each output
    column's partials (_partial_columns)."""
    starts, zones = buckets
    work = {"time": pa.array(starts, pa.int64()).cast(_UTC), "device": table.column("device"),
            "location": table.column("location"), "tz": pa.array(zones, pa.string()),
            "at": table.column("time")}
    aggs: list[tuple[Any, ...]] = [([], "count_all"), ("at", "max")]
    names = {"count_all": "n", "at_max": "last_t"}  # pyarrow's output name -> ours
    for col in columns:
        # float64 (exact) before printing: a float32's shortest text read as float8 is not it.
        values = table.column(col.source or col.name).cast(pa.float64())
        for name, kind in _partial_columns(col):
            if kind in ("sin", "cos"):
                radians = np.radians(values.to_numpy(zero_copy_only=False))
                work[name] = pa.array(np.sin(radians) if kind == "sin" else np.cos(radians),
                                      mask=values.is_null().to_numpy(zero_copy_only=False))
                aggs.append((name, "sum", _SUM))
            else:
                work[name] = values
                aggs.append((name, kind, _SUM) if kind == "sum" else (name, kind))
            names[f"{name}_{'sum' if kind in ('sin', 'cos') else kind}"] = name
    grouped = pa.table(work).group_by(["time", "device", "location", "tz"],
                                      use_threads=False).aggregate(aggs)
    out = {k: grouped.column(k) for k in ("time", "device", "location", "tz")}
    out.update({ours: grouped.column(theirs) for theirs, ours in names.items()})
    return pa.table(out)


def partials(scan: Scan) -> bool:
    """Whether `scan` carries cold partials to merge."""
    return scan.cold is not None and bool(scan.cold.arrays)


_TYPES = {"time": "timestamptz", "device": "text", "location": "uuid", "tz": "text",
          "n": "int8", "last_t": "timestamptz"}


def _cold(scan: Scan) -> sql.Composable:
    """The cold partials as a relation `c` (only of devices the caller sees, as the
    hypertables' own policy would filter their rows)."""
    assert scan.cold is not None
    names = list(scan.cold.arrays)
    cols = sql.SQL(", ").join(sql.Identifier(n) for n in names)
    arrays = sql.SQL(", ").join(
        sql.SQL("string_to_array({}, ',', '')::{}[]").format(
            sql.Placeholder(f"cold_{n}"), sql.SQL(_TYPES.get(n, "float8"))) for n in names)
    return sql.SQL("(SELECT * FROM unnest({}) AS c({}) WHERE c.device IN"
                   " (SELECT name FROM devices)) c").format(arrays, cols)


def counts(scan: Scan, start: sql.Composable, join: sql.Composable, where: sql.Composable,
           ) -> sql.Composable:
    """The readings per bucket and device (aggregation._from_stored's `counts`): the hot ones
    counted in SQL, plus the cold partials' counts."""
    hot = sql.SQL("SELECT {} AS time, t.device, count(*)::int AS n FROM calibrated t{}"
                  " WHERE {} GROUP BY 1, 2").format(start, join, where)
    if not partials(scan):
        return hot
    return sql.SQL("SELECT time, device, sum(n)::int AS n FROM ({} UNION ALL SELECT c.time,"
                   " c.device, c.n FROM {}) k GROUP BY 1, 2").format(hot, _cold(scan))


def _hot_partial(col: Column, name: str, kind: str) -> sql.Composable:
    ref = sql.SQL("t.{}").format(sql.Identifier(col.source or col.name))
    expr = {"sum": "sum({}::float8)", "count": "count({})", "min": "min({})::float8",
            "max": "max({})::float8", "sin": "sum(sin(radians({})))",
            "cos": "sum(cos(radians({})))"}[kind]
    return sql.SQL(expr + " AS {}").format(ref, sql.Identifier(name))


def _merged(col: Column) -> sql.Composable:
    """The value of `col` from the partials `p` of its bucket (as aggregation's
    _reading_expr computes it from the readings)."""
    p = {kind: sql.SQL("p.{}").format(sql.Identifier(name))
         for name, kind in _partial_columns(col)}
    if col.rollup is Rollup.MEAN:
        expr = sql.SQL("sum({}) / nullif(sum({}), 0)").format(p["sum"], p["count"])
    elif col.rollup is Rollup.SUM:
        expr = sql.SQL("sum({})").format(p["sum"])
    elif col.rollup in (Rollup.MIN, Rollup.MAX):
        kind = "min" if col.rollup is Rollup.MIN else "max"
        expr = sql.SQL(kind + "({})").format(p[kind])
    else:
        expr = sql.SQL("(degrees(atan2(sum({}), sum({}))) + 360)").format(p["sin"], p["cos"])
    return sql.SQL("{} AS {}").format(expr, sql.Identifier(col.name))


def buckets(columns: tuple[Column, ...], scan: Scan, start: sql.Composable,
            join: sql.Composable, where: list[sql.Composable], *, local: bool, behind: bool,
            ) -> sql.Composable:
    """aggregation._from_readings with cold partials: the hot readings' partials (rows
    `where`, bucketed by `start`) and the cold ones merged per bucket and device. `behind`:
    only the buckets whose stored rollup is missing or behind (aggregation._from_stored);
    `local`: `join` brings each reading's location zone `z`."""
    values = [c for c in columns if c.rollup is not Rollup.KEY]
    parts = [(c, name, kind) for c in values for name, kind in _partial_columns(c)]
    tz = sql.SQL("coalesce(z.tz_name, 'UTC')" if local else "'UTC'")
    hot = sql.SQL(
        "SELECT {start} AS time, t.device, t.location, {tz} AS tz, count(*) AS n,"
        " max(t.time) AS last_t{values} FROM calibrated t{join} WHERE {where}"
        " GROUP BY 1, 2, 3, 4").format(
        start=start, tz=tz, join=join, where=sql.SQL(" AND ").join(where),
        values=sql.SQL("").join(sql.SQL(", ") + _hot_partial(*p) for p in parts))
    cold_cols = sql.SQL(", ").join(sql.SQL("c.{}").format(sql.Identifier(n)) for n in (
        "time", "device", "location", "tz", "n", "last_t", *(name for _c, name, _k in parts)))
    keep = sql.SQL(
        " WHERE (c.time, c.device) IN (SELECT k.time, k.device FROM counts k LEFT JOIN stored s"
        " ON s.time = k.time AND s.device = k.device WHERE s.samples IS DISTINCT FROM k.n)"
    ) if behind else sql.SQL("")
    direction = sql.SQL("DESC" if scan.descending else "ASC")
    return sql.SQL(
        "SELECT p.time, p.device, last(p.location, p.last_t) AS location, min(p.tz) AS tz,"
        " sum(p.n)::int AS samples{values} FROM ({hot} UNION ALL SELECT {cold_cols} FROM"
        " {cold}{keep}) p GROUP BY 1, 2 ORDER BY 1 {d}, 2 {d} OFFSET 0").format(
        values=sql.SQL("").join(sql.SQL(", ") + _merged(c) for c in values), hot=hot,
        cold_cols=cold_cols, cold=_cold(scan), keep=keep, d=direction)


def params(scan: Scan) -> dict[str, Any]:
    """The parameters of the cold partials (none without them)."""
    if not partials(scan):
        return {}
    assert scan.cold is not None
    return {f"cold_{n}": v for n, v in scan.cold.arrays.items()}
