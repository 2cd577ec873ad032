"""Scheduled jobs: one per rollup table, each draining that table's dirty marks in batches.

Which buckets are due comes from the data (the marks ingest writes), never from when a job
fires, so catch-up after downtime, DST days and today's partial hour or day need no special
case: ingest marks the current bucket on every batch and each run recomputes it. Every run is
recorded in `job_runs` (one row per execution, with the runner) and `aggregate_runs` (last run
and last error per job, for `aggregate status`).
"""

from __future__ import annotations

import logging
import os
import socket
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

import psycopg
from psycopg_pool import ConnectionPool

from aggregate import (
    coldmove,
    coldrelabel,
    coldretention,
    coldstatus,
    lifecycle,
    rollups,
    water,
)
from aggregate.leader import LeadershipLost
from aggregate.metrics import Metrics
from shared import audit, db
from shared.config import Settings
from shared.db import ROLE_AGGREGATE

log = logging.getLogger(__name__)

BATCH = 2000  # marks per transaction: bounds lock time and memory per step
MAX_BATCHES = 500  # per run; a backlog beyond this continues on the next tick


Guard = Callable[[psycopg.Connection], None]


def runner_name() -> str:
    """host:pid of this process, recorded with each run."""
    return f"{socket.gethostname()}:{os.getpid()}"


def _no_guard(conn: psycopg.Connection) -> None:
    return None


def _start(pool: ConnectionPool, job: str, runner: str, guard: Guard) -> int:
    with pool.connection() as conn:
        guard(conn)  # a process that is not the leader records no run
        row = conn.execute(
            "INSERT INTO job_runs (job, runner) VALUES (%s, %s) RETURNING id",
            (job, runner)).fetchone()
        conn.execute(
            "INSERT INTO aggregate_runs (job, last_start) VALUES (%s, now())"
            " ON CONFLICT (job) DO UPDATE SET last_start = now()", (job,))
    assert row is not None
    return int(row[0])


def _finish(pool: ConnectionPool, job: str, run_id: int, *, buckets: int,
            error: str | None) -> None:
    with pool.connection() as conn:
        conn.execute(
            "UPDATE job_runs SET finished = now(), ok = %s, buckets = %s WHERE id = %s",
            (error is None, buckets, run_id))
        if error is None:
            conn.execute(
                "UPDATE aggregate_runs SET last_finish = now(), last_ok = now(), buckets = %s,"
                " total_runs = total_runs + 1 WHERE job = %s", (buckets, job))
        else:
            conn.execute(
                "UPDATE aggregate_runs SET last_finish = now(), last_error = %s,"
                " last_error_at = now(), buckets = %s, total_runs = total_runs + 1"
                " WHERE job = %s", (error[:2000], buckets, job))


def drain(
    pool: ConnectionPool, *, table: str, low_quality_pct: float, guard: Guard = _no_guard,
    batch: int = BATCH, max_batches: int = MAX_BATCHES, cold_path: str | None = None,
) -> int:
    """Process `table`'s pending marks, one transaction per batch; returns marks processed.

    `guard` runs inside each transaction before the claim and again before commit; when it
    raises (leadership lost) the batch rolls back and its marks stay pending.
    """
    total = 0
    for _ in range(max_batches):
        with pool.connection() as conn, conn.transaction():
            guard(conn)
            n = rollups.process_marks(conn, table=table, limit=batch,
                                      low_quality_pct=low_quality_pct, cold_path=cold_path)
            if table == "daily":
                # The root-zone balance follows the daily rows it reads, in their transaction
                # (aggregate/water.py; marks from the trigger on daily and from settings).
                n += water.process(conn, limit=batch)
            if n:
                # The alert evaluator reads the rewritten buckets now (docs/alerts.md);
                # delivered at commit, so it never looks before they are visible.
                conn.execute("SELECT pg_notify('sds_rollups', %s)", (table,))
            guard(conn)
        total += n
        if n < batch:
            break
    return total


