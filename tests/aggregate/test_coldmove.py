"""The cold tier's mover (aggregate.coldmove, `sds cold move`): whole months past SDS_HOT_DAYS
leave `calibrated` for verified Parquet files, and a mover killed (SIGKILL) after any of its
steps leaves every reading either hot or in a readable file, never both counted nor neither;
the next run finishes the job and the files hold exactly the readings that were hot."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path

import psycopg
import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner

from admin.cold import FAILPOINT_ENV, cold_cli
from aggregate import coldmove
from people import accounts
from shared import coldfiles, places
from tests.support.readings import insert_readings
from tests.support.rollups import make_location

pytestmark = pytest.mark.usefixtures("processes")

ROOT = Path(__file__).resolve().parents[2]
NOW = datetime.now(UTC).replace(minute=0, second=0, microsecond=0)
START = datetime(NOW.year - 1, NOW.month, 1, tzinfo=UTC)  # 12-13 months of history
STEP = timedelta(hours=2)


def _world(url: str) -> None:
    """Two organisations, three devices, a reading every 2 hours for 12-13 months; one device
    registered nowhere (its readings stay hot)."""
    with psycopg.connect(url) as conn:
        for org_name, devices in (("Cold1", ("C1", "C2")), ("Cold2", ("D1",)), (None, ("N1",))):
            org = accounts.create_org(conn, name=org_name) if org_name else None
            loc = make_location(conn, "Europe/Paris")
            for i, dev in enumerate(devices):
                if org is not None:  # N1 is registered nowhere (readings of an unknown name)
                    places.register_device(conn, org=org, name=dev)
                rows, t, k = [], START + timedelta(minutes=5 * i), 0
                while t < NOW:
                    rows.append({"time": t, "tair": 10 + (k % 23) * 0.37, "rh": 0.5,
                                 "precip": None if k % 5 else 0.2})
                    t += STEP
                    k += 1
                insert_readings(conn, dev, loc, rows, marks=True)
        conn.commit()


def _all_rows(url: str) -> str:
    """The checksum of every reading, wherever it is: hot rows plus the readable files'."""
    with psycopg.connect(url) as conn:
        hot = conn.execute(f"SELECT {', '.join(coldfiles.NAMES)} FROM calibrated").fetchall()
    return coldfiles.content_checksum(coldfiles.table_from_rows(hot))


def _counted(url: str, root: Path) -> tuple[int, str]:
    """(readings counted once by a reader, their checksum): hot rows, plus readable files'
    rows that have no hot copy, exactly as serve.coldread merges them."""
    with psycopg.connect(url) as conn:
        hot = conn.execute(f"SELECT {', '.join(coldfiles.NAMES)} FROM calibrated").fetchall()
        paths = [r[0] for r in conn.execute(
            "SELECT path FROM cold_files WHERE state = ANY(%s)",
            (list(coldfiles.READABLE),)).fetchall()]
    keys = {(r[1], r[0]) for r in hot}
    rows = list(hot)
    for rel in paths:
        for rec in pq.read_table(root / rel, schema=coldfiles.SCHEMA).to_pylist():
            if (rec["device"], rec["time"]) not in keys:
                rows.append(tuple(rec[n] for n in coldfiles.NAMES))
    return len(rows), coldfiles.content_checksum(coldfiles.table_from_rows(rows))


def _mover(url: str, root: Path, failpoint: str | None) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "SDS_DATABASE_URL": url, "SDS_COLD_PATH": str(root),
           "SDS_DB_ROLES": "false"}
    env.pop(FAILPOINT_ENV, None)
    if failpoint:
        env[FAILPOINT_ENV] = failpoint
    return subprocess.run([sys.executable, "-m", "admin", "cold", "move", "--hot-days", "40"],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=600,
                          check=False)


@pytest.mark.parametrize("step", coldmove.STEPS)
def test_mover_killed_at_each_step_loses_and_doubles_nothing(
        database_url: str, tmp_path: Path, step: str) -> None:
    _world(database_url)
    root = tmp_path / "cold"
    before = _all_rows(database_url)
    with psycopg.connect(database_url) as conn:
        total = conn.execute("SELECT count(*) FROM calibrated").fetchone()[0]  # type: ignore[index]

    killed = _mover(database_url, root, step)
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    assert _counted(database_url, root) == (total, before)

    done = _mover(database_url, root, None)
    assert done.returncode == 0, done.stderr
    assert _counted(database_url, root) == (total, before)
    with psycopg.connect(database_url) as conn:
        states = conn.execute("SELECT state, count(*) FROM cold_files GROUP BY 1").fetchall()
        files = conn.execute("SELECT path, rows, checksum, bytes FROM cold_files").fetchall()
        oldest_cold_org_hot = conn.execute(
            "SELECT min(c.time) FROM calibrated c JOIN devices d ON d.name = c.device"
            " WHERE d.org_id IS NOT NULL").fetchone()[0]  # type: ignore[index]
    assert [s for s, _ in states] == ["live"]
    # Every file reads back to its recorded rows and checksum; nothing else is in the tier.
    for rel, rows, checksum, size in files:
        table = pq.read_table(root / rel, schema=coldfiles.SCHEMA)
        assert (table.num_rows, coldfiles.content_checksum(table)) == (rows, checksum)
        assert (root / rel).stat().st_size == size
    on_disk = sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_file())
    assert on_disk == sorted(f[0] for f in files)
    # Organisations' readings are hot only from the cutoff month; N1's (no org) all stay hot.
    assert oldest_cold_org_hot >= coldmove.cutoff(40)
    assert _all_rows(database_url) != before  # something did move


def test_late_reading_for_a_cold_month_is_compacted_into_its_file(database_url: str,
                                                                  tmp_path: Path) -> None:
    _world(database_url)
    root = tmp_path / "cold"
    with psycopg.connect(database_url, autocommit=True) as conn:
        first = coldmove.move(conn, hot_days=40, cold_path=str(root))
        late = START + timedelta(days=3, minutes=1)
        loc = conn.execute("SELECT location FROM calibrated WHERE device = 'C1' LIMIT 1"
                           ).fetchone()
        insert_readings(conn, "C1", loc[0] if loc else None, [{"time": late, "tair": 1.5}])
        second = coldmove.move(conn, hot_days=40, cold_path=str(root))
    month = late.date().replace(day=1)
    was = next(m for m in first if m.month == month and m.path.startswith(f"org={second[0].org}"))
    # The month's file and the late reading became one file (aggregate.coldrewrite).
    assert [(m.month, m.rows, m.compacted) for m in second] == [(month, was.rows + 1, True)]
    shown = CliRunner().invoke(cold_cli, ["status"], env={
        "SDS_DATABASE_URL": database_url, "SDS_DB_ROLES": "false", "SDS_COLD_PATH": str(root)})
    assert shown.exit_code == 0, shown.output
    files = sum(m.bytes for m in first if m.path != was.path) + second[0].bytes
    assert shown.output.splitlines()[0].startswith(f"live: {len(first)} files, {files} bytes")
    # N1, registered to no organisation, keeps its oldest readings hot.
    assert f"oldest hot reading: {START.date()}" in shown.output
