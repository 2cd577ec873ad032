"""Rewrites of a cold month: one organisation-month's live files (and, when merging, its hot
rows) become one new file, changed on the way or not. The mover compacts with it (late
readings for a month already cold, several files of one month), retention removes rows past
a horizon with it (aggregate.coldretention) and relabels of moved devices rewrite with it
(aggregate.coldrelabel); docs/operations.md "Cold tier".

The steps, each of which a kill can interrupt (the chaos test kills at every one):

1. `pending`: a catalogue row names the new file;
2. the old files are read and checked against their recorded checksums, the hot rows of the
   month read (a hot row wins over a cold copy), the change applied, the file written
   (`written`, `renamed`) and read back: rows and checksum must be what was meant;
3. `staged`: recorded with its counts; readers do not read it (its rows are still in the old
   files, and a reader reading both would count them twice);
4. one transaction (`swapping` inside, `swapped` after the commit) checks the old files are
   still live, deletes the merged hot rows with RETURNING and compares them with the rows
   merged, runs the caller's `in_swap` work, retires the old files and makes the new one live:
   readers see either the old files or the new one, never both, never neither;
5. `removed`: the retired files are deleted, with their catalogue rows.

A rerun (aggregate.coldmove.recover, under the mover's lock) removes `pending` and `staged`
files (nothing was swapped: the old ones are still live) and the `retired` ones (the swap
committed). Functions take `conn` (autocommit) first.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, date, datetime
from uuid import UUID

import psycopg
import pyarrow as pa
import pyarrow.compute as pc
from psycopg import sql

from shared import coldfiles
from shared.coldstore import ColdStore

Checkpoint = Callable[[str], None]
STEPS = ("pending", "written", "renamed", "staged", "swapping", "swapped", "removed")
Change = Callable[[pa.Table], pa.Table]
InSwap = Callable[[psycopg.Connection], None]

COLS = sql.SQL(", ").join(sql.Identifier(n) for n in coldfiles.NAMES)
# The month's rows of one organisation's devices (a file's rows, and the delete's).
WHERE = ("device IN (SELECT name FROM devices WHERE org_id = %(org)s)"
         " AND time >= %(lo)s AND time < %(hi)s")


class Changed(Exception):
    """The month's hot rows or files are no longer what was read: roll the swap back."""


class Corrupt(OSError):
    """A cold file does not read back to its recorded rows and checksum."""


@dataclass(frozen=True, slots=True)
class Rewritten:
    """One org-month rewritten: the new file (None when no row is left), its rows and bytes,
    the files it replaced and the hot rows it took in."""

    org: UUID
    month: date
    path: str | None
    rows: int
    bytes: int
    replaced: tuple[str, ...]
    merged_hot: int


def month_bounds(month: date) -> tuple[datetime, datetime]:
    """[first instant of the month, first instant of the next), UTC."""
    lo = datetime(month.year, month.month, 1, tzinfo=UTC)
    hi = datetime(month.year + (month.month == 12), month.month % 12 + 1, 1, tzinfo=UTC)
    return lo, hi


def live_files(conn: psycopg.Connection, org: UUID, month: date,
               ) -> list[tuple[int, str, str, int]]:
    """(id, path, checksum, rows) of the organisation-month's live files."""
    rows = conn.execute("SELECT id, path, checksum, rows FROM cold_files WHERE org_id = %s"
                        " AND month = %s AND state = 'live' ORDER BY id",
                        (org, month)).fetchall()
    return [(r[0], r[1], r[2], r[3]) for r in rows]


def read_checked(store: ColdStore, rel: str, checksum: str, rows: int) -> pa.Table:
    """The file `rel`, refused (Corrupt) unless it holds the rows its catalogue row records."""
    table = store.read(rel)
    if table.num_rows != rows or coldfiles.content_checksum(table) != checksum:
        raise Corrupt(f"cold file {store.location(rel)} does not match its catalogue row "
                      f"({rows} rows, checksum {checksum[:12]}...)")
    return table


def without_hot(cold: pa.Table, hot: pa.Table) -> pa.Table:
    """`cold` without the rows (device, time) that `hot` also has: the hot copy wins."""
    if not hot.num_rows or not cold.num_rows:
        return cold
    keys = pc.binary_join_element_wise(
        hot.column("device"), pc.cast(pc.cast(hot.column("time"), pa.int64()), pa.string()), "|")
    mine = pc.binary_join_element_wise(
        cold.column("device"), pc.cast(pc.cast(cold.column("time"), pa.int64()), pa.string()),
        "|")
    return cold.filter(pc.invert(pc.is_in(mine, value_set=keys.combine_chunks())))


