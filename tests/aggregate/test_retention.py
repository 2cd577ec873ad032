"""Data lifecycle (aggregate.lifecycle): raw rows past the retention horizon are exported by
device and month, then dropped (whole chunks) or deleted (a shorter organisation horizon); the
export reads back equal to what was removed, rollups are kept, and the API answers for the
remaining range exactly as before. The job runs as the scheduler's role (sds_aggregate)."""

from __future__ import annotations

import csv
import gzip
import hashlib
import io
import json
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import psycopg
import pytest
from click.testing import CliRunner
from psycopg import sql

from admin.storage import storage_cli
from aggregate import jobs, lifecycle
from people import accounts
from shared import places, spreadsheet
from shared.config import Settings
from shared.db import ROLE_AGGREGATE, make_pool
from tests.support.apps import close_app
from tests.support.readings import insert_readings
from tests.support.rollups import make_location, run_all

NOW = datetime.now(UTC).replace(minute=0, second=0, microsecond=0)
DAYS = 100  # of history per device, one reading every 3 hours
STEP = timedelta(hours=3)
COLS = "time, device, location, tair, rh, precip"
FIRMWARE = ["fw 1.0", '=HYPERLINK("http://x.example","y")', "'quoted", "+1", "@SUM(A1)"]


def _history(conn: psycopg.Connection, device: str, org_name: str) -> None:
    loc = make_location(conn, "America/Chicago")
    row = conn.execute("SELECT id FROM organisations WHERE name = %s", (org_name,)).fetchone()
    org = row[0] if row else accounts.create_org(conn, name=org_name)
    places.register_device(conn, org=org, name=device)
    start = NOW - timedelta(days=DAYS)
    rows = []
    t, i = start, 0
    while t < NOW:
        rows.append({"time": t, "tair": 10.0 + (i % 17) * 0.3, "rh": 0.5, "precip": 0.2 * (i % 3)})
        t += STEP
        i += 1
    insert_readings(conn, device, loc, rows, marks=True)
    # Firmware strings are device-chosen text: some start like spreadsheet formulas, one with
    # the escape character itself, so the export must neutralise them and restore them exactly.
    conn.execute("INSERT INTO health (time, device, batt_pct, fw)"
                 " SELECT g, %s, 90, (%s::text[])[1 + (row_number() OVER ()) %% 5]"
                 " FROM generate_series(%s::timestamptz, %s, interval '1 day') g",
                 (device, FIRMWARE, start, NOW))


@pytest.fixture
def world(database_url: str) -> str:
    """Devices A1 (org Keep) and B1 (org Short), 100 days each, rolled up."""
    with psycopg.connect(database_url) as conn:
        _history(conn, "A1", "Keep")
        _history(conn, "B1", "Short")
        conn.commit()
        run_all(conn)
        conn.commit()
    return database_url


def _settings(url: str, export: Path, **changes: Any) -> Settings:
    return Settings(database_url=url, metrics_port=0, aggregate_metrics_port=0,
                    ingest_horizon_days=20, retention_export_dir=str(export), **changes)


def _snapshot(url: str, table: str, where: str) -> list[tuple[Any, ...]]:
    cols = COLS if table == "calibrated" else "time, device, location, batt_pct, fw"
    with psycopg.connect(url) as c:
        return c.execute(f"SELECT {cols} FROM {table} WHERE {where} ORDER BY device, time"
                         ).fetchall()


