"""A frozen scheduler process (reliability plan R31): SIGSTOP `python -m aggregate` for several
of its intervals, SIGCONT, and check that each job runs once, coalesced, with no missed-run
event; the negative control with APScheduler's 1 s grace time reports the missed runs.

Run times come from `job_runs` (one row per execution, stamped by PostgreSQL); the process
runs on the machine's clock too, so both are compared in wall-clock seconds.
"""

from __future__ import annotations

import math
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psycopg
import pytest

from tests.support.figures import Figures
from tests.support.ingesting import wait_for

pytestmark = pytest.mark.chaos

ROOT = Path(__file__).resolve().parents[2]
INTERVAL = 4  # seconds between runs of each job (room for resumed runs to start when busy)
PAUSE_TICKS = 3  # intervals the process stays frozen (at least)
JOBS = ("hourly", "local_hourly", "daily")


def _spawn(url: str, log: Path, grace: int | None = None) -> subprocess.Popen[bytes]:
    """`python -m aggregate`; `grace` overrides its misfire grace time (negative control)."""
    env = {**os.environ, "SDS_DATABASE_URL": url, "SDS_AGGREGATE_INTERVAL": str(INTERVAL),
           "SDS_AGGREGATE_METRICS_PORT": "0", "SDS_LOG_LEVEL": "INFO"}
    if grace is None:
        cmd = [sys.executable, "-m", "aggregate"]
    else:
        # build_scheduler reads the module constant when it builds the jobs.
        cmd = [sys.executable, "-c", "import sys, aggregate.__main__ as m; "
               f"m.MISFIRE_GRACE = {grace}; sys.exit(m.main())"]
    with log.open("wb") as out:
        return subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT)


def _starts(conn: psycopg.Connection, job: str) -> list[float]:
    rows = conn.execute("SELECT started FROM job_runs WHERE job = %s ORDER BY started",
                        (job,)).fetchall()
    return [r[0].timestamp() for r in rows]


def _grid(starts: list[float]) -> float:
    """A time the interval trigger ticks at (it ticks at grid + k * INTERVAL).

    The trigger's grid is the scheduled time of the first run, stamped before the process
    connects and takes the scheduler lock, so the first run's start can lag it by a second or
    more on a busy machine. Later runs are woken by the trigger itself: the earliest of them,
    folded back onto one interval, is the grid to within the wake-up lag."""
    later = starts[1:]
    return min(t - round((t - later[0]) / INTERVAL) * INTERVAL for t in later)


def _quiet_moment(conn: psycopg.Connection, grid: float) -> None:
    """Sleep to the middle of an interval in which no run is in flight.

    A run frozen mid-flight is still running when the process resumes, so the scheduler skips
    that job's due run as "maximum instances reached" and never reports it missed: the
    negative control failed that way in CI (the freeze had started just as a run began)."""
    deadline = time.time() + 10 * INTERVAL
    while time.time() < deadline:
        now = time.time()
        middle = grid + (math.floor((now - grid) / INTERVAL) + 0.5) * INTERVAL
        if middle < now + 0.1:
            middle += INTERVAL
        time.sleep(middle - now)
        # Only recent rows: a run of an earlier test's process may have been killed unfinished.
        if not conn.execute("SELECT 1 FROM job_runs WHERE finished IS NULL"
                            " AND started > now() - interval '1 minute'").fetchone():
            return
    raise AssertionError("no interval without a run in flight: a run takes longer than "
                         f"{INTERVAL / 2} s here")


