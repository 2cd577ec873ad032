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
import time
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any
from uuid import UUID
from zoneinfo import ZoneInfo

import psycopg

from aggregate import coldrows, statements
from shared import timeutil
from shared.timeutil import hour_bounds, slots, zone

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
    tz: ZoneInfo | None = None  # the location's zone, made once from its name

    @property
    def slots(self) -> int:
        """5-minute slots in the bucket (12 per hour; 276/288/294/300 per local day)."""
        return slots(self.start, self.end)


def claim_marks(conn: psycopg.Connection, *, table: str, limit: int) -> list[tuple[str, datetime]]:
    """Claim (delete and return) up to `limit` pending marks of `table`, in (device, bucket)
    order. Marks locked by another worker are skipped, not waited for."""
    rows = conn.execute(statements.CLAIM, {"rollup": table, "limit": limit}).fetchall()
    return sorted((r[0], r[1]) for r in rows)


def resolve_marks(
    conn: psycopg.Connection, *, table: str, marks: Sequence[tuple[str, datetime]],
    cold: bool = False,
) -> list[Bucket]:
    """The buckets the claimed `marks` name.

    A local mark carries only (device, start); the bucket's location is the one on the
    readings whose zone starts a bucket at exactly that instant. A mark that matches no
    location (its readings were moved or deleted) yields no bucket, and its row is removed.
    `cold`: cold readings were staged (aggregate.coldrows) and carry locations too.
    """
    if table == "hourly":
        return [Bucket(d, s, hour_bounds(s)[1]) for d, s in marks]
    if not marks:
        return []
    rows = conn.execute(statements.candidate_locations(cold), {
        "device": [m[0] for m in marks], "bucket": [m[1] for m in marks],
        "span": _SPAN[table]}).fetchall()
    found: list[Bucket] = []
    for device, start, location, tz_name in rows:
        tz = zone(tz_name)
        b_start, b_end = timeutil.bucket_of(table, start, tz)
        if b_start == start:
            found.append(Bucket(device, start, b_end, location, tz))
    return sorted(found, key=lambda b: (b.device, b.start, str(b.location)))


def process_marks(
    conn: psycopg.Connection, *, table: str, limit: int, low_quality_pct: float,
    cold_path: str | None = None,
) -> int:
    """Claim up to `limit` marks of `table` and recompute their buckets; returns marks claimed.
    With `cold_path` (SDS_COLD_PATH) buckets in months already cold read the cold readings
    too (aggregate.coldrows)."""
    marks = claim_marks(conn, table=table, limit=limit)
    if not marks:
        log.debug("already rolled up %s: no pending marks", table)
        return 0
    cold = coldrows.stage(conn, cold_path, min(m[1] for m in marks),
                          max(m[1] for m in marks) + LOOKAHEAD, sorted({m[0] for m in marks}))
    buckets = resolve_marks(conn, table=table, marks=marks, cold=cold)
    rows = recompute(conn, table=table, buckets=buckets, clear=marks,
                     low_quality_pct=low_quality_pct, cold=cold)
    log.info("rolled up %s %s-%s: %d rows from %d marks", table, marks[0][1].isoformat(),
             max(m[1] for m in marks).isoformat(), rows, len(marks))
    return len(marks)


def _prepare(conn: psycopg.Connection) -> None:
    # One round trip (each costs milliseconds on a busy machine): work tables and settings.
    row = conn.execute(statements.TEMP_EXISTS).fetchone()
    if not (row and row[0]):
        conn.execute(statements.create_temp())


def load_cells(conn: psycopg.Connection,
               ranges: dict[ZoneInfo, list[tuple[datetime, datetime]]]) -> None:
    """Load the cells and offset runs (shared.timeutil.cells) of each zone over its ranges."""
    arrays: dict[str, list[Any]] = {k: [] for k in (
        "tz", "start", "lh_start", "lh_end", "day", "day_start", "day_end")}
    runs: dict[str, list[Any]] = {"run_tz": [], "lo": [], "hi": [], "shift": []}
    for tz, spans in sorted(ranges.items(), key=lambda kv: kv[0].key):
        tz_name = tz.key  # the SQL side joins locations.tz_name
        ordered: list[timeutil.Cell] = []
        for lo, hi in _union(spans):  # many devices share a zone's buckets: each cell once
            ordered.extend(timeutil.cells(tz, lo, hi))
        for c in ordered:
            for k, v in (("tz", tz_name), ("start", c.start), ("lh_start", c.local_hour[0]),
                         ("lh_end", c.local_hour[1]), ("day", c.day),
                         ("day_start", c.local_day[0]), ("day_end", c.local_day[1])):
                arrays[k].append(v)
        for lo, hi, offset in timeutil.offset_segments(ordered):
            runs["run_tz"].append(tz_name)
            runs["lo"].append(lo)
            runs["hi"].append(hi)
            runs["shift"].append(-offset % 3600)  # local hours start `shift` s past UTC hours
    if arrays["tz"]:
        conn.execute(statements.LOAD_CELLS, {**arrays, **runs})


def _union(spans: Iterable[tuple[datetime, datetime]]) -> list[tuple[datetime, datetime]]:
    """Overlapping or touching ranges merged, in order."""
    out: list[tuple[datetime, datetime]] = []
    for lo, hi in sorted(spans):
        if out and lo <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], hi))
        else:
            out.append((lo, hi))
    return out


def _write(conn: psycopg.Connection, table: str, scope: str, params: dict[str, Any]
           ) -> tuple[int, int]:
    """Run `table`'s write; (rows written, rows deleted). Fails when a partial fell in no cell
    of its zone (the SQL and Python time rules disagree), rather than lose its readings."""
    row = conn.execute(statements.write(table, scope=scope), params).fetchone()
    written, gone, unmatched = row if row else (0, 0, 0)
    if unmatched:
        raise RuntimeError(f"{unmatched} partial aggregates fall in no cell of their zone")
    return int(written), int(gone)


