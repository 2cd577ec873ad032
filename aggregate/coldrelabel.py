"""Relabels of cold readings: a device moved over a range that is already cold
(shared.places.move_device relabels the hot readings and queues the rest in `cold_relabels`,
migration 0230). The scheduler's cold job rewrites each organisation-month file holding
readings of the device in the range with the new location, through aggregate.coldrewrite's
verified steps, and marks the rollup buckets of the relabelled readings in the swap's
transaction, as move_device does for hot ones; a queued relabel is removed once every month is
done (a kill in between redoes the months, which changes nothing twice). Until then readers
show the old location for those cold readings (docs/operations.md "Cold tier").
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from datetime import UTC, date, datetime
from uuid import UUID
from zoneinfo import ZoneInfo

import psycopg
import pyarrow as pa
import pyarrow.compute as pc

from aggregate import coldmove
from aggregate.coldrewrite import Checkpoint, live_files, rewrite
from shared import dirty
from shared.coldstore import ColdStore, open_store
from shared.timeutil import zone

log = logging.getLogger(__name__)

Guard = Callable[[psycopg.Connection], None]
_TS = pa.timestamp("us", tz="UTC")
_FAR = datetime(9999, 1, 1, tzinfo=UTC)


def _in_range(table: pa.Table, device: str, lo: datetime, hi: datetime | None) -> pa.Array:
    """Which rows of `table` are the device's readings in [lo, hi)."""
    t = table.column("time")
    mask = pc.and_(pc.equal(table.column("device"), device),
                   pc.greater_equal(t, pa.scalar(lo, _TS)))
    return pc.and_(mask, pc.less(t, pa.scalar(hi or _FAR, _TS)))


def relabel_table(table: pa.Table, device: str, location: UUID, lo: datetime,
                  hi: datetime | None) -> tuple[pa.Table, list[datetime]]:
    """`table` with the device's readings in [lo, hi) at `location`, and the times of the
    readings whose location changed."""
    mask = pc.fill_null(_in_range(table, device, lo, hi), False)
    old = table.column("location")
    changed = pc.and_(mask, pc.fill_null(pc.not_equal(old, str(location)), True))
    times = table.filter(changed).column("time").to_pylist()
    new = pc.if_else(mask, pa.scalar(str(location), pa.string()), old)
    index = table.schema.get_field_index("location")
    return table.set_column(index, "location", new), times


def _months(conn: psycopg.Connection, device: str, lo: datetime, hi: datetime | None,
            ) -> list[tuple[UUID, date]]:
    rows = conn.execute(
        "SELECT DISTINCT f.org_id, f.month FROM cold_files f JOIN devices d"
        " ON d.org_id = f.org_id WHERE d.name = %s AND f.state = 'live'"
        " AND f.last_time >= %s AND (%s::timestamptz IS NULL OR f.first_time < %s)"
        " ORDER BY 2", (device, lo, hi, hi)).fetchall()
    return [(r[0], r[1]) for r in rows]


def _needs(store: ColdStore, conn: psycopg.Connection, org: UUID, month: date, device: str,
           location: UUID, lo: datetime, hi: datetime | None) -> bool:
    """Whether the month's files hold a reading of the relabel at another location."""
    for _id, rel, _sum, _rows in live_files(conn, org, month):
        table = store.read(rel)
        rows = table.filter(pc.fill_null(_in_range(table, device, lo, hi), False))
        if rows.num_rows and not pc.all(pc.fill_null(
                pc.equal(rows.column("location"), str(location)), False)).as_py():
            return True
    return False


def _steps(device: str, location: UUID, lo: datetime, hi: datetime | None, tz: ZoneInfo,
           moved: list[datetime]) -> tuple[Callable[[pa.Table], pa.Table],
                                           Callable[[psycopg.Connection], None]]:
    """The rewrite's change (relabel, noting the times in `moved`) and its swap's work (mark
    the rollup buckets of those readings, as shared.places.move_device does for hot ones)."""

    def change(table: pa.Table) -> pa.Table:
        out, times = relabel_table(table, device, location, lo, hi)
        moved[:] = times
        return out

    def in_swap(c: psycopg.Connection) -> None:
        if moved:
            dirty.write_marks(c, dirty.bucket_marks(device, moved, tz))

    return change, in_swap


def apply(conn: psycopg.Connection, store: ColdStore, relabel_id: int, device: str,
          location: UUID, lo: datetime, hi: datetime | None,
          checkpoint: Checkpoint = lambda _s: None, guard: Guard = lambda _c: None) -> int:
    """Do one queued relabel and remove it from the queue; the months rewritten. A relabel to a
    location of another organisation than the device's is dropped unapplied (the queue has no
    row-level security of its own)."""
    tz_row = conn.execute("SELECT l.tz_name FROM locations l JOIN devices d ON d.org_id ="
                          " l.org_id WHERE l.id = %s AND d.name = %s",
                          (location, device)).fetchone()
    if tz_row is None:
        log.warning("cold: relabel %d of %s to location %s dropped: not a location of the "
                    "device's organisation", relabel_id, device, location)
    done = 0
    for org, month in _months(conn, device, lo, hi):
        guard(conn)
        if tz_row is None or not _needs(store, conn, org, month, device, location, lo, hi):
            continue
        moved: list[datetime] = []
        change, in_swap = _steps(device, location, lo, hi, zone(tz_row[0]), moved)
        if rewrite(conn, store, org, month, merge_hot=False, change=change, in_swap=in_swap,
                   checkpoint=checkpoint) is None:
            raise RuntimeError(f"cold relabel of {device}: {month:%Y-%m} changed meanwhile; "
                               "the next run does it again")
        done += 1
    conn.execute("DELETE FROM cold_relabels WHERE id = %s", (relabel_id,))
    if done:
        log.info("cold: %s relabelled from %s in %d month file(s)", device, lo.isoformat(), done)
    return done


def run(conn: psycopg.Connection, *, cold_path: str, checkpoint: Checkpoint = lambda _s: None,
        guard: Guard = lambda _c: None) -> int:
    """Every queued relabel, oldest first, under the cold tier's writer lock (aggregate.coldmove
    recovers what a killed run left first); the month files rewritten. `conn`: autocommit."""
    store = open_store(cold_path)
    queued = conn.execute("SELECT id, device, location, lo, hi FROM cold_relabels"
                          " ORDER BY id").fetchall()
    if not queued:
        return 0
    total = 0
    with coldmove.holding_lock(conn):
        coldmove.recover(conn, store, checkpoint)
        for relabel_id, device, location, lo, hi in queued:
            guard(conn)
            total += apply(conn, store, relabel_id, device, location, lo, hi, checkpoint, guard)
    return total