def _freeze(proc: subprocess.Popen[bytes], conn: psycopg.Connection,
            phase: float = 0.5) -> tuple[float, float]:
    """SIGSTOP for at least PAUSE_TICKS intervals, SIGCONT `phase` of an interval after a tick
    (half way by default, so the coalesced run and the next regular tick are an interval
    apart); returns (stop, cont)."""
    wait_for(lambda: all(len(_starts(conn, j)) >= 3 for j in JOBS), 30, 0.1,
             what="three runs of every job")
    grid = _grid(_starts(conn, "hourly"))
    _quiet_moment(conn, grid)
    os.kill(proc.pid, signal.SIGSTOP)
    stopped = time.time()
    k = int((stopped + PAUSE_TICKS * INTERVAL - grid) // INTERVAL) + 1
    cont_at = grid + k * INTERVAL + INTERVAL * phase
    time.sleep(max(0.0, cont_at - time.time()))
    os.kill(proc.pid, signal.SIGCONT)
    return stopped, time.time()


def _stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        os.kill(proc.pid, signal.SIGCONT)
        proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(15)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(5)


def test_frozen_scheduler_runs_each_job_once_on_resume(
    database_url: str, tmp_path: Path, figures: Figures,
) -> None:
    """R31: after a freeze of several intervals each job runs exactly once at resume (coalesced:
    the work comes from the dirty marks, one run catches up), then on its normal interval;
    no EVENT_JOB_MISSED with the shipped grace time."""
    log = tmp_path / "aggregate.log"
    proc = _spawn(database_url, log)
    try:
        with psycopg.connect(database_url, autocommit=True) as conn:
            stopped, cont = _freeze(proc, conn)
            wait_for(lambda: all(any(t > cont + 0.9 for t in _starts(conn, j)) for j in JOBS),
                     15, 0.1, what="runs after the resume")
            burst = {}
            for job in JOBS:
                starts = _starts(conn, job)
                assert not [t for t in starts if stopped + 0.3 < t < cont - 0.3], \
                    "a run started while the process was frozen"
                # The first run after the resume is the coalesced one. On a busy machine it can
                # start seconds late (CI saw > 1.9 s), so it is found, not expected in a fixed
                # window: what must not happen is a replay, i.e. several runs within about a
                # second of it (a replay of the missed ticks starts them back to back).
                resumed = [t for t in starts if t >= cont - 0.3]
                burst[job] = len([t for t in resumed if t - resumed[0] < INTERVAL / 4])
                assert resumed[0] - cont < 2 * INTERVAL, (job, resumed[0] - cont)
            assert burst == {j: 1 for j in JOBS}, burst
    finally:
        _stop(proc)
    text = log.read_text()
    assert "missed its run time" not in text, text[-2000:]
    assert "Traceback" not in text, text[-2000:]
    figures.record("scheduler.freeze_coalesced",
                   {"frozen s": round(cont - stopped, 1), "ticks missed": PAUSE_TICKS,
                    "runs per job at resume": 1, "missed-run events": 0},
                   section="scheduler",
                   title="Scheduler process frozen (SIGSTOP) for several intervals, then "
                         "resumed (R31)",
                   target="1 coalesced run per job; 0 missed",
                   source="tests/chaos/test_scheduler_pause.py")


def test_short_grace_time_misses_runs_after_a_freeze(database_url: str, tmp_path: Path) -> None:
    """R31 negative control: with APScheduler's default-like 1 s grace time the same freeze
    makes the scheduler skip the runs (EVENT_JOB_MISSED), which the shipped 24 h grace avoids."""
    log = tmp_path / "aggregate.log"
    proc = _spawn(database_url, log, grace=1)
    try:
        with psycopg.connect(database_url, autocommit=True) as conn:
            # Resume 3.2 s after a tick: even the latest due run is then past the 1 s grace
            # for every job (half way, 2.0 s, would leave less room for scheduling lag).
            _freeze(proc, conn, phase=0.8)
            # Each job's missed-run event is logged by its own executor callback: wait for
            # all of them, not just the first.
            wait_for(lambda: all(f"job {j} missed its run time" in log.read_text()
                                 for j in JOBS), 10, 0.1, what="every job's missed-run warning")
    finally:
        _stop(proc)
    assert all(f"job {j} missed its run time" in log.read_text() for j in JOBS)