def _restore(url: str, table: str, export: Path, manifest: dict[str, Any]
             ) -> list[tuple[Any, ...]]:
    """Load every exported file back into a scratch table (COPY ... FROM, as the manifest says)
    after checking its SHA-256, and return its rows like _snapshot."""
    cols = COLS if table == "calibrated" else "time, device, location, batt_pct, fw"
    with psycopg.connect(url) as c:
        c.execute(f"CREATE TEMP TABLE back (LIKE {table})")
        for f in manifest["files"]:
            data = (export / f["path"]).read_bytes()
            assert hashlib.sha256(data).hexdigest() == f["sha256"]
            text = gzip.decompress(data)
            header = next(csv.reader(io.StringIO(text.decode().splitlines()[0])))
            assert header[:3] == ["time", "device", "location"]
            assert len(list(csv.reader(io.StringIO(text.decode())))) - 1 == f["rows"]
            # Opened in a spreadsheet, no field may start a formula.
            fields = [v for row in csv.reader(io.StringIO(text.decode())) for v in row]
            assert not [v for v in fields if v[:1] in ("=", "+", "@")], f["path"]
            with c.cursor().copy("COPY back FROM STDIN WITH (FORMAT csv, HEADER)") as copy:
                copy.write(text)
        # The manifest's restore rule: strip the one leading ' of its text columns.
        for name in manifest["text_columns"]:
            c.execute(sql.SQL("UPDATE back SET {0} = {1}").format(
                sql.Identifier(name), spreadsheet.unescape_sql(sql.Identifier(name))))
        return c.execute(f"SELECT {cols} FROM back ORDER BY device, time").fetchall()


def _manifest(export: Path, table: str) -> dict[str, Any]:
    found = sorted((export / table).glob("manifest-*.json"))
    assert len(found) == 1, found
    return json.loads(found[0].read_text())


def _api_pages(url: str, since: datetime) -> dict[str, Any]:
    """What the API answers for the kept raw range and for the whole rollup history."""
    from serve import create_app

    with psycopg.connect(url) as c:
        org = accounts.org_id(c, "Keep")
        uid = accounts.create_user(c, org=org, email=f"r{datetime.now().timestamp()}@x.org",
                                   password="pw-long-enough-1")
        key = accounts.create_api_key(c, user=uid, scopes=["data:read"])["apikey"]
        c.commit()
    app = create_app(Settings(database_url=url, metrics_port=0, aggregate_metrics_port=0,
                              db_pool_min=1, db_pool_max=2, cursor_secret="k",
                              api_rate_limit=0))
    try:
        client = app.test_client()
        h = {"Authorization": f"Apikey {key}"}
        out = {}
        for name, query in {
            "raw": f"/api/v2/data/calibrated?device=A1&start_time={since.isoformat()}"
                   f"&end_time={NOW.isoformat()}&limit=10000",
            "hourly": f"/api/v2/data/hourly?device=A1&start_time="
                      f"{(NOW - timedelta(days=DAYS + 1)).isoformat()}"
                      f"&end_time={NOW.isoformat()}&limit=10000",
            "daily": f"/api/v2/data/daily?device=A1&start_time="
                     f"{(NOW - timedelta(days=DAYS + 1)).date()}&end_time={NOW.date()}",
        }.items():
            r = client.get(query.replace("+00:00", "Z"), headers=h)
            assert r.status_code == 200, r.get_data(as_text=True)
            out[name] = r.get_json()
        return out
    finally:
        close_app(app)


def _chunks_ending_before(url: str, table: str, t: datetime) -> int:
    with psycopg.connect(url) as c:
        return int(c.execute(
            "SELECT count(*) FROM timescaledb_information.chunks WHERE hypertable_name = %s"
            " AND range_end <= %s", (table, t)).fetchone()[0])


@pytest.fixture
def aggregate_pool(world: str) -> Iterator[Any]:
    s = Settings(database_url=world, metrics_port=0, aggregate_metrics_port=0)
    pool = make_pool(s, name="sds-aggregate", role=ROLE_AGGREGATE)
    try:
        yield pool
    finally:
        pool.close()


