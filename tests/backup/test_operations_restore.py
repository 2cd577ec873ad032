"""docs/operations.md "Restore, step by step", followed as written on a fresh tree: the README's
run command (deploy/run.sh in a scratch copy of the repository on free ports), then the restore
(stop, load secrets.env, `sds backup status`, `sds restore`), then the run command again, then
a full backup of the new timeline. The data committed before the stop is all there, every
process runs, and `deploy/run.sh status` shows the last backup's age and a working archive."""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest

from testbed.services import free_port
from tests.support.ingesting import wait_for

pytestmark = [
    pytest.mark.chaos,
    pytest.mark.timeout(900),
    pytest.mark.skipif(os.geteuid() != 0, reason="run.sh runs as root (PostgreSQL, mosquitto)"),
]

REPO = Path(__file__).resolve().parents[2]


class Tree:
    """A scratch copy of the repository: deploy/ copied (so .state is scratch), the rest linked."""

    def __init__(self, root: Path) -> None:
        self.root = root
        for entry in REPO.iterdir():
            if entry.name not in {"deploy", ".state", ".git"}:
                (root / entry.name).symlink_to(entry)
        shutil.copytree(REPO / "deploy", root / "deploy")
        self.state = root / ".state"
        self.env = {k: v for k, v in os.environ.items() if not k.startswith("SDS_")}
        api = free_port()
        self.env.update({
            "SDS_PG_PORT": str(free_port()), "SDS_MQTT_PORT": str(free_port()),
            "SDS_EDGE_BIND": f"127.0.0.1:{free_port()}", "SDS_HTTP_BIND": f"127.0.0.1:{api}",
            "SDS_INGEST_SHARDS": "1", "SDS_METRICS_PORT": "0",
            "SDS_AGGREGATE_METRICS_PORT": str(free_port()), "SDS_API_METRICS_PORT": "0",
            "SDS_ALERTS_METRICS_PORT": "0",
        })

    def sh(self, command: str, timeout: float = 600) -> subprocess.CompletedProcess[str]:
        """A shell line as the operator types it, from the repository's directory."""
        return subprocess.run(["bash", "-c", command], env=self.env, cwd=self.root,
                              capture_output=True, text=True, timeout=timeout,
                              stdin=subprocess.DEVNULL)

    def url(self) -> str:
        lines = (self.state / "secrets.env").read_text().splitlines()
        return dict(ln.split("=", 1) for ln in lines if ln and not ln.startswith("#"))[
            "SDS_DATABASE_URL"]


SECRETS = "set -a; . .state/secrets.env; set +a; "


@pytest.fixture
def tree(tmp_path: Path) -> Iterator[Tree]:
    t = Tree(tmp_path)
    try:
        yield t
    finally:
        t.sh("deploy/run.sh stop", timeout=300)


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