def rewrite(conn: psycopg.Connection, store: ColdStore, org: UUID, month: date, *,
            merge_hot: bool, change: Change | None = None, in_swap: InSwap | None = None,
            checkpoint: Checkpoint = lambda _s: None) -> Rewritten | None:
    """Steps 1-5 for one organisation-month; None when its files or hot rows changed while it
    was written (nothing changed; the next run does it again)."""
    files = live_files(conn, org, month)
    lo, hi = month_bounds(month)
    file_id = conn.execute("INSERT INTO cold_files (org_id, month, path) VALUES (%s, %s, '')"
                           " RETURNING id", (org, month)).fetchone()[0]  # type: ignore[index]
    rel = coldfiles.relative_path(org, month, file_id)
    conn.execute("UPDATE cold_files SET path = %s WHERE id = %s", (rel, file_id))
    checkpoint("pending")
    parts = [read_checked(store, path, checksum, rows) for _, path, checksum, rows in files]
    cold = pa.concat_tables(parts) if parts else coldfiles.table_from_rows([])
    hot = coldfiles.table_from_rows([])
    if merge_hot:
        stmt = sql.SQL("SELECT {} FROM calibrated WHERE {}").format(COLS, sql.SQL(WHERE))
        hot = coldfiles.table_from_rows(
            conn.execute(stmt, {"org": org, "lo": lo, "hi": hi}).fetchall())
    table = pa.concat_tables([without_hot(cold, hot), hot])
    if change is not None:
        table = change(table)
    table = table.sort_by([("device", "ascending"), ("time", "ascending")])
    checksum = coldfiles.content_checksum(table)
    size = 0
    if table.num_rows:
        size = store.write(rel, table, checkpoint)
        back = store.read(rel)
        if back.num_rows != table.num_rows or coldfiles.content_checksum(back) != checksum:
            _drop(conn, store, file_id, rel)
            raise Corrupt(f"cold file {store.location(rel)} does not read back as written")
        times = table.column("time")
        conn.execute("UPDATE cold_files SET state = 'staged', rows = %s, bytes = %s,"
                     " checksum = %s, first_time = %s, last_time = %s WHERE id = %s",
                     (table.num_rows, size, checksum, pc.min(times).as_py(),
                      pc.max(times).as_py(), file_id))
    checkpoint("staged")
    hot_sum = coldfiles.content_checksum(hot)
    old_ids = [f[0] for f in files]
    try:
        with conn.transaction():
            locked = conn.execute("SELECT id FROM cold_files WHERE id = ANY(%s)"
                                  " AND state = 'live' FOR UPDATE", (old_ids,)).fetchall()
            if len(locked) != len(old_ids):
                raise Changed
            if merge_hot:
                stmt = sql.SQL("DELETE FROM calibrated WHERE {} RETURNING {}").format(
                    sql.SQL(WHERE), COLS)
                gone = conn.execute(stmt, {"org": org, "lo": lo, "hi": hi}).fetchall()
                if coldfiles.content_checksum(coldfiles.table_from_rows(gone)) != hot_sum:
                    raise Changed
            if in_swap is not None:
                in_swap(conn)
            conn.execute("UPDATE cold_files SET state = 'retired' WHERE id = ANY(%s)",
                         (old_ids,))
            if table.num_rows:
                conn.execute("UPDATE cold_files SET state = 'live', live_at = now()"
                             " WHERE id = %s", (file_id,))
            else:
                conn.execute("DELETE FROM cold_files WHERE id = %s", (file_id,))
            checkpoint("swapping")
    except Changed:
        _drop(conn, store, file_id, rel)
        return None
    checkpoint("swapped")
    for old_id, path, _c, _r in files:
        _drop(conn, store, old_id, path)
    checkpoint("removed")
    return Rewritten(org, month, rel if table.num_rows else None, table.num_rows, size,
                     tuple(f[1] for f in files), hot.num_rows)


def _drop(conn: psycopg.Connection, store: ColdStore, file_id: int, rel: str) -> None:
    """A file that is not (or no longer) read: its bytes, then its catalogue row."""
    store.delete(rel)
    conn.execute("DELETE FROM cold_files WHERE id = %s AND state <> 'live'", (file_id,))