def test_global_retention_exports_then_drops_chunks_and_the_api_is_unchanged(
    world: str, tmp_path: Path, aggregate_pool: Any,
) -> None:
    export = tmp_path / "export"
    s = _settings(world, export, retention_calibrated_days=60, retention_health_days=40)
    horizon = NOW - timedelta(days=60)
    assert _chunks_ending_before(world, "calibrated", horizon) > 0
    with psycopg.connect(world) as c:
        cut = c.execute("SELECT max(range_end) FROM timescaledb_information.chunks"
                        " WHERE hypertable_name = 'calibrated' AND range_end <= %s",
                        (horizon,)).fetchone()[0]
        health_cut = c.execute("SELECT max(range_end) FROM timescaledb_information.chunks"
                               " WHERE hypertable_name = 'health' AND range_end <= %s",
                               (NOW - timedelta(days=40),)).fetchone()[0]
        rollups_before = {t: c.execute(f"SELECT count(*) FROM {t}").fetchone()[0]
                          for t in ("hourly", "local_hourly", "daily")}
    doomed = _snapshot(world, "calibrated", f"time < '{cut.isoformat()}'")
    doomed_health = _snapshot(world, "health", f"time < '{health_cut.isoformat()}'")
    kept = _snapshot(world, "calibrated", f"time >= '{cut.isoformat()}'")
    before = _api_pages(world, cut)
    assert doomed and kept and before["raw"]

    removed = jobs.run_retention(aggregate_pool, s, runner="test")

    assert removed == len(doomed) + len(doomed_health)
    assert _chunks_ending_before(world, "calibrated", horizon) == 0
    assert _snapshot(world, "calibrated", f"time < '{cut.isoformat()}'") == []
    assert _snapshot(world, "calibrated", f"time >= '{cut.isoformat()}'") == kept
    # The export holds exactly the rows dropped, by device and month.
    manifest = _manifest(export, "calibrated")
    assert manifest["rows"] == len(doomed)
    assert [p["how"] for p in manifest["parts"]] == ["drop"]
    assert _restore(world, "calibrated", export, manifest) == doomed
    paths = {f["path"] for f in manifest["files"]}
    assert all(p.startswith("calibrated/device=") and "/month=" in p for p in paths)
    months = {(f["device"], f["month"]) for f in manifest["files"]}
    assert len(months) == len(manifest["files"])  # one file per device and month
    assert {d for d, _ in months} == {"A1", "B1"}
    assert _restore(world, "health", export, _manifest(export, "health")) == doomed_health
    # Rollups are kept, and the API answers the same for what remains.
    with psycopg.connect(world) as c:
        assert {t: c.execute(f"SELECT count(*) FROM {t}").fetchone()[0]
                for t in rollups_before} == rollups_before
        run = c.execute("SELECT ok, buckets FROM job_runs WHERE job = 'retention'").fetchone()
    assert run == (True, removed)
    assert _api_pages(world, cut) == before
    # A second run finds nothing more to do.
    assert jobs.run_retention(aggregate_pool, s, runner="test") == 0


def test_shorter_org_horizon_deletes_and_longer_one_holds_chunks(
    world: str, tmp_path: Path, aggregate_pool: Any,
) -> None:
    export = tmp_path / "export"
    s = _settings(world, export, retention_calibrated_days=50)
    with psycopg.connect(world) as c:
        # Keep keeps 80 days: chunks go only past 80 days. Short keeps 30: the rest by DELETE.
        c.execute("UPDATE organisations SET calibrated_retention_days = 80 WHERE name = 'Keep'")
        c.execute("UPDATE organisations SET calibrated_retention_days = 30 WHERE name = 'Short'")
        c.commit()
        cut = c.execute("SELECT max(range_end) FROM timescaledb_information.chunks"
                        " WHERE hypertable_name = 'calibrated' AND range_end <= %s",
                        (NOW - timedelta(days=80),)).fetchone()[0]
    short_cut = NOW - timedelta(days=30)
    dropped = _snapshot(world, "calibrated", f"time < '{cut.isoformat()}'")
    deleted = _snapshot(world, "calibrated", f"device = 'B1' AND time >= '{cut.isoformat()}'"
                                             f" AND time < '{short_cut.isoformat()}'")
    keep_a = _snapshot(world, "calibrated", f"device = 'A1' AND time >= '{cut.isoformat()}'")
    assert dropped and deleted

    with psycopg.connect(world) as c:
        plan = lifecycle.plan(c, s, "calibrated", NOW)
    assert [(p.how, p.group, p.rows) for p in plan.parts] == [
        ("drop", None, len(dropped)), ("delete", "Short", len(deleted))]

    with aggregate_pool.connection() as conn:
        results = lifecycle.run(conn, s, ("calibrated",), NOW)
    assert results[0].rows == len(dropped) + len(deleted)
    assert results[0].deleted == len(deleted)
    assert _snapshot(world, "calibrated", "device = 'A1'") == keep_a
    assert _snapshot(world, "calibrated", f"device = 'B1' AND time < '{short_cut.isoformat()}'"
                     ) == []
    restored = _restore(world, "calibrated", export, _manifest(export, "calibrated"))
    assert restored == sorted(dropped + deleted, key=lambda r: (r[1], r[0]))


