"""The scheduler's part of backups (aggregate/backups.py): started on a repository without a
backup it takes the first full one by itself, its metrics endpoint carries the backup and WAL
archive metrics under the names the alert rules use, and a failing WAL archive is loud (the
metric, an ERROR line in its log, `sds backup status`) and clears when archiving works again."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest

from shared.config import Settings
from testbed.pgbackrest import PgBackRestRepo
from testbed.postgres import PostgresServer
from testbed.process import free_port
from tests.support.chaos import scrape
from tests.support.databases import migrate_database
from tests.support.ingesting import ROOT, settings_env, wait_for
from tests.support.restoring import sds

pytestmark = [
    pytest.mark.chaos,
    pytest.mark.timeout(600),
    pytest.mark.skipif(os.geteuid() != 0, reason="PostgreSQL and pgBackRest run as postgres"),
]

NAMES = ("sds_backup_last_success_timestamp_seconds", "sds_backup_age_seconds",
         "sds_wal_archive_last_success_timestamp_seconds", "sds_wal_archive_failing",
         "sds_wal_archive_failed_total", "sds_wal_archive_lag_seconds")


@pytest.fixture
def archiving(tmp_path: Path) -> Iterator[tuple[PostgresServer, str, PgBackRestRepo]]:
    pg = PostgresServer().start(tmp_path / "pg", durable=True)
    try:
        url = migrate_database(pg.create_database("ingest"))
        repo = PgBackRestRepo(tmp_path / "pgbackrest").attach(pg, archive_timeout=60)
        yield pg, url, repo
    finally:
        pg.cleanup()


def test_scheduler_takes_the_first_backup_and_reports_a_failing_archive(
    archiving: tuple[PostgresServer, str, PgBackRestRepo], tmp_path: Path,
) -> None:
    pg, url, repo = archiving
    port = free_port()
    s = Settings(database_url=url, backup_config=str(repo.config), aggregate_metrics_port=port,
                 aggregate_interval=3600)
    log_path = tmp_path / "aggregate.log"
    with open(log_path, "ab") as log:
        proc = subprocess.Popen([sys.executable, "-m", "aggregate"], cwd=ROOT,
                                env=settings_env(s), stdout=log, stderr=log)
    archive_dir = repo.base_dir / "repo" / "archive"
    mode = archive_dir.stat().st_mode & 0o777
    try:
        # The first full backup, taken by the scheduler without being asked.
        got = wait_for(lambda: (m := scrape(port)).get(
            'sds_backup_last_success_timestamp_seconds{type="full"}', 0) > 0 and m, 120,
            every=0.5, what="the first full backup in the scheduler's metrics")
        assert "the repository holds no full backup: taking the first one now" in \
            log_path.read_text()
        for name in NAMES:
            assert any(k.split("{")[0] == name for k in got), f"{name} missing"
        assert got['sds_backup_last_success_timestamp_seconds{type="diff"}'] == 0
        assert 0 <= got["sds_backup_age_seconds"] < 120
        assert got["sds_wal_archive_failing"] == 0
        assert got["sds_wal_archive_last_success_timestamp_seconds"] > 0

        # The repository stops taking WAL (a full or unmounted disk): the archive fails.
        os.chmod(archive_dir, 0)
        with psycopg.connect(pg.dsn(), autocommit=True) as c:
            c.execute("CREATE TABLE w AS SELECT generate_series(1, 1000) AS x")
            c.execute("SELECT pg_switch_wal()")
        failing = wait_for(lambda: (m := scrape(port)).get("sds_wal_archive_failing") == 1 and m,
                           120, every=0.5, what="sds_wal_archive_failing 1")
        assert failing["sds_wal_archive_failed_total"] >= 1
        assert failing["sds_wal_archive_lag_seconds"] > 0
        wait_for(lambda: any("ERROR" in line and "WAL ARCHIVING IS FAILING" in line
                             for line in log_path.read_text().splitlines()), 30,
                 what="the scheduler's error line")
        status, _ = sds(repo, "backup", "status", url=pg.dsn())
        assert status.returncode == 3 and "wal archive: FAILING" in status.stdout

        # The disk is back: PostgreSQL retries, the segment goes, the flag clears. After its
        # failed attempts the archiver sleeps until the next segment is ready (or a minute at
        # most): the next segment, as live traffic makes one, wakes it at once instead of that
        # fixed minute; it retries the failed one first (segments go in order).
        os.chmod(archive_dir, mode)
        with psycopg.connect(pg.dsn(), autocommit=True) as c:
            c.execute("INSERT INTO w SELECT generate_series(1, 1000)")
            c.execute("SELECT pg_switch_wal()")
        wait_for(lambda: scrape(port).get("sds_wal_archive_failing") == 0, 120, every=0.5,
                 what="sds_wal_archive_failing back to 0")
        wait_for(lambda: "WAL archiving works again" in log_path.read_text(), 30,
                 what="the recovery line")
        ok, _ = sds(repo, "backup", "status", url=pg.dsn())
        assert ok.returncode == 0, ok.stdout + ok.stderr
    finally:
        os.chmod(archive_dir, mode)
        proc.terminate()
        proc.wait(30)
