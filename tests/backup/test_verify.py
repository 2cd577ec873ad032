"""Drill 3 (issue 25): a backup that fails verification is reported by `sds backup verify` and
`sds backup status`, and `sds restore` never starts from it: it takes the newest valid backup
instead and says so, or refuses when none is valid."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest

from testbed.pgbackrest import PgBackRestRepo
from testbed.postgres import PostgresServer
from tests.support.restoring import sds, start_restored, switch_and_stop

pytestmark = [
    pytest.mark.chaos,
    pytest.mark.timeout(600),
    pytest.mark.skipif(os.geteuid() != 0, reason="PostgreSQL and pgBackRest run as postgres"),
]


@pytest.fixture
def server(tmp_path: Path, processes: None) -> Iterator[PostgresServer]:
    pg = PostgresServer().start(tmp_path / "pg", durable=True)
    try:
        yield pg
    finally:
        pg.cleanup()


def corrupt(backup_dir: Path) -> Path:
    """Overwrite bytes in the middle of one stored data file of a backup (not its manifest)."""
    victims = sorted(p for p in (backup_dir / "pg_data").rglob("*.lz4") if p.stat().st_size > 64)
    assert victims, f"no data files in {backup_dir}"
    victim = victims[-1]
    with open(victim, "r+b") as f:
        f.seek(victim.stat().st_size // 2)
        f.write(b"\x00garbage\xff" * 4)
    return victim


def test_a_backup_failing_verification_is_reported_and_never_restored(
    server: PostgresServer, tmp_path: Path,
) -> None:
    repo = PgBackRestRepo(tmp_path / "pgbackrest").attach(server)
    full = repo.backup("full")
    with psycopg.connect(server.dsn(), autocommit=True) as c:
        c.execute("CREATE TABLE after_full AS SELECT generate_series(1, 5000) AS x")
    diff = repo.backup("diff")

    good, _ = sds(repo, "backup", "verify")
    assert good.returncode == 0, good.stdout + good.stderr
    corrupt(repo.backup_dir(diff))

    checked, _ = sds(repo, "backup", "verify")
    assert checked.returncode == 3, checked.stdout + checked.stderr
    assert f"invalid backups: {diff}" in checked.stderr
    status, _ = sds(repo, "backup", "status", url=server.dsn())
    assert status.returncode == 3
    assert "verify: FAILED" in status.stdout and diff in status.stdout

    switch_and_stop(server)
    restored_dir = tmp_path / "restored"
    result, _ = sds(repo, "restore", "--target-dir", str(restored_dir / "data"))
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"skipping backup {diff}: it FAILED verification" in result.stderr
    assert f"restoring backup {full}" in result.stdout
    # The older full backup plus the archived WAL still reach the end: nothing is lost.
    restored, _ = start_restored(restored_dir)
    try:
        with psycopg.connect(restored.dsn()) as c:
            assert c.execute("SELECT count(*) FROM after_full").fetchone() == (5000,)
    finally:
        restored.cleanup()

    # With the full backup invalid too, no backup is usable: the restore refuses, untouched.
    corrupt(repo.backup_dir(full))
    again = tmp_path / "again"
    refused, _ = sds(repo, "restore", "--target-dir", str(again / "data"))
    assert refused.returncode == 1
    assert "failed verification" in refused.stderr
    assert not (again / "data").exists()
