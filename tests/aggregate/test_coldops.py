"""The cold tier's operational life (issue 36; docs/operations.md "Cold tier"): what touched raw
rows keeps working once months are cold. Late readings of a cold month are compacted into its
file; rollup recomputes (marks, backfill) read the cold rows; retention exports and removes
cold rows past a horizon; a device moved over cold months has its cold rows relabelled. Each
rewrite survives a SIGKILL after every one of its steps (aggregate.coldrewrite.STEPS), with
every reading counted exactly once after the kill and the job done by the next run."""

from __future__ import annotations

import csv
import gzip
import io
import os
import signal
import subprocess
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from uuid import UUID

import psycopg
import pyarrow.parquet as pq
import pytest
from psycopg import sql

from admin.cold import FAILPOINT_ENV
from aggregate import coldmove, coldrelabel, coldretention, coldrewrite, jobs, lifecycle
from people import accounts
from shared import coldfiles, places
from shared.columns import TABLES, Rollup
from shared.config import Settings
from tests.support.readings import insert_readings
from tests.support.rollups import run_all
from tests.support.warmfork import run_sds

pytestmark = pytest.mark.usefixtures("processes")

ROOT = Path(__file__).resolve().parents[2]
NOW = datetime.now(UTC).replace(minute=0, second=0, microsecond=0)
HOT_DAYS = 40
CUTOFF = coldmove.cutoff(HOT_DAYS)
START = datetime(CUTOFF.year - (CUTOFF.month <= 4), (CUTOFF.month - 5) % 12 + 1, 1, tzinfo=UTC)
STEP = timedelta(hours=3)


def _world(conn: psycopg.Connection) -> dict[str, Any]:
    """Organisation Ops1 (devices O1, O2, readings at location A but not deployed, so a move may
    start anywhere; location B unused) and Ops2 (P1): a reading every 3 hours from four months
    before the mover's cutoff until now, marked."""
    ids: dict[str, Any] = {}
    for org_name, devices in (("Ops1", ("O1", "O2")), ("Ops2", ("P1",))):
        org = accounts.create_org(conn, name=org_name)
        ids[org_name] = org
        loc = places.create_location(conn, org=org, loc=places.LocationInput(
            name=f"{org_name} A", tz_name="Europe/Paris"))
        ids[f"{org_name} A"] = loc
        ids[f"{org_name} B"] = places.create_location(conn, org=org, loc=places.LocationInput(
            name=f"{org_name} B", tz_name="America/Chicago"))
        for i, dev in enumerate(devices):
            places.register_device(conn, org=org, name=dev)
            rows, t, k = [], START + timedelta(minutes=5 * i), 0
            while t < NOW:
                rows.append({"time": t, "tair": 10 + (k % 17) * 0.41, "rh": 0.6,
                             "precip": None if k % 4 else 0.4})
                t += STEP
                k += 1
            insert_readings(conn, dev, loc, rows, marks=True)
    conn.commit()
    return ids


def _readable(url: str, root: Path) -> list[tuple[Any, ...]]:
    """Every reading a reader counts: hot rows, plus readable files' rows without a hot copy,
    as serve.coldread merges them (a reading in two readable files would be counted twice)."""
    with psycopg.connect(url) as conn:
        hot = conn.execute(f"SELECT {', '.join(coldfiles.NAMES)} FROM calibrated").fetchall()
        paths = [r[0] for r in conn.execute(
            "SELECT path FROM cold_files WHERE state = ANY(%s)",
            (list(coldfiles.READABLE),)).fetchall()]
    keys = {(r[1], r[0]) for r in hot}
    rows = [tuple(str(v) if isinstance(v, UUID) else v for v in r) for r in hot]
    for rel in paths:
        for rec in pq.read_table(root / rel, schema=coldfiles.SCHEMA).to_pylist():
            if (rec["device"], rec["time"]) not in keys:
                rows.append(tuple(rec[n] for n in coldfiles.NAMES))
    return rows


