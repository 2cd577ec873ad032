"""`/data/calibrated` across the cold tier (shared.coldfiles, aggregate.coldmove).

A plain page reads its cold rows with pyarrow (the organisation's verified and live files that
overlap the window, filtered by device or location, time and the cursor's key, sorted and cut
at the page's size + 1). When no hot row of the listing lies in the page's span, the page is
exactly those rows and serve.coldpage writes it without SQL. Otherwise they go to the page's
SQL as arrays: the statement reads
`calibrated UNION ALL unnest(cold arrays)`, so units, rounding, `local_time`, CSV formatting,
ordering, the keyset cursor and the tenant and team checks (the cold rows pass through
`device IN (SELECT name FROM devices)`, the hypertables' own policy) are exactly the hot
rows'. A cold row that also exists hot (a file verified but not yet live, a late copy) is
dropped in SQL: the hot row wins, so nothing is counted twice.

The catalogue is read in the page's REPEATABLE READ snapshot (serve.api.data), the one its
hot rows are read in: the mover deletes a file's rows and marks it live in one transaction,
so a page sees the rows either hot or in a file it reads, whatever a move does meanwhile.
Aggregated pages (`interval`, `points`) read theirs through serve.coldagg.
"""

from __future__ import annotations

import dataclasses
from datetime import datetime
from typing import Any

import psycopg
import pyarrow as pa
import pyarrow.compute as pc

from serve.queries import ColdRows, Scan, any_hot_row, bounds
from shared import coldfiles
from shared.coldstore import open_store


def files(conn: psycopg.Connection, org: Any, lo: datetime, hi: datetime,
          ) -> list[tuple[int, str]]:
    """(id, path) of the organisation's readable cold files overlapping [lo, hi], read in the
    page's snapshot (serve.api.data), the one its hot rows are read in (plain and aggregated
    pages alike: serve.coldagg)."""
    rows = conn.execute(
        "SELECT id, path FROM cold_files WHERE org_id = %s AND state = ANY(%s)"
        " AND first_time <= %s AND last_time >= %s ORDER BY id",
        (org, list(coldfiles.READABLE), hi, lo)).fetchall()
    return [(r[0], r[1]) for r in rows]


def _files(conn: psycopg.Connection, scan: Scan, lo: datetime, hi: datetime,
           ) -> list[tuple[int, str]]:
    return files(conn, scan.org, lo, hi) if scan.table.name == "calibrated" else []


def reaches(conn: psycopg.Connection, scan: Scan) -> bool:
    """Whether a readable cold file of the organisation overlaps the page's window."""
    return bool(_files(conn, scan, *bounds(scan)))


def _filter(scan: Scan, lo: datetime, hi: datetime) -> pc.Expression:
    time, device = pc.field("time"), pc.field("device")
    expr = (time >= pa.scalar(lo, pa.timestamp("us", tz="UTC"))) & (
        time <= pa.scalar(hi, pa.timestamp("us", tz="UTC")))
    if scan.device is not None:
        expr &= device == scan.device
    if scan.devices is not None:
        expr &= device.isin(list(scan.devices))
    if scan.location is not None:
        expr &= pc.field("location") == str(scan.location)
    if scan.only_devices is not None and scan.device is None:
        expr &= device.isin(list(scan.only_devices))
    if scan.after is not None and scan.device is None:
        at = pa.scalar(scan.after.time, pa.timestamp("us", tz="UTC"))
        if scan.descending:
            expr &= (time < at) | ((time == at) & (device <= scan.after.device))
        else:
            expr &= (time > at) | ((time == at) & (device >= scan.after.device))
    return expr


def attach(conn: psycopg.Connection, scan: Scan, cold_path: str) -> Scan:
    """`scan` with the cold rows its page may need (at most limit + 1, enough for the page and
    the next page's key), or unchanged when no cold file overlaps it (or `scan.guard`: its
    statement checks the catalogue itself, serve.api.data)."""
    if scan.guard:
        return scan
    lo, hi = bounds(scan)
    files = _files(conn, scan, lo, hi)
    if not files:
        return dataclasses.replace(scan, cold=None)
    dataset = open_store(cold_path).dataset(rel for _, rel in files)
    table = dataset.to_table(filter=_filter(scan, lo, hi))
    # Only rows of devices the caller sees (tenancy and teams, as the SQL checks again) may
    # count towards the limit + 1 kept: a location's file holds every device that stood there.
    names = pc.unique(table.column("device")).to_pylist()
    visible = [r[0] for r in conn.execute("SELECT name FROM devices WHERE name = ANY(%s)",
                                          (names,)).fetchall()] if names else []
    table = table.filter(pc.field("device").isin(visible)) if visible else table.slice(0, 0)
    order = "descending" if scan.descending else "ascending"
    table = table.sort_by([("time", order), ("device", order)]).slice(0, scan.limit + 1)
    ids = tuple(i for i, _ in files)
    if not table.num_rows:
        return dataclasses.replace(scan, cold=ColdRows(ids, {}))
    if _wholly_cold(conn, scan, table):
        return dataclasses.replace(scan, cold=ColdRows(ids, {}, page=table))
    arrays = {name: joined(table.column(name)) for name in coldfiles.NAMES}
    span = pc.min_max(table.column("time")).as_py()
    devices = tuple(pc.unique(table.column("device")).to_pylist())
    return dataclasses.replace(scan, cold=ColdRows(ids, arrays, span["min"], span["max"],
                                                   devices))


def _wholly_cold(conn: psycopg.Connection, scan: Scan, table: pa.Table) -> bool:
    """Whether the page is exactly its cold rows: no hot row of the listing lies before the
    next page's first cold row (or, on a last page, anywhere in the window). The usual case
    (live files, no late reading), read in the page's snapshot: such a page is written by
    serve.coldpage without passing its rows through SQL. (updated_since and local-day
    bounds, which calibrated pages do not combine with cold rows today, take the SQL.)"""
    if scan.updated_since is not None or scan.start_day is not None or scan.end_day is not None:
        return False
    span = dataclasses.replace(scan, cold=None)
    if table.num_rows > scan.limit:
        edge = table.column("time")[scan.limit].as_py()
        span = (dataclasses.replace(span, start=max(scan.start, edge)) if scan.descending
                else dataclasses.replace(span, end=min(scan.end, edge)))
    return not any_hot_row(conn, span)


def joined(column: pa.ChunkedArray) -> str:
    """One column as the text `string_to_array(text, ',', '')` splits back (NULL as ''),
    formatted by Arrow in C: psycopg's per-value dumping of Python lists cost 10x the page
    (docs/benchmarks.md "Cold tier"). Floats print in their shortest form, which PostgreSQL
    reads back to the same float32 (or float8, for serve.coldagg's partials); names cannot
    hold ',' (a device list's separator)."""
    text = pc.cast(column.combine_chunks(), pa.string()).fill_null("")
    offsets = pa.array([0, len(text)], pa.int32())
    return str(pc.binary_join(pa.ListArray.from_arrays(offsets, text), ",")[0].as_py())