def _recorded(
    pool: ConnectionPool, job: str, work: Callable[[], tuple[int, str | None]], *,
    guard: Guard, runner: str | None, metrics: Metrics | None,
) -> int | None:
    """Run `work` as one run of `job`, recorded in job_runs and aggregate_runs and counted in
    the metrics by outcome (ok, error, lost_lock). `work` returns its count and a note that
    status shows as the run's error (None: a clean run). Returns the count, or None when this
    process did not lead (no run recorded) or lost the lock mid-run; other errors are recorded
    and raised."""
    try:
        run_id = _start(pool, job, runner or runner_name(), guard)
    except LeadershipLost as exc:
        log.warning("job %s not started: %s", job, exc)
        return None
    try:
        count, note = work()
    except LeadershipLost as exc:
        # Expected when the lock session ended mid-run: the open transaction rolled back, and
        # the new leader does its work again (pending marks, rows still past the horizon).
        _finish(pool, job, run_id, buckets=0, error=f"LeadershipLost: {exc}")
        log.warning("job %s rolled back: %s", job, exc)
        if metrics is not None:
            metrics.runs.labels(job, "lost_lock").inc()
        return None
    except Exception as exc:
        _finish(pool, job, run_id, buckets=0, error=f"{type(exc).__name__}: {exc}")
        if metrics is not None:
            metrics.runs.labels(job, "error").inc()
        raise
    _finish(pool, job, run_id, buckets=count, error=note)
    if metrics is not None:
        metrics.runs.labels(job, "ok").inc()
    return count


def run_job(
    pool: ConnectionPool, settings: Settings, *, table: str, guard: Guard = _no_guard,
    runner: str | None = None, metrics: Metrics | None = None,
) -> int:
    """One scheduled run of the `table` rollup, recorded in job_runs and aggregate_runs."""
    started = datetime.now(UTC)

    def work() -> tuple[int, str | None]:
        return drain(pool, table=table, low_quality_pct=settings.low_quality_pct,
                     guard=guard, cold_path=settings.cold_path), None

    n = _recorded(pool, table, work, guard=guard, runner=runner, metrics=metrics)
    if n is None:
        return 0
    if metrics is not None:
        metrics.buckets.labels(table).inc(n)
        with pool.connection() as conn:
            row = conn.execute("SELECT count(*) FROM rollup_dirty WHERE rollup = %s",
                               (table,)).fetchone()
        metrics.pending.labels(table).set(row[0] if row else 0)
    log.info("job %s: %d buckets in %.2f s", table, n,
             (datetime.now(UTC) - started).total_seconds())
    return n


RETENTION_JOB = "retention"


def run_retention(
    pool: ConnectionPool, settings: Settings, *, guard: Guard = _no_guard,
    runner: str | None = None, metrics: Metrics | None = None,
) -> int:
    """One scheduled retention pass (aggregate.lifecycle), recorded in job_runs and
    aggregate_runs as job `retention` with the rows removed as its count."""
    results: list[lifecycle.Result] = []

    def work() -> tuple[int, str | None]:
        with pool.connection() as conn:
            results.extend(lifecycle.run(conn, settings, guard=guard))
            # Readings past a horizon in the cold tier (aggregate/coldretention.py).
            results.append(coldretention.run(conn, settings, guard=guard))
        blocked = "; ".join(f"{r.table}: {r.blocked}" for r in results if r.blocked)
        # A run held back by pending rollups is not an error, but status must say why.
        return sum(r.rows for r in results), f"held back: {blocked}" if blocked else None

    removed = _recorded(pool, RETENTION_JOB, work, guard=guard, runner=runner, metrics=metrics)
    if removed is None:
        return 0
    for r in results:
        log.info("retention %s: %d rows exported to %s and removed%s", r.table, r.rows,
                 r.manifest or "-", f" (held back: {r.blocked})" if r.blocked else "")
    return removed


COLD_JOB = coldstatus.COLD_JOB


def run_cold(
    pool: ConnectionPool, settings: Settings, *, guard: Guard = _no_guard,
    runner: str | None = None, metrics: Metrics | None = None,
) -> int:
    """One scheduled pass of the cold tier (docs/operations.md "Cold tier"): queued relabels of
    cold readings, then the mover (aggregate.coldmove: finish what a killed run left, move the
    months past SDS_HOT_DAYS, compact), recorded as job `cold` with the files made live or
    rewritten as its count. Its own autocommit session, since every step commits alone."""

    def work() -> tuple[int, str | None]:
        with db.connect(settings, name="sds-cold-mover", autocommit=True,
                        role=ROLE_AGGREGATE) as conn:
            relabelled = coldrelabel.run(conn, cold_path=settings.cold_path, guard=guard)
            moved = coldmove.move(conn, hot_days=settings.hot_days,
                                  cold_path=settings.cold_path, guard=guard)
        for m in moved:
            log.info("cold: %s %s %s: %d rows, %d bytes", m.path,
                     "compacted" if m.compacted else "moved", f"{m.month:%Y-%m}", m.rows,
                     m.bytes)
        return len(moved) + relabelled, None

    done = _recorded(pool, COLD_JOB, work, guard=guard, runner=runner, metrics=metrics)
    return done or 0