def recompute(
    conn: psycopg.Connection, *, table: str, buckets: Sequence[Bucket],
    clear: Iterable[tuple[str, datetime]] = (), low_quality_pct: float, cold: bool = False,
) -> int:
    """Recompute `buckets` of `table` from calibrated and write them; returns rows written.

    One pass over the buckets' readings into partials per cell, merged into the buckets,
    with ET, rounded, written once. Rows at the (device, start) pairs in `clear` or `buckets`
    that end up with no readings are deleted. `cold`: read the staged cold readings too
    (aggregate.coldrows.stage). The caller owns the transaction.
    """
    _prepare(conn)
    local = table in LOCAL_TABLES
    if buckets:
        if local:
            ranges: dict[ZoneInfo, list[tuple[datetime, datetime]]] = defaultdict(list)
            for b in buckets:
                assert b.tz is not None, b
                ranges[b.tz].append((b.start, b.end))
            load_cells(conn, ranges)
        # The bucket arrays defeat the planner's row estimates (it picked a merge join that
        # compared 100x more rows than it kept): each bucket is one index range scan on
        # (device, time).
        conn.execute("SET LOCAL enable_mergejoin = off; SET LOCAL enable_hashjoin = off")
        conn.execute(statements.load_partials_buckets(table, cold), {
            "device": [b.device for b in buckets],
            "location": [b.location for b in buckets],
            "start": [b.start for b in buckets],
            "end": [b.end for b in buckets]})
        conn.execute("RESET enable_mergejoin; RESET enable_hashjoin")
    pairs = sorted({(b.device, b.start) for b in buckets} | set(clear))
    written, gone = _write(conn, table, "pairs", {
        "device": [p[0] for p in pairs], "start": [p[1] for p in pairs], "lo": None,
        "hi": None, "after": None, "low_quality_pct": low_quality_pct})
    if gone:
        log.info("removed %d %s rows whose buckets have no readings", gone, table)
    # Empty the work tables now: a transaction may recompute several batches before it commits.
    # DELETE, not TRUNCATE: a few hundred rows, and TRUNCATE makes new files every time.
    conn.execute(statements.DELETE_TEMP)
    return int(written)


# ---- ranges (backfill) and location changes ----------------------------------------------

class _Clock:
    """Seconds per step, added into `into` (nothing when None)."""

    def __init__(self, into: dict[str, float] | None) -> None:
        self.into, self.t = into, time.perf_counter()

    def lap(self, step: str) -> None:
        now = time.perf_counter()
        if self.into is not None:
            self.into[step] = self.into.get(step, 0.0) + now - self.t
        self.t = now


# A bucket holds readings up to a local day (+ DST hour) after its start.
LOOKAHEAD = timedelta(hours=27)


def recompute_range(
    conn: psycopg.Connection, *, tables: Sequence[str], start: datetime, end: datetime,
    first: bool, last: bool, devices: Sequence[str] | None, low_quality_pct: float,
    share: int = 0, shares: int = 1, timings: dict[str, float] | None = None,
    cold_path: str | None = None,
) -> tuple[int, int]:
    """Recompute every bucket of `tables` that starts in `[start, end)`, from one pass over the
    readings; returns (rows written, readings read). Caller owns the transaction.

    The first piece also takes the buckets containing `start`; the last one buckets that run
    past `end` (buckets are always recomputed whole). Rows starting in the piece whose
    buckets have no readings are deleted. `share`/`shares` split devices between workers.
    `timings`, when given, accumulates seconds per step (cells, partials, each table).
    With `cold_path` (SDS_COLD_PATH) the cold readings of the range are read too.
    """
    clock = _Clock(timings)
    _prepare(conn)
    lo = hour_bounds(start)[0] - LOOKAHEAD if first else start
    hi = end + LOOKAHEAD
    if any(t in LOCAL_TABLES for t in tables):
        zones = [zone(r[0]) for r in conn.execute("SELECT DISTINCT tz_name FROM locations")]
        load_cells(conn, {z: [(lo, hi)] for z in zones})
    clock.lap("cells")
    cold = coldrows.stage(conn, cold_path, lo, hi, devices)
    params: dict[str, Any] = {
        "lo": lo, "hi": hi, "devices": list(devices) if devices else None, "share": share,
        "shares": shares, "low_quality_pct": low_quality_pct}
    # The planner cannot estimate the cells per reading and sorts 100% of the rows for a
    # GroupAggregate; hashing the few locations' offset runs and the cells is 2x faster.
    conn.execute("SET LOCAL enable_sort = off; SET LOCAL enable_mergejoin = off")
    conn.execute(statements.load_partials_range(tuple(t for t in TABLE_ORDER if t in tables),
                                                cold), params)
    conn.execute("RESET enable_sort; RESET enable_mergejoin")
    total = ("SELECT coalesce(sum(n), 0) FROM "  # nosec B608  a constant table name, not input
             + statements.PARTIALS)
    row = conn.execute(total).fetchone()
    readings = int(row[0]) if row else 0
    clock.lap("partials")
    written = 0
    for table in TABLE_ORDER:
        if table not in tables:
            continue
        w, _gone = _write(conn, table, "range", {
            **params, "lo": None if first else start, "hi": end,
            "after": start if first else None, "del_lo": start, "del_hi": end})
        written += w
        clock.lap(table)
    conn.execute(statements.CLEAR_TEMP)
    return written, readings