def _summary(rows: list[tuple[Any, ...]]) -> tuple[int, str]:
    return len(rows), coldfiles.content_checksum(coldfiles.table_from_rows(rows))


def _tidy(url: str, root: Path) -> None:
    """After a finished run: every catalogue row live, one file per org-month, the files on
    disk exactly the catalogue's, each reading back to its recorded rows and checksum."""
    with psycopg.connect(url) as conn:
        files = conn.execute("SELECT path, rows, checksum, state, org_id, month"
                             " FROM cold_files").fetchall()
    assert {f[3] for f in files} == {"live"}
    assert len({(f[4], f[5]) for f in files}) == len(files)
    for rel, rows, checksum, _s, _o, _m in files:
        table = pq.read_table(root / rel, schema=coldfiles.SCHEMA)
        assert (table.num_rows, coldfiles.content_checksum(table)) == (rows, checksum)
    on_disk = sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_file())
    assert on_disk == sorted(f[0] for f in files)


def _env(url: str, root: Path, failpoint: str | None, **extra: str) -> dict[str, str]:
    env = {**os.environ, "SDS_DATABASE_URL": url, "SDS_COLD_PATH": str(root),
           "SDS_DB_ROLES": "false", **extra}
    env.pop(FAILPOINT_ENV, None)
    if failpoint:
        env[FAILPOINT_ENV] = failpoint
    return env


