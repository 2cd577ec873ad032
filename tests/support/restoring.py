"""Backup drill support: `sds` run as the operator runs it against a test's pgBackRest
repository, the stop that deploy/services.sh does, and a restored server started and waited
for until it accepts writes. Used by tests/backup."""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

import psycopg

from testbed.services import PgBackRestRepo, PostgresServer
from tests.support.ingesting import ROOT, wait_for

SDS = str(ROOT / ".venv" / "bin" / "sds")


def sds(repo: PgBackRestRepo, *args: str,
        url: str | None = None) -> tuple[subprocess.CompletedProcess[str], float]:
    """An `sds` command with SDS_BACKUP_CONFIG (and SDS_DATABASE_URL) naming the test's
    repository and server; its result and duration."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("SDS_")}
    env["SDS_BACKUP_CONFIG"] = str(repo.config)
    if url:
        env["SDS_DATABASE_URL"] = url
    start = time.monotonic()
    result = subprocess.run([SDS, *args], env=env, capture_output=True, text=True, timeout=600)
    return result, time.monotonic() - start


def switch_and_stop(pg: PostgresServer) -> None:
    """What deploy/services.sh stop does: a WAL switch, so the shutdown archives the last
    segment, then the fast shutdown."""
    with psycopg.connect(pg.dsn(), autocommit=True) as c:
        c.execute("SELECT pg_switch_wal()")
    pg.stop()


def start_restored(base: Path, *, port: int | None = None) -> tuple[PostgresServer, float]:
    """Start a server on a restored data directory (base/data) and wait until it has replayed
    the archive and promoted itself; the server and the seconds that took."""
    start = time.monotonic()
    server = PostgresServer().start(base, durable=True, port=port)

    def promoted() -> bool:
        with psycopg.connect(server.dsn(), autocommit=True) as c:
            return c.execute("SELECT NOT pg_is_in_recovery()").fetchone() == (True,)

    wait_for(promoted, 300, every=0.2, what="the restored server to leave recovery")
    return server, time.monotonic() - start
