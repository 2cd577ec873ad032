"""The cold tier in the restore drills (docs/operations.md "Backups and restore", "Cold
tier"): a local cold tier copies each file into the backup repository's `cold/` directory as
it is written, and `sds restore` brings back the files the store lacks.

Point in time: the data world's months move cold (`sds cold move`, as the operator runs it,
with the repository configured), T is noted, then the mistake: the catalogue is emptied and
the cold directory is lost. `sds restore --to T` into a fresh data directory brings the files
back, `sds cold check` finds every catalogued file, and `/data/calibrated` answers the cold
months byte-for-byte as before they moved. Then a file lost from the store and the backup is
reported by `sds cold check` (exit 3, naming it).
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import psycopg
import pytest
from flask import Flask

from testbed.database import as_role
from testbed.pgbackrest import PgBackRestRepo
from testbed.postgres import PostgresServer
from tests.support.apps import close_app, make_app
from tests.support.data_world import World, get, seed
from tests.support.restoring import SDS, start_restored, switch_and_stop

pytestmark = [
    pytest.mark.chaos,
    pytest.mark.timeout(600),
    pytest.mark.skipif(os.geteuid() != 0, reason="PostgreSQL and pgBackRest run as postgres"),
]

WINDOW = {"start_time": "2024-06-01T00:00:00Z", "end_time": "2024-12-01T00:00:00Z"}
REQUESTS: list[tuple[str, str | None, dict[str, Any]]] = [
    ("a", None, {"device": "D1", **WINDOW, "limit": 1000}),
    ("a", "text/csv", {"device": "D1,D2", **WINDOW, "limit": 700, "order": "desc",
                       "local_time": "Europe/Paris"}),
    ("a", None, {"device": "D4", **WINDOW, "select": "time,tair", "temp": "f"}),
    ("b", None, {"device": "B1", **WINDOW}),
]


def _sds(repo: PgBackRestRepo, url: str, cold: Path, *args: str,
         ) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SDS_")}
    env.update({"SDS_BACKUP_CONFIG": str(repo.config), "SDS_DATABASE_URL": url,
                "SDS_COLD_PATH": str(cold), "SDS_DB_ROLES": "false"})
    return subprocess.run([SDS, *args], env=env, capture_output=True, text=True, timeout=600,
                          check=False)


def _pages(url: str, world: World, cold: Path) -> list[list[tuple[int, bytes]]]:
    """Every page of each request, through the API app on `url` reading `cold`."""
    app: Flask = make_app(url, cold_path=str(cold))
    try:
        client, answers = app.test_client(), []
        for who, accept, params in REQUESTS:
            pages, cursor = [], None
            while True:
                got = get(client, world, "calibrated", who=who, accept=accept,
                          **{**params, **({"cursor": cursor} if cursor else {})})
                pages.append((got.status_code, got.get_data()))
                cursor = got.headers.get("X-Cursor-Next")
                if got.status_code != 200 or cursor is None:
                    break
            answers.append(pages)
        return answers
    finally:
        close_app(app)


def test_cold_pitr_restore(
    archived: tuple[PostgresServer, str, PgBackRestRepo], tmp_path: Path,
) -> None:
    """A point-in-time restore brings the cold months back byte-for-byte (module docstring)."""
    pg, url, repo = archived
    world = seed(url)
    cold = tmp_path / "cold"
    hot_pages = _pages(url, world, cold)

    moved = _sds(repo, url, cold, "cold", "move", "--hot-days", "1")
    assert moved.returncode == 0, moved.stdout + moved.stderr
    with psycopg.connect(url) as c:
        files = c.execute("SELECT path, bytes FROM cold_files WHERE state = 'live'").fetchall()
        hot_left = c.execute("SELECT count(*) FROM calibrated c JOIN devices d"
                             " ON d.name = c.device WHERE d.org_id IS NOT NULL").fetchone()
        t_mark = c.execute("SELECT clock_timestamp()").fetchone()[0]  # type: ignore[index]
    assert files and hot_left == (0,)
    copies = Path(repo.config.parent / "repo" / "cold")
    assert sorted(str(p.relative_to(copies)) for p in copies.rglob("*.parquet")) == \
        sorted(f[0] for f in files)
    assert _pages(url, world, cold) == hot_pages

    # The mistake after T: the catalogue emptied, and the cold tier's directory lost.
    with psycopg.connect(as_role(url, "postgres"), autocommit=True) as c:
        c.execute("DELETE FROM cold_files")
    shutil.rmtree(cold)
    switch_and_stop(pg)

    # Short: the restored server's unix socket path must fit in 107 bytes under any temp root.
    target = tmp_path / "r"
    result = _sds(repo, url, cold, "restore", "--to", t_mark.isoformat(),
                  "--target-dir", str(target / "data"))
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"4. cold tier: {len(files)} file(s) brought back from {copies}" in result.stdout
    restored, _ = start_restored(target)
    try:
        restored_url = as_role(restored.dsn("ingest"))
        checked = _sds(repo, restored_url, cold, "cold", "check")
        assert checked.returncode == 0, checked.stdout + checked.stderr
        assert f"ok: all {len(files)} cold files present" in checked.stdout
        assert _pages(restored_url, world, cold) == hot_pages

        # A catalogued file lost from the store and from the backup: reported, by name.
        lost = files[0][0]
        (cold / lost).unlink()
        (copies / lost).unlink()
        checked = _sds(repo, restored_url, cold, "cold", "check")
        assert checked.returncode == 3, checked.stdout + checked.stderr
        assert f"{cold / lost}: missing" in checked.stderr
        assert f"1 of {len(files)} cold files are not readable" in checked.stderr
    finally:
        restored.cleanup()
