"""The WAL stream's own script, deploy/lib/walstream.sh (issue 32; docs/operations.md "Backups
and restore"), run as deploy/lib/pg_walstream.sh runs it (as postgres, over the socket) against
a durable test server: it makes its slot, moves aside the files of a timeline the server no
longer has (after a restore to an earlier moment) instead of failing on them, streams every
commit, removes the segments the archive already holds, and stops on SIGTERM."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest

from testbed.postgres import PG_BIN, PostgresServer
from tests.support.ingesting import ROOT, wait_for

pytestmark = [
    pytest.mark.usefixtures("processes"),
    pytest.mark.timeout(180),
    pytest.mark.skipif(os.geteuid() != 0, reason="PostgreSQL runs as postgres"),
]

SLOT = "sds_walstream"
# Far past any position a new test cluster reaches: a file of an abandoned timeline.
AHEAD = "00000001000000000000009F.partial"


@pytest.fixture
def server(tmp_path: Path) -> Iterator[PostgresServer]:
    pg = PostgresServer().start(tmp_path / "pg", durable=True)
    try:
        yield pg
    finally:
        pg.cleanup()


def sql(pg: PostgresServer, query: str) -> object:
    with psycopg.connect(pg.dsn(), autocommit=True) as c:
        cur = c.execute(query)
        row = cur.fetchone() if cur.description else None
    return row[0] if row else None


def test_stream_streams_prunes_and_moves_an_abandoned_timeline_aside(
    server: PostgresServer, tmp_path: Path,
) -> None:
    # Archiving that "succeeds" at once, so pg_stat_archiver names archived segments to prune.
    sql(server, "ALTER SYSTEM SET archive_mode = on")
    sql(server, "ALTER SYSTEM SET archive_command = 'true'")
    server.restart()
    stream = tmp_path / "stream"
    stream.mkdir()
    (stream / AHEAD).write_bytes(b"\0" * 1024)
    script = tmp_path / "walstream.sh"
    shutil.copy(ROOT / "deploy" / "lib" / "walstream.sh", script)
    shutil.chown(script, "postgres", "postgres")
    shutil.chown(stream, "postgres", "postgres")
    shutil.chown(stream / AHEAD, "postgres", "postgres")
    # As postgres (its supervisor's --user), so that SIGTERM reaches the script itself.
    proc = subprocess.Popen(
        ["bash", str(script), str(PG_BIN), str(stream), str(server.socket_dir),
         str(server.port), SLOT], user="postgres", group="postgres",
        env={**os.environ, "SDS_WALSTREAM_PRUNE_EVERY": "1"}, cwd="/",
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        wait_for(lambda: sql(server, "SELECT count(*) FROM pg_stat_replication WHERE "
                                     f"application_name = '{SLOT}' AND state = 'streaming'")
                 == 1,
                 60, what="the stream connected")
        assert (stream / "superseded" / AHEAD).exists() and not (stream / AHEAD).exists()
        assert sql(server, f"SELECT slot_type FROM pg_replication_slots "
                           f"WHERE slot_name = '{SLOT}'") == "physical"

        # A commit reaches the stream's disk.
        with psycopg.connect(server.dsn(), autocommit=True) as c:
            c.execute("CREATE TABLE streamed (n int)")
            c.execute("INSERT INTO streamed SELECT generate_series(1, 1000)")
            lsn = c.execute("SELECT pg_current_wal_flush_lsn()::text").fetchone()[0]
        wait_for(lambda: sql(server, f"SELECT flush_lsn >= '{lsn}'::pg_lsn FROM "
                                     f"pg_stat_replication WHERE application_name = '{SLOT}'"),
                 30, what="the commit flushed by the stream")
        first = sql(server, "SELECT pg_walfile_name(pg_current_wal_lsn())")
        assert isinstance(first, str)
        assert (stream / f"{first}.partial").exists()

        # Two segments switched and archived: the stream drops what the archive holds.
        for _ in range(2):
            with psycopg.connect(server.dsn(), autocommit=True) as c:
                c.execute("INSERT INTO streamed VALUES (0)")
                c.execute("SELECT pg_switch_wal()")
        wait_for(lambda: (sql(server, "SELECT last_archived_wal FROM pg_stat_archiver") or "")
                 [8:] >= first[8:], 30, what="the first segment archived")
        wait_for(lambda: not (stream / first).exists()
                 and not (stream / f"{first}.partial").exists(), 30,
                 what=f"{first} pruned from the stream once archived")
    finally:
        proc.send_signal(signal.SIGTERM)
        out, _ = proc.communicate(timeout=30)
    assert proc.returncode == 0, out
    assert "streaming into" in out and "past the server's WAL" in out


def start_stream(server: PostgresServer, tmp_path: Path) -> subprocess.Popen[str]:
    """The script with its shipped prune interval (60 s), connected."""
    stream = tmp_path / "stream"
    stream.mkdir()
    shutil.chown(stream, "postgres", "postgres")
    script = tmp_path / "walstream.sh"
    shutil.copy(ROOT / "deploy" / "lib" / "walstream.sh", script)
    proc = subprocess.Popen(
        ["bash", str(script), str(PG_BIN), str(stream), str(server.socket_dir),
         str(server.port), SLOT], user="postgres", group="postgres", cwd="/",
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    wait_for(lambda: sql(server, "SELECT count(*) FROM pg_stat_replication WHERE "
                                 f"application_name = '{SLOT}' AND state = 'streaming'") == 1,
             60, what="the stream connected")
    return proc


def test_stream_exits_at_once_when_the_server_dies(server: PostgresServer,
                                                   tmp_path: Path) -> None:
    # Not at its next prune (60 s later): its supervisor starts it again as soon as the
    # server is back (it failed in tests/chaos/test_supervision.py: 60 s not connected).
    proc = start_stream(server, tmp_path)
    try:
        server.crash()
        out, _ = proc.communicate(timeout=20)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate(timeout=30)
    assert proc.returncode != 0 and "pg_receivewal exited" in out, out
