"""The cold tier's mover (`sds cold move`) with SDS_COLD_PATH on S3-compatible object storage
(a real moto server process, testbed/s3.py): killed (SIGKILL) right after its upload
("written"), after the store lists the object ("renamed") and after it is verified, it leaves
every reading counted once; the rerun finishes with objects that read back to the catalogue's
rows, checksums and sizes, and nothing else under the prefix."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from datetime import UTC, datetime, timedelta

import psycopg
import pytest

from admin.cold import FAILPOINT_ENV
from people import accounts
from shared import coldfiles, coldstore, places
from testbed.process import REPO
from testbed.s3 import S3Server
from tests.support.readings import insert_readings
from tests.support.rollups import make_location

pytestmark = pytest.mark.usefixtures("processes")

NOW = datetime.now(UTC).replace(minute=0, second=0, microsecond=0)
START = datetime(NOW.year - (NOW.month <= 4), (NOW.month - 5) % 12 + 1, 1, tzinfo=UTC)


def _world(url: str) -> None:
    """Two organisations, three devices, a reading every 3 hours for 4-5 months."""
    with psycopg.connect(url) as conn:
        for org_name, devices in (("S3a", ("E1", "E2")), ("S3b", ("F1",))):
            org = accounts.create_org(conn, name=org_name)
            loc = make_location(conn, "Europe/Paris")
            for i, dev in enumerate(devices):
                places.register_device(conn, org=org, name=dev)
                rows, t, k = [], START + timedelta(minutes=7 * i), 0
                while t < NOW:
                    rows.append({"time": t, "tair": 10 + (k % 19) * 0.41, "rh": 0.5,
                                 "precip": None if k % 4 else 0.3})
                    t += timedelta(hours=3)
                    k += 1
                insert_readings(conn, dev, loc, rows, marks=True)
        conn.commit()


def _all_rows(url: str) -> str:
    with psycopg.connect(url) as conn:
        hot = conn.execute(f"SELECT {', '.join(coldfiles.NAMES)} FROM calibrated").fetchall()
    return coldfiles.content_checksum(coldfiles.table_from_rows(hot))


def _store(s3: S3Server, cold: str) -> coldstore.ColdStore:
    options = coldstore.StoreOptions(s3=coldstore.S3Options(
        endpoint=s3.endpoint, region="us-east-1", key="sds-test-key", secret="sds-test-secret"))
    return coldstore.open_store(cold, options)


def _counted(url: str, store: coldstore.ColdStore) -> tuple[int, str]:
    """(readings counted once, their checksum): hot rows plus readable objects' rows without a
    hot copy, as serve.coldread merges them."""
    with psycopg.connect(url) as conn:
        hot = conn.execute(f"SELECT {', '.join(coldfiles.NAMES)} FROM calibrated").fetchall()
        paths = [r[0] for r in conn.execute(
            "SELECT path FROM cold_files WHERE state = ANY(%s)",
            (list(coldfiles.READABLE),)).fetchall()]
    keys = {(r[1], r[0]) for r in hot}
    rows = list(hot)
    for rel in paths:
        for rec in store.read(rel).to_pylist():
            if (rec["device"], rec["time"]) not in keys:
                rows.append(tuple(rec[n] for n in coldfiles.NAMES))
    return len(rows), coldfiles.content_checksum(coldfiles.table_from_rows(rows))


def _mover(url: str, s3: S3Server, cold: str, failpoint: str | None,
           ) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SDS_")}
    env.update({"SDS_DATABASE_URL": url, "SDS_COLD_PATH": cold, "SDS_DB_ROLES": "false",
                **s3.cold_env()})
    if failpoint:
        env[FAILPOINT_ENV] = failpoint
    return subprocess.run([sys.executable, "-m", "admin", "cold", "move", "--hot-days", "40"],
                          cwd=REPO, env=env, capture_output=True, text=True, timeout=600,
                          check=False)


@pytest.mark.parametrize("step", ["written", "renamed", "verified"])
def test_mover_on_s3_killed_after_its_upload_loses_and_doubles_nothing(
        database_url: str, s3_server: S3Server, step: str) -> None:
    _world(database_url)
    cold = f"s3://cold/{step}"
    store = _store(s3_server, cold)
    before = _all_rows(database_url)
    with psycopg.connect(database_url) as conn:
        total = conn.execute("SELECT count(*) FROM calibrated").fetchone()[0]  # type: ignore[index]

    killed = _mover(database_url, s3_server, cold, step)
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    assert _counted(database_url, store) == (total, before)
    # The upload completed before the kill: the object is there, whole, under its final name.
    assert len(s3_server.objects(cold[len("s3://"):])) == 1

    done = _mover(database_url, s3_server, cold, None)
    assert done.returncode == 0, done.stderr
    assert _counted(database_url, store) == (total, before)
    with psycopg.connect(database_url) as conn:
        files = conn.execute("SELECT path, rows, checksum, bytes, state FROM cold_files"
                             ).fetchall()
    assert {f[4] for f in files} == {"live"} and len(files) > 1
    for rel, rows, checksum, _size, _state in files:
        table = store.read(rel)
        assert (table.num_rows, coldfiles.content_checksum(table)) == (rows, checksum)
    assert s3_server.objects(cold[len("s3://"):]) == {f[0]: f[3] for f in files}
    assert _all_rows(database_url) != before  # something did move
