"""Scheduler configuration (R30, R34) and single-leader failover across processes (R33)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import psycopg
import pytest
from apscheduler.jobstores.memory import MemoryJobStore
from apscheduler.triggers.interval import IntervalTrigger

from aggregate.__main__ import MISFIRE_GRACE, build_scheduler
from aggregate.leader import LeaderLock, LeadershipLost
from shared.config import Settings

ROOT = Path(__file__).resolve().parents[2]


def test_scheduler_runs_in_utc_on_interval_triggers_with_fixed_jobs() -> None:
    settings = Settings(aggregate_interval=60)
    leader = LeaderLock("postgresql://unused")
    scheduler = build_scheduler(None, settings, leader, "test:1")  # type: ignore[arg-type]
    assert str(scheduler.timezone) == "UTC"
    jobs = {j.id: j for j in scheduler.get_jobs()}
    assert set(jobs) == {"hourly", "local_hourly", "daily", "leader-watchdog"}
    for job in jobs.values():
        assert isinstance(job.trigger, IntervalTrigger)
        assert str(job.trigger.timezone) == "UTC"
        assert job.coalesce is True and job.max_instances == 1
        assert job.misfire_grace_time == MISFIRE_GRACE >= 3600
    assert jobs["daily"].trigger.interval == timedelta(seconds=60)
    # Only the in-memory store: no persistent job store shared between replicas.
    assert set(scheduler._jobstores) == {"default"}
    assert isinstance(scheduler._jobstores["default"], MemoryJobStore)
    # Building again (a restart) defines the same jobs, never duplicates.
    again = build_scheduler(None, settings, leader, "test:1")  # type: ignore[arg-type]
    assert sorted(j.id for j in again.get_jobs()) == sorted(jobs)


def test_interval_trigger_fires_evenly_across_dst_dates() -> None:
    trigger = IntervalTrigger(seconds=3600, timezone=UTC,
                              start_date=datetime(2024, 1, 1, tzinfo=UTC))
    fires, prev = [], None
    now = datetime(2024, 1, 1, tzinfo=UTC)
    for _ in range(24 * 366):
        nxt = trigger.get_next_fire_time(prev, now)
        fires.append(nxt)
        prev, now = nxt, nxt
    gaps = {b - a for a, b in zip(fires, fires[1:], strict=False)}
    assert gaps == {timedelta(hours=1)}


def test_guard_rejects_a_process_without_the_lock(database_url) -> None:
    a, b = LeaderLock(database_url), LeaderLock(database_url)
    try:
        assert a.try_acquire() and not b.try_acquire()
        with psycopg.connect(database_url) as conn:
            a.guard(conn)
            with pytest.raises(LeadershipLost):
                b.guard(conn)
            conn.execute("SELECT pg_terminate_backend(%s)", (a.backend_pid,))
            time.sleep(0.2)
            with pytest.raises(LeadershipLost):
                a.guard(conn)
        assert not a.alive()
        assert b.try_acquire()
    finally:
        a.release()
        b.release()


def _spawn(database_url: str, log: Path) -> subprocess.Popen[bytes]:
    env = {**os.environ, "SDS_DATABASE_URL": database_url, "SDS_AGGREGATE_INTERVAL": "1",
           "SDS_AGGREGATE_METRICS_PORT": "0", "SDS_LOG_LEVEL": "INFO"}
    with log.open("wb") as out:
        return subprocess.Popen([sys.executable, "-m", "aggregate"], cwd=ROOT, env=env,
                                stdout=out, stderr=subprocess.STDOUT)


def _runs(conn: psycopg.Connection) -> list[tuple[str, str, datetime, bool | None]]:
    return conn.execute("SELECT job, runner, started, ok FROM job_runs ORDER BY started"
                        ).fetchall()


def _wait(predicate, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}")


@pytest.mark.chaos
def test_two_schedulers_one_leader_and_failover(database_url, tmp_path, figures) -> None:
    procs = [_spawn(database_url, tmp_path / f"s{i}.log") for i in range(2)]
    try:
        with psycopg.connect(database_url, autocommit=True) as conn:
            _wait(lambda: len({r[1] for r in _runs(conn)}) >= 1 and len(_runs(conn)) >= 9,
                  30, "the first leader's runs")
            time.sleep(3)  # a few more ticks with both processes up
            runs = _runs(conn)
            runners = {r[1] for r in runs}
            assert len(runners) == 1, f"two schedulers ran jobs: {runners}"
            leader = runners.pop()
            pid = int(leader.rsplit(":", 1)[1])
            assert pid in {p.pid for p in procs}
            # One run per tick: runs of one job never start within the same second.
            for job in ("hourly", "local_hourly", "daily"):
                starts = [r[2] for r in runs if r[0] == job]
                assert len(starts) >= 3
                gaps = [(b - a).total_seconds() for a, b in zip(starts, starts[1:],
                                                                   strict=False)]
                assert min(gaps) > 0.5, gaps

            killed_at = time.monotonic()
            os.kill(pid, signal.SIGKILL)
            _wait(lambda: any(r[1] != leader for r in _runs(conn)), 20, "the standby's runs")
            failover = time.monotonic() - killed_at
            assert failover < 10, failover
            survivor = next(p for p in procs if p.pid != pid)
            assert survivor.poll() is None
            after = [r for r in _runs(conn) if r[1] != leader]
            assert {r[1] for r in after} == {f"{r[1].rsplit(':', 1)[0]}:{survivor.pid}"
                                             for r in after}
            print(f"failover {failover:.1f} s")  # noqa: T201 - shown with -s
            figures.record("scheduler.runs_per_tick", "1 (one runner, >= 0.5 s between runs of"
                           " a job, 2 replicas)", section="scheduler",
                           title="Runs per tick per job across scheduler replicas (R33)",
                           target="exactly 1", source="tests/aggregate/test_scheduler.py")
            figures.record("scheduler.failover_s", round(failover, 1), section="scheduler",
                           title="Scheduler failover after SIGKILL of the leader, s (R33)",
                           target="<= lock poll + 1 tick",
                           source="tests/aggregate/test_scheduler.py")

            # Ending the leader's lock session stops its jobs; it leads again once the lock
            # is free, and runs resume.
            conn.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
                         " WHERE application_name = 'sds-aggregate-leader'")
            cut = datetime.now(UTC)
            _wait(lambda: sum(1 for r in _runs(conn) if r[2] > cut + timedelta(seconds=1)
                              and r[3]) >= 3, 20, "runs after the lock session was ended")
    finally:
        for p in procs:
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
        for p in procs:
            try:
                p.wait(10)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait(5)
    logs = [(tmp_path / f"s{i}.log").read_text() for i in range(len(procs))]
    for text in logs:
        assert "Traceback" not in text, text[-3000:]
    assert any("scheduler lock lost" in text for text in logs)


def test_long_run_is_not_overlapped_and_skips_are_counted(settings, monkeypatch, caplog) -> None:
    """A run longer than its interval: no second instance, the skipped ticks are logged and
    counted, and runs never overlap (R32)."""
    import threading

    from aggregate import jobs
    from aggregate.metrics import Metrics
    from shared.db import make_pool

    real_drain = jobs.drain

    def slow_drain(*args, **kwargs):  # type: ignore[no-untyped-def]
        time.sleep(2.5)
        return real_drain(*args, **kwargs)

    monkeypatch.setattr(jobs, "drain", slow_drain)
    pool = make_pool(settings.replace(aggregate_interval=1), name="sds-aggregate-test")
    leader = LeaderLock(settings.database_url)
    metrics = Metrics()
    try:
        assert leader.try_acquire()
        scheduler = build_scheduler(pool, settings.replace(aggregate_interval=1), leader,
                                    "test:1", metrics)
        thread = threading.Thread(target=scheduler.start, daemon=True)
        thread.start()
        with psycopg.connect(settings.database_url, autocommit=True) as conn:
            _wait(lambda: conn.execute("SELECT count(*) FROM job_runs WHERE job = 'hourly'"
                                       " AND finished IS NOT NULL").fetchone()[0] >= 2,
                  20, "two finished hourly runs")
            scheduler.shutdown(wait=True)
            thread.join(10)
            runs = conn.execute("SELECT started, finished FROM job_runs WHERE job = 'hourly'"
                                " AND finished IS NOT NULL ORDER BY started").fetchall()
        for (_, end), (start, _) in zip(runs, runs[1:], strict=False):
            assert start >= end, "two runs of one job overlapped"
        skipped = metrics.registry.get_sample_value("sds_aggregate_ticks_skipped_total",
                                                    {"job": "hourly"})
        assert skipped and skipped >= 1
        assert "still running at its next tick" in caplog.text
        ok = metrics.registry.get_sample_value("sds_aggregate_runs_total",
                                               {"job": "hourly", "outcome": "ok"})
        assert ok and ok >= 2
    finally:
        leader.release()
        pool.close()
