"""How a scheduled run is recorded (aggregate.jobs): its job_runs row, aggregate_runs and the
metrics, for a run that finishes, fails, loses the scheduler lock mid-run, or is not started
because this process does not lead. Rollup and retention runs share the same record."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import psycopg
import pytest

from aggregate import jobs
from aggregate.leader import LeadershipLost
from aggregate.metrics import Metrics
from shared.config import Settings
from shared.db import ROLE_AGGREGATE, make_pool
from tests.support.readings import insert_readings, series
from tests.support.rollups import make_location

START = datetime(2024, 5, 1, tzinfo=UTC)


@pytest.fixture
def pool(db: psycopg.Connection, settings: Settings) -> Iterator[Any]:
    """The scheduler's pool, over a day of readings whose hourly marks are pending."""
    loc = make_location(db, "UTC")
    insert_readings(db, "J1", loc, series(START, START + timedelta(days=1),
                                          tair=lambda k, t: float(k % 11)), marks=True)
    db.commit()
    p = make_pool(settings, name="sds-aggregate", role=ROLE_AGGREGATE)
    try:
        yield p
    finally:
        p.close()


def _fails_at(call: int, exc: Exception) -> Callable[[psycopg.Connection], None]:
    """A guard that passes until its `call`-th check, which raises `exc`."""
    calls = 0

    def guard(conn: psycopg.Connection) -> None:
        nonlocal calls
        calls += 1
        if calls >= call:
            raise exc
    return guard


def _runs(db: psycopg.Connection, job: str) -> list[tuple[Any, ...]]:
    db.rollback()
    return db.execute("SELECT runner, finished IS NOT NULL, ok, buckets FROM job_runs"
                      " WHERE job = %s ORDER BY id", (job,)).fetchall()


def _status(db: psycopg.Connection, job: str) -> tuple[Any, ...] | None:
    db.rollback()
    return db.execute("SELECT last_ok IS NOT NULL, last_error, buckets, total_runs"
                      " FROM aggregate_runs WHERE job = %s", (job,)).fetchone()


def _pending(db: psycopg.Connection, table: str) -> int:
    db.rollback()
    return int(db.execute("SELECT count(*) FROM rollup_dirty WHERE rollup = %s",
                          (table,)).fetchone()[0])


def _count(metrics: Metrics, name: str, **labels: str) -> float:
    value = metrics.registry.get_sample_value(name, labels)
    return 0.0 if value is None else value


def test_a_finished_run_is_recorded_with_its_buckets_and_counted(
    db: psycopg.Connection, pool: Any, settings: Settings,
) -> None:
    marks = _pending(db, "hourly")
    assert marks > 0
    metrics = Metrics()
    n = jobs.run_job(pool, settings, table="hourly", runner="t:1", metrics=metrics)
    assert n == marks
    assert _runs(db, "hourly") == [("t:1", True, True, n)]
    assert _status(db, "hourly") == (True, None, n, 1)
    assert _count(metrics, "sds_aggregate_runs_total", job="hourly", outcome="ok") == 1
    assert _count(metrics, "sds_aggregate_buckets_recomputed_total", table="hourly") == n
    assert _count(metrics, "sds_aggregate_pending_marks", table="hourly") == 0


def test_a_process_that_does_not_lead_records_no_run(
    db: psycopg.Connection, pool: Any, settings: Settings, tmp_path: Path,
) -> None:
    metrics = Metrics()
    lost = LeadershipLost("not the leader")
    assert jobs.run_job(pool, settings, table="hourly", guard=_fails_at(1, lost),
                        metrics=metrics) == 0
    retention = Settings(database_url=settings.database_url, retention_export_dir=str(tmp_path))
    assert jobs.run_retention(pool, retention, guard=_fails_at(1, lost), metrics=metrics) == 0
    assert _runs(db, "hourly") == [] and _runs(db, jobs.RETENTION_JOB) == []
    assert _status(db, "hourly") is None and _status(db, jobs.RETENTION_JOB) is None
    assert metrics.registry.get_sample_value(
        "sds_aggregate_runs_total", {"job": "hourly", "outcome": "lost_lock"}) is None


def test_a_run_that_loses_the_lock_is_recorded_as_rolled_back(
    db: psycopg.Connection, pool: Any, settings: Settings, tmp_path: Path,
) -> None:
    """The first guard call is _start's; the second is inside the first batch, which rolls
    back and leaves every mark pending for the next leader."""
    marks = _pending(db, "hourly")
    metrics = Metrics()
    lost = LeadershipLost("scheduler lock no longer held by this process")
    assert jobs.run_job(pool, settings, table="hourly", guard=_fails_at(2, lost),
                        runner="t:2", metrics=metrics) == 0
    assert _pending(db, "hourly") == marks
    assert _runs(db, "hourly") == [("t:2", True, False, 0)]
    ok, error, buckets, total = _status(db, "hourly") or (None, None, None, None)
    assert (ok, buckets, total) == (False, 0, 1)
    assert error == f"LeadershipLost: {lost}"
    assert _count(metrics, "sds_aggregate_runs_total", job="hourly", outcome="lost_lock") == 1
    assert _count(metrics, "sds_aggregate_runs_total", job="hourly", outcome="ok") == 0

    # Retention is recorded the same way, and counted with the same outcome.
    retention = Settings(database_url=settings.database_url, retention_export_dir=str(tmp_path))
    assert jobs.run_retention(pool, retention, guard=_fails_at(2, lost), runner="t:2",
                              metrics=metrics) == 0
    assert _runs(db, jobs.RETENTION_JOB) == [("t:2", True, False, 0)]
    assert (_status(db, jobs.RETENTION_JOB) or ())[1] == f"LeadershipLost: {lost}"
    assert _count(metrics, "sds_aggregate_runs_total", job=jobs.RETENTION_JOB,
                  outcome="lost_lock") == 1


def test_a_failed_run_is_recorded_counted_and_raised(
    db: psycopg.Connection, pool: Any, settings: Settings, tmp_path: Path,
) -> None:
    metrics = Metrics()
    with pytest.raises(RuntimeError, match="disk on fire"):
        jobs.run_job(pool, settings, table="daily", guard=_fails_at(2, RuntimeError(
            "disk on fire")), runner="t:3", metrics=metrics)
    assert _runs(db, "daily") == [("t:3", True, False, 0)]
    assert _status(db, "daily") == (False, "RuntimeError: disk on fire", 0, 1)
    assert _count(metrics, "sds_aggregate_runs_total", job="daily", outcome="error") == 1

    retention = Settings(database_url=settings.database_url, retention_export_dir=str(tmp_path))
    with pytest.raises(RuntimeError, match="disk on fire"):
        jobs.run_retention(pool, retention, guard=_fails_at(2, RuntimeError("disk on fire")),
                           runner="t:3", metrics=metrics)
    assert _runs(db, jobs.RETENTION_JOB) == [("t:3", True, False, 0)]
    assert _status(db, jobs.RETENTION_JOB) == (False, "RuntimeError: disk on fire", 0, 1)
    assert _count(metrics, "sds_aggregate_runs_total", job=jobs.RETENTION_JOB,
                  outcome="error") == 1