AUDIT_RETENTION_JOB = "audit_retention"


def run_audit_retention(
    pool: ConnectionPool, settings: Settings, *, guard: Guard = _no_guard,
    runner: str | None = None, metrics: Metrics | None = None,
) -> int:
    """Delete audit log entries past SDS_AUDIT_RETENTION_DAYS (shared.audit.purge), recorded
    as job `audit_retention` with the entries removed as its count."""

    def work() -> tuple[int, str | None]:
        with pool.connection() as conn:
            return audit.purge(conn, settings.audit_retention_days), None

    removed = _recorded(pool, AUDIT_RETENTION_JOB, work, guard=guard, runner=runner,
                        metrics=metrics)
    if removed:
        log.info("audit retention: %d entries older than %d days removed", removed,
                 settings.audit_retention_days)
    return removed or 0


def run_all(
    pool: ConnectionPool, settings: Settings, *, guard: Guard = _no_guard,
    runner: str | None = None,
) -> dict[str, int]:
    """Run every rollup job once, in the fixed table order (the `aggregate run` command)."""
    return {t: run_job(pool, settings, table=t, guard=guard, runner=runner)
            for t in rollups.TABLE_ORDER}


def chunks(start: datetime, end: datetime, days: int) -> list[tuple[datetime, datetime]]:
    """`[start, end)` cut into pieces of at most `days` days."""
    step = timedelta(days=max(1, days))
    out, t = [], start
    while t < end:
        out.append((t, min(t + step, end)))
        t += step
    return out


@dataclass(frozen=True, slots=True)
class Progress:
    """One finished backfill piece: its end, worker share, rows written and readings read."""

    upto: datetime
    share: int
    written: int
    readings: int


def backfill(
    conn: psycopg.Connection, *, tables: Sequence[str], start: datetime, end: datetime,
    devices: Sequence[str] | None, low_quality_pct: float, chunk_days: int = 7,
    progress: Callable[[Progress], None] | None = None, workers: int = 1,
    connect: Callable[[], psycopg.Connection] | None = None, cold_path: str | None = None,
) -> int:
    """Recompute every bucket of `tables` with readings in `[start, end)`, in pieces of
    `chunk_days`, each one transaction (committed as it goes) that reads the piece's readings
    once for all tables; returns rows written. Marks are left alone: a pending mark only causes
    one more, identical, recompute.

    With `workers` > 1 (and `connect` for their connections) the devices are split between
    workers by a hash of their name; each worker goes through the pieces in order, so two
    transactions never write the same row. With `cold_path` (SDS_COLD_PATH) cold readings
    of the range are read too (aggregate.coldrows).
    """
    pieces = chunks(start, end, chunk_days)
    chosen = [t for t in rollups.TABLE_ORDER if t in tables]
    shares = max(1, workers if connect is not None else 1)
    lock = threading.Lock()
    conn.commit()

    def one_share(c: psycopg.Connection, share: int) -> int:
        written = 0
        for i, (lo, hi) in enumerate(pieces):
            with c.transaction():
                n, readings = rollups.recompute_range(
                    c, tables=chosen, start=lo, end=hi, first=i == 0,
                    last=i == len(pieces) - 1, devices=devices,
                    low_quality_pct=low_quality_pct, share=share, shares=shares,
                    cold_path=cold_path)
            written += n
            if progress is not None:
                with lock:
                    progress(Progress(hi, share, n, readings))
        return written

    if shares == 1:
        return one_share(conn, 0)

    def in_worker(share: int) -> int:
        assert connect is not None
        with connect() as c:
            return one_share(c, share)

    with ThreadPoolExecutor(max_workers=shares, thread_name_prefix="backfill") as pool:
        return sum(pool.map(in_worker, range(shares)))