def test_pending_rollups_hold_retention_back_and_dry_run_removes_nothing(
    world: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    export = tmp_path / "export"
    with psycopg.connect(world) as c:
        c.execute("INSERT INTO rollup_dirty (rollup, device, bucket) VALUES ('hourly', 'A1', %s)",
                  (NOW - timedelta(days=90),))
        c.commit()
        total = c.execute("SELECT count(*) FROM calibrated").fetchone()[0]
    s = _settings(world, export, retention_calibrated_days=60)
    with psycopg.connect(world) as c:
        [result] = lifecycle.run(c, s, ("calibrated",), NOW)
    assert result.rows == 0 and result.blocked and "pending" in result.blocked
    assert not (export / "calibrated").exists()

    for key, value in {"SDS_DATABASE_URL": world, "SDS_RETENTION_CALIBRATED_DAYS": "60",
                       "SDS_INGEST_HORIZON_DAYS": "20",
                       "SDS_RETENTION_EXPORT_DIR": str(export)}.items():
        monkeypatch.setenv(key, value)
    out = CliRunner().invoke(storage_cli, ["retention", "--dry-run", "--table", "calibrated"])
    assert out.exit_code == 0, out.output
    assert "would be exported and removed" in out.output and "held back" in out.output
    out = CliRunner().invoke(storage_cli, ["sizes", "--per-org"])
    assert out.exit_code == 0 and "calibrated" in out.output, out.output
    per_org = [line.split() for line in out.output.splitlines()
               if line.startswith("calibrated ") and ("Keep" in line or "Short" in line)]
    assert sorted(row[1] for row in per_org) == ["Keep", "Short"]
    assert {int(row[2]) for row in per_org} == {total // 2}  # rows of each organisation
    with psycopg.connect(world) as c:
        assert c.execute("SELECT count(*) FROM calibrated").fetchone()[0] == total


def test_a_horizon_a_late_reading_could_reach_is_refused(world: str, tmp_path: Path,
                                                          monkeypatch: pytest.MonkeyPatch
                                                          ) -> None:
    s = _settings(world, tmp_path, retention_calibrated_days=21)  # ingest horizon 20 + 2 > 21
    with psycopg.connect(world) as c, pytest.raises(lifecycle.RetentionError,
                                                    match="SDS_INGEST_HORIZON_DAYS"):
        lifecycle.plan(c, s, "calibrated", NOW)
    monkeypatch.setenv("SDS_DATABASE_URL", world)
    out = CliRunner().invoke(storage_cli, ["policy", "--org", "Short", "--calibrated-days", "5"])
    assert out.exit_code != 0 and "ingest horizon" in out.output
    with psycopg.connect(world) as c:
        s2 = _settings(world, tmp_path).replace(retention_export_dir=None)
        with pytest.raises(lifecycle.RetentionError, match="SDS_RETENTION_EXPORT_DIR"):
            lifecycle.run(c, s2)


def test_the_scheduler_runs_retention_only_with_an_export_directory(tmp_path: Path) -> None:
    from aggregate.__main__ import build_scheduler
    from aggregate.leader import LeaderLock

    leader = LeaderLock("postgresql://unused")
    off = build_scheduler(None, Settings(retention_calibrated_days=500), leader,  # type: ignore[arg-type]
                          "test:1")
    assert jobs.RETENTION_JOB not in {j.id for j in off.get_jobs()}
    on = build_scheduler(None, Settings(retention_export_dir=str(tmp_path),  # type: ignore[arg-type]
                                        retention_interval=7200), leader, "test:1")
    job = {j.id: j for j in on.get_jobs()}[jobs.RETENTION_JOB]
    assert job.trigger.interval == timedelta(seconds=7200)
    assert job.coalesce is True and job.max_instances == 1
    assert job.kwargs["guard"] == leader.guard  # leader-locked like the rollups
