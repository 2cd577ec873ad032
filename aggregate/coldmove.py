"""The cold tier's mover: `calibrated` readings older than SDS_HOT_DAYS leave the table for
Parquet files (zstd) under SDS_COLD_PATH, one per organisation-month (docs/decisions.md
"Cold tier").

Each file goes through steps a kill can interrupt anywhere (the chaos test kills the mover at
every one of them), and the catalogue `cold_files` says where it got to:

1. `pending`: a catalogue row names the file (committed before anything is written);
2. the rows are read in one snapshot, written to `<path>.tmp`, fsynced, renamed, the directory
   fsynced, then read back: row count and content checksum must equal the rows read;
3. `verified`: the counts and checksum are recorded (readers now use the file, preferring a hot
   copy of a row over the cold one, so nothing is counted twice);
4. one transaction deletes the month's hot rows of the organisation with RETURNING, compares
   their checksum with the file's, and marks the file `live`; any difference (a late reading,
   a relabel, retention) rolls the delete back and the file is discarded, to be redone.

A rerun first finishes or undoes what a killed run left: `pending` files are removed, a
`verified` file takes step 4 again, and what an interrupted rewrite left (aggregate.coldrewrite:
`staged` and `retired` files) is removed. So after any kill a reading is either hot or in a
live (or verified) file, and readers count it once.

A month that already has a live file (late readings arrived after it went cold) is not given a
second file: it is compacted, its files and hot rows rewritten into one (aggregate.coldrewrite),
and so is a month left with several files. Functions take `conn` (autocommit) first.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta
from uuid import UUID

import psycopg
from psycopg import sql

from aggregate.coldrewrite import COLS as _COLS
from aggregate.coldrewrite import WHERE as _WHERE
from aggregate.coldrewrite import Rewritten, live_files, month_bounds, rewrite
from shared import coldfiles, locks
from shared.coldstore import ColdStore, open_store

log = logging.getLogger(__name__)

Checkpoint = Callable[[str], None]  # called with each step's name: the chaos test's failpoint
STEPS = ("pending", "written", "renamed", "verified", "deleted", "live")

LOCK_NAME = "sds cold mover"  # one writer of the cold tier at a time (mover, retention, relabels)
Guard = Callable[[psycopg.Connection], None]


@dataclass(frozen=True, slots=True)
class Moved:
    """One file made live."""

    org: UUID
    month: date
    path: str
    rows: int
    bytes: int
    compacted: bool = False  # several files and late hot rows rewritten as this one


def cutoff(hot_days: int, now: datetime | None = None) -> datetime:
    """Months that end at or before this instant are cold: the first day of the month holding
    now - hot_days (whole months only, so a file is a month)."""
    edge = (now or datetime.now(UTC)) - timedelta(days=hot_days)
    return datetime(edge.year, edge.month, 1, tzinfo=UTC)


def candidates(conn: psycopg.Connection, before: datetime) -> list[tuple[UUID, date]]:
    """(organisation, month) pairs with hot readings older than `before`, oldest first
    (readings of devices in no organisation stay hot)."""
    rows = conn.execute(
        "SELECT d.org_id, date_trunc('month', c.time AT TIME ZONE 'UTC')::date AS m"
        " FROM calibrated c JOIN devices d ON d.name = c.device"
        " WHERE c.time < %s AND d.org_id IS NOT NULL GROUP BY 1, 2 ORDER BY 2, 1",
        (before,)).fetchall()
    return [(r[0], r[1]) for r in rows]


def _discard(conn: psycopg.Connection, store: ColdStore, file_id: int, rel: str) -> None:
    store.delete(rel)
    conn.execute("DELETE FROM cold_files WHERE id = %s AND state <> 'live'", (file_id,))


def _make_live(conn: psycopg.Connection, file_id: int, org: UUID, month: date, checksum: str,
               checkpoint: Checkpoint) -> bool:
    """Step 4: delete exactly the file's rows and mark it live, or change nothing."""
    lo, hi = month_bounds(month)
    try:
        with conn.transaction():
            stmt = sql.SQL("DELETE FROM calibrated WHERE {} RETURNING {}").format(
                sql.SQL(_WHERE), _COLS)
            deleted = conn.execute(stmt, {"org": org, "lo": lo, "hi": hi}).fetchall()
            if coldfiles.content_checksum(coldfiles.table_from_rows(deleted)) != checksum:
                raise _Changed
            conn.execute("UPDATE cold_files SET state = 'live', live_at = now() WHERE id = %s",
                         (file_id,))
            checkpoint("deleted")
    except _Changed:
        return False
    checkpoint("live")
    return True


class _Changed(Exception):
    """The month's hot rows are no longer the file's rows: roll the delete back."""


