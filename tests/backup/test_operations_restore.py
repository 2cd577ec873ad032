"""docs/operations.md "Restore, step by step", followed as written on a fresh tree: the README's
run command (deploy/run.sh in a scratch copy of the repository on free ports), then the restore
(stop, load secrets.env, `sds backup status`, `sds restore`), then the run command again, then
a full backup of the new timeline. The data committed before the stop is all there, every
process runs, and `deploy/run.sh status` shows the last backup's age and a working archive."""

from __future__ import annotations

import os
import time

import psycopg
import pytest

from tests.support.ingesting import wait_for
from tests.support.restoring import SECRETS, Tree

pytestmark = [
    pytest.mark.chaos,
    pytest.mark.timeout(900),
    pytest.mark.skipif(os.geteuid() != 0, reason="run.sh runs as root (PostgreSQL, mosquitto)"),
]





def test_run_restore_run_as_operations_md_says(tree: Tree) -> None:
    first = tree.sh("deploy/run.sh")
    assert first.returncode == 0, first.stdout + first.stderr
    assert "backups" in first.stdout
    # The scheduler takes the first full backup by itself.
    wait_for(lambda: tree.sh(SECRETS + ".venv/bin/sds backup status").returncode == 0, 180,
             every=2, what="the first full backup and a clean status")
    status = tree.sh("deploy/run.sh status")
    assert "backup: last full" in status.stdout and "wal archive: ok" in status.stdout, \
        status.stdout + status.stderr

    # A last commit just before the stop: the stop's WAL switch must bring it to the archive.
    url = tree.url()
    with psycopg.connect(url, autocommit=True) as c:
        c.execute("CREATE TABLE restore_marker (at timestamptz)")
        c.execute("INSERT INTO restore_marker VALUES (clock_timestamp())")
        before = c.execute("SELECT count(*) FROM calibrated").fetchone()[0]
    assert before > 0  # the simulator's backfill

    # 1. Stop.  2.-4. Load the settings, look, restore.
    assert (r := tree.sh("deploy/run.sh stop", timeout=300)).returncode == 0, r.stderr
    looked = tree.sh(SECRETS + ".venv/bin/sds backup status")
    assert "backup: last full" in looked.stdout, looked.stdout + looked.stderr
    started = time.monotonic()
    restored = tree.sh(SECRETS + ".venv/bin/sds restore")
    assert restored.returncode == 0, restored.stdout + restored.stderr
    assert "delta" in restored.stdout and "Start it: deploy/run.sh" in restored.stdout

    # 5. Start: recovery first, then everything.
    again = tree.sh("deploy/run.sh")
    assert again.returncode == 0, again.stdout + again.stderr
    assert "recovery done, accepting writes" in again.stdout
    back_s = time.monotonic() - started
    with psycopg.connect(tree.url()) as c:
        assert c.execute("SELECT count(*) FROM restore_marker").fetchone() == (1,)
        assert c.execute("SELECT count(*) FROM calibrated").fetchone()[0] >= before
        assert c.execute("SELECT pg_is_in_recovery()").fetchone() == (False,)
    status = tree.sh("deploy/run.sh status")
    assert status.returncode == 0, status.stdout + status.stderr

    # 6. A full backup of the new timeline; the status is clean.
    full = tree.sh(SECRETS + ".venv/bin/sds backup now --type full")
    assert full.returncode == 0, full.stdout + full.stderr
    wait_for(lambda: "wal archive: ok" in (s := tree.sh("deploy/run.sh status")).stdout and s,
             120, every=2, what="the archive ok on the new timeline")
    final = tree.sh(SECRETS + ".venv/bin/sds backup status")
    assert final.returncode == 0, final.stdout + final.stderr
    assert back_s < 600