def _sds(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    """`sds ARGS` in a process of its own (a failpoint's SIGKILL ends only it), forked from a
    warm interpreter: 3 runs in each of 21 kill tests, the start-up was most of their time."""
    return run_sds(env, *args, cwd=ROOT, timeout=600)


def _late(conn: psycopg.Connection, ids: dict[str, Any]) -> list[datetime]:
    """Late readings for O1 in two months already cold (off the 3-hour grid), marked."""
    times = [START + timedelta(days=2, minutes=7), START + timedelta(days=40, minutes=7)]
    insert_readings(conn, "O1", ids["Ops1 A"], [{"time": t, "tair": 3.25} for t in times],
                    marks=True)
    conn.commit()
    return times


# ---- (a) late readings: compaction -----------------------------------------------------------

def test_late_readings_of_a_cold_month_are_compacted_into_its_one_file(
        conn: psycopg.Connection, database_url: str, tmp_path: Path) -> None:
    ids = _world(conn)
    root = tmp_path / "cold"
    with psycopg.connect(database_url, autocommit=True) as c:
        first = coldmove.move(c, hot_days=HOT_DAYS, cold_path=str(root))
    assert {m.month for m in first} == {
        (START + timedelta(days=31 * i)).date().replace(day=1) for i in range(4)}
    _late(conn, ids)
    expected = _summary(_readable(database_url, root))  # late rows hot, read with the cold
    with psycopg.connect(database_url, autocommit=True) as c:
        second = coldmove.move(c, hot_days=HOT_DAYS, cold_path=str(root))
        left = c.execute("SELECT count(*) FROM calibrated WHERE device = 'O1' AND time < %s",
                         (CUTOFF,)).fetchone()
    assert [m.compacted for m in second] == [True, True]
    assert left == (0,)
    assert _summary(_readable(database_url, root)) == expected
    _tidy(database_url, root)  # one file per organisation-month, not a second one


@pytest.mark.chaos
@pytest.mark.parametrize("step", coldrewrite.STEPS)
def test_compaction_killed_at_each_step_loses_and_doubles_nothing(
        conn: psycopg.Connection, database_url: str, tmp_path: Path, step: str) -> None:
    ids = _world(conn)
    root = tmp_path / "cold"
    env = _env(database_url, root, None)
    assert _sds(env, "cold", "move", "--hot-days", str(HOT_DAYS)).returncode == 0
    _late(conn, ids)
    expected = _summary(_readable(database_url, root))

    killed = _sds(_env(database_url, root, step), "cold", "move", "--hot-days", str(HOT_DAYS))
    assert killed.returncode == -signal.SIGKILL, killed.stdout + killed.stderr
    assert _summary(_readable(database_url, root)) == expected

    done = _sds(env, "cold", "move", "--hot-days", str(HOT_DAYS))
    assert done.returncode == 0, done.stderr
    assert _summary(_readable(database_url, root)) == expected
    _tidy(database_url, root)


# ---- (c) rollup recomputes read cold rows ----------------------------------------------------

def _rollups(conn: psycopg.Connection) -> list[tuple[Any, ...]]:
    """Every rollup row, all columns but the bookkeeping times."""
    out = []
    for name in ("hourly", "local_hourly", "daily"):
        skip = [c.name for c in TABLES[name].columns
                if c.rollup in (Rollup.CREATE_TIME, Rollup.UPDATE_TIME)]
        out += conn.execute(sql.SQL("SELECT {}, to_jsonb(t) - %s::text[] FROM {} t"
                                    " ORDER BY device, time, location").format(
            sql.Literal(name), sql.Identifier(name)), (skip,)).fetchall()
    return out


def test_rollup_recomputes_over_cold_months_read_the_cold_rows(
        conn: psycopg.Connection, database_url: str, tmp_path: Path) -> None:
    _world(conn)
    root = tmp_path / "cold"
    run_all(conn)
    conn.commit()
    before = _rollups(conn)
    with psycopg.connect(database_url, autocommit=True) as c:
        assert coldmove.move(c, hot_days=HOT_DAYS, cold_path=str(root))
    # Marks for every cold bucket of O1 (as a relabel or `mark-location` writes them): the
    # recompute must find the same readings, now in files.
    with conn.transaction():
        conn.execute("INSERT INTO rollup_dirty (rollup, device, bucket) SELECT r, 'O1', b"
                     " FROM unnest(ARRAY['hourly', 'local_hourly', 'daily']) r,"
                     " generate_series(%s::timestamptz, %s, '1 hour') b", (START, CUTOFF))
        run_all(conn, cold_path=str(root))
    assert _rollups(conn) == before
    # A backfill over the whole cold range (sds aggregate backfill) too.
    written = jobs.backfill(conn, tables=("hourly", "local_hourly", "daily"), start=START,
                            end=CUTOFF, devices=None, low_quality_pct=80.0,
                            cold_path=str(root))
    assert written > 0
    assert _rollups(conn) == before


def test_a_late_reading_in_a_cold_month_adds_to_its_hour(
        conn: psycopg.Connection, database_url: str, tmp_path: Path) -> None:
    ids = _world(conn)
    root = tmp_path / "cold"
    run_all(conn)
    conn.commit()
    hour = START + timedelta(days=2)
    row = "SELECT tair, sample_pct FROM hourly WHERE device = 'O1' AND time = %s"
    before = conn.execute(row, (hour,)).fetchone()
    with psycopg.connect(database_url, autocommit=True) as c:
        coldmove.move(c, hot_days=HOT_DAYS, cold_path=str(root))
    _late(conn, ids)
    run_all(conn, cold_path=str(root))
    after = conn.execute(row, (hour,)).fetchone()
    assert before is not None and after is not None
    # The hour held one reading; with the late one (3.25) its mean is of both.
    assert after[0] == pytest.approx((before[0] + 3.25) / 2, abs=0.06)
    assert after[1] > before[1]


# ---- (b) retention over cold rows --------------------------------------------------------------

def _retention_settings(root: Path, exports: Path) -> Settings:
    return Settings(cold_path=str(root), retention_export_dir=str(exports),
                    ingest_horizon_days=30)


def _exported(exports: Path) -> list[tuple[str, str]]:
    """(device, time as printed) of every cold row in the export."""
    out = []
    for path in sorted(exports.rglob("*-cold*.csv.gz")):
        with gzip.open(path, "rt") as fh:
            out += [(r["device"], r["time"]) for r in csv.DictReader(io.StringIO(fh.read()))]
    return out


def _horizon(conn: psycopg.Connection, ids: dict[str, Any]) -> datetime:
    """Ops1 keeps 1.5 months less than the cold tier holds: its horizon cuts a cold month."""
    days = (NOW - START).days - 45
    conn.execute("UPDATE organisations SET calibrated_retention_days = %s WHERE id = %s",
                 (days, ids["Ops1"]))
    conn.execute("DELETE FROM rollup_dirty")  # rollups are not this test's subject
    conn.commit()
    # Retention's horizon is its own now() less the days, not the module's hour-truncated NOW
    # (a run 24 minutes past the hour removed the readings of the hour's first minutes too).
    return datetime.now(UTC) - timedelta(days=days)


def test_retention_exports_and_removes_cold_rows_past_the_horizon(
        conn: psycopg.Connection, database_url: str, tmp_path: Path) -> None:
    ids = _world(conn)
    root, exports = tmp_path / "cold", tmp_path / "exports"
    with psycopg.connect(database_url, autocommit=True) as c:
        coldmove.move(c, hot_days=HOT_DAYS, cold_path=str(root))
    everything = _readable(database_url, root)
    cutoff = _horizon(conn, ids)
    ops1 = {"O1", "O2"}
    gone = sorted((r[1], r[0]) for r in everything if r[1] in ops1 and r[0] < cutoff)
    kept = [r for r in everything if not (r[1] in ops1 and r[0] < cutoff)]
    settings = _retention_settings(root, exports)
    with psycopg.connect(database_url) as c:
        lifecycle.run(c, settings, ("calibrated",))
        result = coldretention.run(c, settings)
    assert result.blocked is None and result.rows == len(gone) > 0
    assert _summary(_readable(database_url, root)) == _summary(kept)
    with psycopg.connect(database_url) as c:
        c.execute("SET TimeZone = 'UTC'")
        printed = {t: str(c.execute("SELECT %s::timestamptz::text",
                                    (t,)).fetchone()[0])  # type: ignore[index]
                   for _d, t in gone}
    assert sorted(_exported(exports)) == sorted((d, printed[t]) for d, t in gone)
    _tidy(database_url, root)


# ---- (d) relabels of cold rows ---------------------------------------------------------------

def _locations(url: str, root: Path, device: str) -> dict[datetime, str | None]:
    return {r[0]: r[2] for r in _readable(url, root) if r[1] == device}


def test_moving_a_device_over_cold_months_relabels_its_cold_rows(
        conn: psycopg.Connection, database_url: str, tmp_path: Path) -> None:
    ids = _world(conn)
    root = tmp_path / "cold"
    with psycopg.connect(database_url, autocommit=True) as c:
        coldmove.move(c, hot_days=HOT_DAYS, cold_path=str(root))
    conn.execute("DELETE FROM rollup_dirty")
    conn.commit()
    at = START + timedelta(days=50)
    a, b = str(ids["Ops1 A"]), str(ids["Ops1 B"])
    before = _readable(database_url, root)
    places.move_device(conn, device="O1", location=ids["Ops1 B"], start=at)
    conn.commit()
    assert conn.execute("SELECT device, location, lo FROM cold_relabels").fetchall() == [
        ("O1", ids["Ops1 B"], at)]
    with psycopg.connect(database_url, autocommit=True) as c:
        assert coldrelabel.run(c, cold_path=str(root)) > 0
        assert c.execute("SELECT count(*) FROM cold_relabels").fetchone() == (0,)
        marks = c.execute("SELECT min(bucket), count(*) FROM rollup_dirty WHERE device = 'O1'"
                          " AND bucket < %s", (CUTOFF,)).fetchone()
    located = _locations(database_url, root, "O1")
    assert {loc for t, loc in located.items() if t >= at} == {b}
    assert {loc for t, loc in located.items() if t < at} == {a}
    # Nothing else changed, and nothing was lost or doubled.
    assert _summary([r for r in _readable(database_url, root) if r[1] != "O1"]) == _summary(
        [r for r in before if r[1] != "O1"])
    assert len(located) == sum(1 for r in before if r[1] == "O1")
    # The relabelled readings' rollup buckets are marked, from the move on.
    assert marks is not None and marks[1] > 0 and marks[0] >= at - timedelta(days=1)
    _tidy(database_url, root)


@pytest.mark.chaos
@pytest.mark.parametrize("step", coldrewrite.STEPS)
def test_relabel_killed_at_each_step_loses_and_doubles_nothing(
        conn: psycopg.Connection, database_url: str, tmp_path: Path, step: str) -> None:
    ids = _world(conn)
    root = tmp_path / "cold"
    env = _env(database_url, root, None)
    assert _sds(env, "cold", "move", "--hot-days", str(HOT_DAYS)).returncode == 0
    at = START + timedelta(days=50)
    places.move_device(conn, device="O1", location=ids["Ops1 B"], start=at)
    conn.commit()
    count = len(_readable(database_url, root))

    killed = _sds(_env(database_url, root, step), "cold", "move", "--hot-days", str(HOT_DAYS))
    assert killed.returncode == -signal.SIGKILL, killed.stdout + killed.stderr
    rows = _readable(database_url, root)
    assert len(rows) == count and len({(r[1], r[0]) for r in rows}) == count

    done = _sds(env, "cold", "move", "--hot-days", str(HOT_DAYS))
    assert done.returncode == 0, done.stderr
    located = _locations(database_url, root, "O1")
    assert {loc for t, loc in located.items() if t >= at} == {str(ids["Ops1 B"])}
    assert len(_readable(database_url, root)) == count
    _tidy(database_url, root)


@pytest.mark.chaos
@pytest.mark.parametrize("step", coldrewrite.STEPS)
def test_cold_retention_killed_at_each_step_loses_and_doubles_nothing(
        conn: psycopg.Connection, database_url: str, tmp_path: Path, step: str) -> None:
    ids = _world(conn)
    root, exports = tmp_path / "cold", tmp_path / "exports"
    env = _env(database_url, root, None, SDS_RETENTION_EXPORT_DIR=str(exports),
               SDS_INGEST_HORIZON_DAYS="30")
    assert _sds(env, "cold", "move", "--hot-days", str(HOT_DAYS)).returncode == 0
    everything = _readable(database_url, root)
    cutoff = _horizon(conn, ids)
    gone = {(r[1], r[0]) for r in everything if r[1] in ("O1", "O2") and r[0] < cutoff}
    kept = [r for r in everything if (r[1], r[0]) not in gone]

    killed = _sds({**env, FAILPOINT_ENV: step}, "storage", "retention", "--table", "calibrated")
    assert killed.returncode == -signal.SIGKILL, killed.stdout + killed.stderr
    rows = _readable(database_url, root)
    keys = {(r[1], r[0]) for r in rows}
    assert len(keys) == len(rows)  # nothing doubled
    assert {(r[1], r[0]) for r in kept} <= keys  # nothing kept was lost

    done = _sds(env, "storage", "retention", "--table", "calibrated")
    assert done.returncode == 0, done.stderr
    assert _summary(_readable(database_url, root)) == _summary(kept)
    assert {d for d, _t in _exported(exports)} == {"O1", "O2"}
    assert len(set(_exported(exports))) == len(gone)
    _tidy(database_url, root)


# ---- (1) the scheduler runs the mover, on by default; status shows it ---------------------------

def _wait(check: Any, seconds: float, what: str) -> None:
    """Poll `check` (a database question, no event to wait on) until true or fail."""
    deadline = time.monotonic() + seconds
    while not check():
        if time.monotonic() > deadline:
            pytest.fail(f"timed out waiting for {what}")
        time.sleep(0.2)


def test_the_scheduler_moves_months_past_the_default_hot_window(
        conn: psycopg.Connection, database_url: str, tmp_path: Path) -> None:
    settings = Settings()
    assert settings.hot_days >= settings.ingest_horizon_days + lifecycle.INGEST_MARGIN_DAYS
    edge = coldmove.cutoff(settings.hot_days)
    old = datetime(edge.year - 1, edge.month, 1, tzinfo=UTC)  # 12 months before the cutoff
    org = accounts.create_org(conn, name="Sched")
    places.register_device(conn, org=org, name="S1")
    insert_readings(conn, "S1", None, [{"time": old + timedelta(hours=6 * k), "tair": 1.0}
                                       for k in range(4 * 62)] + [{"time": NOW, "tair": 2.0}])
    conn.commit()
    root = tmp_path / "cold"
    env = {**os.environ, "SDS_DATABASE_URL": database_url, "SDS_COLD_PATH": str(root),
           "SDS_AGGREGATE_INTERVAL": "1", "SDS_AGGREGATE_METRICS_PORT": "0"}
    env.pop("SDS_HOT_DAYS", None)  # the default
    with (tmp_path / "aggregate.log").open("wb") as log:
        proc = subprocess.Popen([sys.executable, "-m", "aggregate"], cwd=ROOT, env=env,
                                stdout=log, stderr=subprocess.STDOUT)
    try:
        with psycopg.connect(database_url, autocommit=True) as watch:
            _wait(lambda: watch.execute("SELECT count(*) FROM job_runs WHERE job = 'cold'"
                                        " AND finished IS NOT NULL").fetchone() != (0,), 120,
                  "the scheduler's first cold run")
            runs = watch.execute("SELECT ok, buckets FROM job_runs WHERE job = 'cold'").fetchall()
            files = watch.execute("SELECT month, rows FROM cold_files WHERE state = 'live'"
                                  " ORDER BY month").fetchall()
            hot = watch.execute("SELECT min(time) FROM calibrated").fetchone()
    finally:
        proc.terminate()
        proc.wait(30)
    assert runs[0] == (True, 3), (tmp_path / "aggregate.log").read_text()[-3000:]
    assert [f[0] for f in files] == [(old + timedelta(days=31 * i)).date().replace(day=1)
                                     for i in range(3)]
    assert sum(f[1] for f in files) == 4 * 62 and hot == (NOW,)
    shown = _sds({**env, "SDS_DB_ROLES": "false"}, "cold", "status")
    assert shown.returncode == 0, shown.stdout + shown.stderr
    lines = shown.stdout.splitlines()
    assert lines[0].startswith("live: 3 files, ") and lines[0].endswith(f", {4 * 62} rows")
    assert f"store: {root}" in lines
    assert f"oldest hot reading: {NOW:%Y-%m-%d}" in lines
    assert any(line.startswith("last mover run: ") and line.endswith(" UTC") and "(ok)" in line
               for line in lines), lines


def test_cold_status_names_what_needs_an_operator(conn: psycopg.Connection, database_url: str,
                                                  tmp_path: Path) -> None:
    org = accounts.create_org(conn, name="Stuck")
    conn.execute("INSERT INTO cold_files (org_id, month, path, state, created) VALUES"
                 " (%s, '2024-04-01', 'x.parquet', 'verified', now() - interval '2 days')",
                 (org,))
    conn.execute("INSERT INTO aggregate_runs (job, last_start, last_ok, last_error,"
                 " last_error_at) VALUES ('cold', now(), now() - interval '1 hour',"
                 " 'OSError: disk full', now())")
    conn.commit()
    env = _env(database_url, tmp_path / "cold", None)
    shown = _sds(env, "cold", "status")
    assert shown.returncode == 3, shown.stdout + shown.stderr
    problems = [line for line in shown.stdout.splitlines() if line.startswith("PROBLEM: ")]
    assert len(problems) == 2, shown.stdout
    assert "neither live nor removed" in problems[0]
    assert problems[1].endswith("OSError: disk full")
    assert "verified: 1 files, 0 bytes (0 B), 0 rows" in shown.stdout.splitlines()