def recover(conn: psycopg.Connection, store: ColdStore, checkpoint: Checkpoint) -> None:
    """Finish or undo what a killed run left: pending, staged and retired files go, verified
    ones go live (or go, when their rows changed since)."""
    for file_id, org, month, rel, state, checksum in conn.execute(
            "SELECT id, org_id, month, path, state, checksum FROM cold_files"
            " WHERE state <> 'live' ORDER BY id").fetchall():
        if state == "verified" and _make_live(conn, file_id, org, month, checksum, checkpoint):
            log.info("cold: %s made live after an interrupted run", rel)
            continue
        _discard(conn, store, file_id, rel)


def move_month(conn: psycopg.Connection, store: ColdStore, org: UUID, month: date,
               checkpoint: Checkpoint) -> Moved | None:
    """Steps 1-4 for one organisation-month; None when its rows changed meanwhile."""
    file_id = conn.execute("INSERT INTO cold_files (org_id, month, path) VALUES (%s, %s, '')"
                           " RETURNING id", (org, month)).fetchone()[0]  # type: ignore[index]
    rel = coldfiles.relative_path(org, month, file_id)
    conn.execute("UPDATE cold_files SET path = %s WHERE id = %s", (rel, file_id))
    checkpoint("pending")
    lo, hi = month_bounds(month)
    stmt = sql.SQL("SELECT {} FROM calibrated WHERE {}").format(_COLS, sql.SQL(_WHERE))
    rows = conn.execute(stmt, {"org": org, "lo": lo, "hi": hi}).fetchall()
    table = coldfiles.table_from_rows(rows)
    checksum = coldfiles.content_checksum(table)
    size = store.write(rel, table, checkpoint)
    back = store.read(rel)
    if back.num_rows != len(rows) or coldfiles.content_checksum(back) != checksum:
        _discard(conn, store, file_id, rel)
        raise OSError(f"cold file {store.location(rel)} does not read back as written")
    first = min(r[0] for r in rows) if rows else None
    last = max(r[0] for r in rows) if rows else None
    conn.execute("UPDATE cold_files SET state = 'verified', rows = %s, bytes = %s,"
                 " checksum = %s, first_time = %s, last_time = %s WHERE id = %s",
                 (len(rows), size, checksum, first, last, file_id))
    checkpoint("verified")
    if not _make_live(conn, file_id, org, month, checksum, checkpoint):
        _discard(conn, store, file_id, rel)
        log.info("cold: %s changed while it was written; it is moved again next run", rel)
        return None
    return Moved(org, month, rel, len(rows), size)


@contextmanager
def holding_lock(conn: psycopg.Connection) -> Iterator[None]:
    """The cold tier's writer lock on `conn`'s session, waited for: the mover, retention's
    cold part and relabels never rewrite the same month at once."""
    lock = locks.SessionLock(conn.info.dsn, LOCK_NAME, application_name="sds-cold-mover")
    lock.lock(conn)
    try:
        yield
    finally:
        lock.unlock(conn)


def crowded(conn: psycopg.Connection) -> list[tuple[UUID, date]]:
    """Organisation-months with more than one live file (a compaction's work)."""
    rows = conn.execute("SELECT org_id, month FROM cold_files WHERE state = 'live'"
                        " GROUP BY 1, 2 HAVING count(*) > 1 ORDER BY 2, 1").fetchall()
    return [(r[0], r[1]) for r in rows]


def compact(conn: psycopg.Connection, store: ColdStore, org: UUID, month: date,
            checkpoint: Checkpoint) -> Moved | None:
    """The month's live files and hot rows rewritten as one file (aggregate.coldrewrite)."""
    done: Rewritten | None = rewrite(conn, store, org, month, merge_hot=True,
                                     checkpoint=checkpoint)
    if done is None or done.path is None:
        return None
    log.info("cold: %s compacted from %d file(s) and %d hot rows", done.path,
             len(done.replaced), done.merged_hot)
    return Moved(org, month, done.path, done.rows, done.bytes, compacted=True)


def move(conn: psycopg.Connection, *, hot_days: int, cold_path: str,
         checkpoint: Checkpoint = lambda _step: None, now: datetime | None = None,
         guard: Guard = lambda _c: None) -> list[Moved]:
    """One mover pass: recover, then move every organisation-month past the cutoff (a month
    that already has a file is compacted with its new hot rows), then compact months left with
    several files. `conn` must be in autocommit (each step commits on its own); `guard` runs
    before each month (the scheduler's leader check: raising stops the pass there)."""
    if hot_days <= 0:
        raise ValueError("the cold tier is off (SDS_HOT_DAYS unset or 0)")
    store = open_store(cold_path)
    with holding_lock(conn):
        recover(conn, store, checkpoint)
        moved = []
        for org, month in candidates(conn, cutoff(hot_days, now)):
            guard(conn)
            if live_files(conn, org, month):
                done = compact(conn, store, org, month, checkpoint)
            else:
                done = move_month(conn, store, org, month, checkpoint)
            if done is not None:
                moved.append(done)
        for org, month in crowded(conn):
            guard(conn)
            done = compact(conn, store, org, month, checkpoint)
            if done is not None:
                moved.append(done)
        return moved
