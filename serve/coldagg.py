"""Aggregated `/data/calibrated` pages (`interval`, `points`: serve.aggregation) across the
cold tier: the page's SQL reads `calibrated UNION ALL` the cold readings of its window, so
bucket edges (UTC or each reading's local zone), every column's rule, units, rounding,
`local_time`, CSV, the cursor and the stored-rollup shortcut (a stored `hourly`/`daily` row is
used when its count equals the readings now in its bucket, hot and cold) are exactly those of
an all-hot page.

The cold rows are the raw readings of the window, only the columns the buckets are computed
from (time, device, location and the columns asked for), read with pyarrow from the
organisation's readable files (shared.coldstore) and passed as array parameters, as
serve.coldread passes a plain page's. They are not pre-aggregated: a mean's float8 sum over
float32 readings is exact only summed reading by reading in one aggregate, and a local day's
edges are PostgreSQL's time zone rules, so the answer stays byte-identical with the hot one.
A cold row that also exists hot is dropped in SQL (the hot copy wins); a cold row of a device
the caller does not see (another team's) is dropped before the arrays are built and again in
SQL (`device IN (SELECT name FROM devices)`, the hypertables' own policy).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from datetime import datetime
from typing import Any

import psycopg
import pyarrow as pa
import pyarrow.compute as pc
from psycopg import sql

from serve.queries import ColdRows, Scan
from shared import coldfiles
from shared.coldstore import open_store
from shared.columns import TABLES, Column, Rollup

_TYPES = {c.name: c.dtype for c in TABLES["calibrated"].columns}
_UTC = pa.timestamp("us", tz="UTC")


def reading_names(columns: Iterable[Column]) -> tuple[str, ...]:
    """The reading columns the buckets of `columns` (aggregation.output_columns) need."""
    names = ["time", "device", "location"]
    names += [c.source for c in columns if c.source and c.rollup is not Rollup.KEY]
    return tuple(dict.fromkeys(names))


def files(conn: psycopg.Connection, org: Any, lo: datetime, hi: datetime,
          ) -> list[tuple[int, str]]:
    """(id, path) of the organisation's readable cold files overlapping [lo, hi], read in the
    page's snapshot (serve.api.data), the one its hot rows are read in."""
    rows = conn.execute(
        "SELECT id, path FROM cold_files WHERE org_id = %s AND state = ANY(%s)"
        " AND first_time <= %s AND last_time >= %s ORDER BY id",
        (org, list(coldfiles.READABLE), hi, lo)).fetchall()
    return [(r[0], r[1]) for r in rows]


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


def attach(conn: psycopg.Connection, scan: Scan, window: tuple[datetime, datetime],
           columns: Iterable[Column], cold_path: str) -> Scan:
    """`scan` with every cold reading of `window` ([lo, hi), aggregation.reading_window) its
    buckets (`columns`) are computed from, or unchanged when no cold file overlaps it.
    pyarrow's errors (a file missing or unreadable) propagate: serve.coldguard answers them."""
    lo, hi = window
    if scan.table.name != "calibrated":
        return dataclasses.replace(scan, cold=None)
    found = files(conn, scan.org, lo, hi)
    if not found:
        return dataclasses.replace(scan, cold=None)
    names = reading_names(columns)
    table = open_store(cold_path).dataset(rel for _, rel in found).to_table(
        columns=list(names), filter=_filter(scan, lo, hi))
    seen = pc.unique(table.column("device")).to_pylist()
    visible = [r[0] for r in conn.execute("SELECT name FROM devices WHERE name = ANY(%s)",
                                          (seen,)).fetchall()] if seen else []
    table = table.filter(pc.field("device").isin(visible)) if visible else table.slice(0, 0)
    ids = tuple(i for i, _ in found)
    if not table.num_rows:
        return dataclasses.replace(scan, cold=ColdRows(ids, {}))
    span = pc.min_max(table.column("time")).as_py()
    arrays = {name: _joined(table.column(name)) for name in names}
    return dataclasses.replace(scan, cold=ColdRows(
        ids, arrays, span["min"], span["max"], tuple(pc.unique(table.column("device"))
                                                     .to_pylist())))


def _joined(column: pa.ChunkedArray) -> str:
    """One column as the text `string_to_array(text, ',', '')` splits back (NULL as ''),
    formatted by Arrow: a float32 prints in its shortest form, which PostgreSQL reads back to
    the same `real` (as serve.coldread's plain pages pass theirs)."""
    text = pc.cast(column.combine_chunks(), pa.string()).fill_null("")
    offsets = pa.array([0, len(text)], pa.int32())
    return str(pc.binary_join(pa.ListArray.from_arrays(offsets, text), ",")[0].as_py())


def source(scan: Scan) -> sql.Composable:
    """The readings an aggregated page reads, as `t`: `calibrated`, plus the cold rows of
    `scan` (those of devices the caller sees, and only where no hot copy exists)."""
    if scan.cold is None or not scan.cold.arrays:
        return sql.SQL("calibrated t")
    names = list(scan.cold.arrays)
    cols = sql.SQL(", ").join(sql.Identifier(n) for n in names)
    arrays = sql.SQL(", ").join(
        sql.SQL("string_to_array({}, ',', '')::{}[]").format(
            sql.Placeholder(f"cold_{n}"), sql.SQL(_TYPES[n])) for n in names)
    # The hot copies are looked up once, in the cold rows' span and devices (a hash anti join).
    return sql.SQL(
        "(WITH hot_keys AS MATERIALIZED (SELECT device, time FROM calibrated"
        " WHERE time >= %(cold_lo)s AND time <= %(cold_hi)s AND device = ANY(%(cold_devices)s))"
        " SELECT {cols} FROM calibrated UNION ALL SELECT {cols} FROM unnest({arrays})"
        " AS c({cols}) WHERE c.device IN (SELECT name FROM devices) AND NOT EXISTS"
        " (SELECT 1 FROM hot_keys h WHERE h.device = c.device AND h.time = c.time)) t").format(
        cols=cols, arrays=arrays)


def params(scan: Scan) -> dict[str, Any]:
    """The parameters `source(scan)` names (none without cold rows)."""
    if scan.cold is None or not scan.cold.arrays:
        return {}
    out: dict[str, Any] = {f"cold_{n}": v for n, v in scan.cold.arrays.items()}
    out.update(cold_lo=scan.cold.first, cold_hi=scan.cold.last,
               cold_devices=list(scan.cold.devices))
    return out
