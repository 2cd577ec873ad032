"""The backup repository moved as docs/operations.md "Where the repository lives" says (issue
32): a running installation with the embedded repository gets SDS_BACKUP_REPO_PATH on a second
disk (a directory root owns, as a fresh mount is) and the README's run command again; WAL
archiving goes on into the new repository, with no failure, and a backup lands there."""

from __future__ import annotations

import os
from pathlib import Path

import psycopg
import pytest

from tests.support.ingesting import wait_for
from tests.support.restoring import SECRETS, Tree

pytestmark = [
    pytest.mark.chaos,
    pytest.mark.timeout(900),
    pytest.mark.skipif(os.geteuid() != 0, reason="run.sh runs as root (PostgreSQL, mosquitto)"),
]




def test_moved_repository_keeps_archiving(tree: Tree, tmp_path: Path) -> None:
    first = tree.sh("deploy/run.sh")
    assert first.returncode == 0, first.stdout + first.stderr
    wait_for(lambda: tree.sh(SECRETS + ".venv/bin/sds backup status").returncode == 0, 180,
             every=2, what="the first full backup and a clean status")

    mount = tmp_path / "mnt-backup"  # the second disk's mount point, root's as mounted
    mount.mkdir(mode=0o755)
    tree.env["SDS_BACKUP_REPO_PATH"] = str(mount / "sds")
    again = tree.sh("deploy/run.sh")
    assert again.returncode == 0, again.stdout + again.stderr
    assert "BACKUPS ARE NOT SET UP" not in again.stdout + again.stderr

    with psycopg.connect(tree.url(), autocommit=True) as c:
        c.execute("CREATE TABLE moved_marker (at timestamptz DEFAULT clock_timestamp())")
        c.execute("INSERT INTO moved_marker DEFAULT VALUES")
    # The segment holding the marker is closed now, as an operator would (and as
    # `deploy/services.sh stop` does), instead of waiting up to archive_timeout (60 s) for it:
    # the drill is about where archiving goes after the move, not about archive_timeout. The
    # switch is the superuser's (deploy/services.sh psql).
    switched = tree.sh('deploy/services.sh psql -tA -c "SELECT pg_switch_wal()"')
    assert switched.returncode == 0, switched.stdout + switched.stderr
    archive = mount / "sds" / "archive" / "sds"

    def archived_there() -> bool:
        return any(p.name.endswith((".gz", ".lz4", ".zst")) or "-" in p.name
                   for p in archive.rglob("0000*"))

    wait_for(archived_there, 150, every=2, what="a WAL segment in the moved repository")
    status = tree.sh(SECRETS + ".venv/bin/sds backup now --type full")
    assert status.returncode == 0, status.stdout + status.stderr
    final = tree.sh("deploy/run.sh status")
    assert "wal archive: ok" in final.stdout, final.stdout + final.stderr
    assert any((mount / "sds" / "backup" / "sds").glob("*F")), "no full backup in the new place"
