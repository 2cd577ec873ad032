"""Backup drill support: `sds` run as the operator runs it against a test's pgBackRest
repository, the stop that deploy/services.sh does, and a restored server started and waited
for until it accepts writes, and the `archived` fixture (tests/backup/conftest.py registers it).
Used by tests/backup."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest

from shared.config import Settings
from testbed.pgbackrest import PgBackRestRepo
from testbed.postgres import PostgresServer
from testbed.process import free_port
from tests.support.databases import migrate_database
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


# Days of demo history a scratch stack starts with. The shipped 500 fill the cold tier at once
# but are 30 s of a 40 s first run on an idle machine (more under load) and make the first full
# backup, a restore and the cold mover's first run heavier; drills that are not about the cold
# tier need a few days (the simulator's backfill and the drill's own readings are the data).
# A drill about the cold tier removes it from `Tree.env` (tests/backup/test_whole_machine.py).
SCRATCH_DEMO_HISTORY_DAYS = "2"


class Tree:
    """A scratch copy of the repository (the README's run command on free ports): deploy/
    copied (so .state is scratch), the rest linked; a short demo history
    (SCRATCH_DEMO_HISTORY_DAYS)."""

    def __init__(self, root: Path) -> None:
        self.root = root
        for entry in ROOT.iterdir():
            if entry.name not in {"deploy", ".state", ".git"}:
                (root / entry.name).symlink_to(entry)
        shutil.copytree(ROOT / "deploy", root / "deploy")
        self.state = root / ".state"
        self.env = {k: v for k, v in os.environ.items() if not k.startswith("SDS_")}
        api = free_port()
        self.env.update({
            "SDS_PG_PORT": str(free_port()), "SDS_MQTT_PORT": str(free_port()),
            "SDS_EDGE_BIND": f"127.0.0.1:{free_port()}", "SDS_HTTP_BIND": f"127.0.0.1:{api}",
            "SDS_INGEST_SHARDS": "1", "SDS_METRICS_PORT": "0",
            "SDS_AGGREGATE_METRICS_PORT": str(free_port()),
            # Off or free: the defaults may be taken by other runs on a shared machine.
            "SDS_ALERTS_METRICS_PORT": "0", "SDS_DELIVERY_METRICS_PORT": "0",
            "SDS_API_METRICS_PORT": str(free_port()),
            "SDS_DEMO_HISTORY_DAYS": SCRATCH_DEMO_HISTORY_DAYS,
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


def _children() -> dict[int, list[int]]:
    kids: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        kids.setdefault(int(fields[1]), []).append(int(stat.parent.name))
    return kids


def processes_naming(root: Path) -> list[str]:
    """Live processes whose command line names `root` (a scratch tree's processes, started by
    its deploy/ scripts by absolute path), as "pid: command line"."""
    found = []
    for proc in Path("/proc").iterdir():
        if proc.name.isdigit():
            try:
                cmd = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode()
            except OSError:
                continue
            if str(root) in cmd:
                found.append(f"{proc.name}: {cmd}")
    return found


def descendants(roots: list[int]) -> list[int]:
    """The processes under `roots` (and the roots), by parent pid, from /proc now."""
    kids, found, todo = _children(), [], list(roots)
    while todo:
        pid = todo.pop()
        if pid not in found:
            found.append(pid)
            todo.extend(kids.get(pid, []))
    return found


def kill9(roots: list[int]) -> int:
    """The power cut: every process under `roots` stopped at once (SIGSTOP, so none reacts to
    another's death: no supervisor restarts, no shutdown, no last WAL sent), then SIGKILLed.
    The number of processes killed."""
    stopped: list[int] = []
    while new := [p for p in descendants(roots) if p not in stopped]:
        # Again until no new process appears: one may have forked before it was stopped.
        for pid in new:
            _signal(pid, signal.SIGSTOP)
        stopped += new
    for pid in stopped:
        _signal(pid, signal.SIGKILL)
    return len(stopped)


def _signal(pid: int, sig: int) -> None:
    try:
        os.kill(pid, sig)
    except ProcessLookupError:
        pass


def supervisor_pids(state: Path, names: list[str] | None = None) -> list[int]:
    """The supervisors' pids of a deploy/run.sh tree's processes (all, or `names`)."""
    files = [state / "pids" / f"{n}.pid" for n in names] if names else \
        sorted((state / "pids").glob("*.pid"))
    return [int(f.read_text().strip()) for f in files if f.is_file() and f.read_text().strip()]


@pytest.fixture
def archived(tmp_path: Path) -> Iterator[tuple[PostgresServer, str, PgBackRestRepo]]:
    """A durable server with a migrated database `ingest`, archiving into its own repository
    at the shipped archive_timeout, with a first full backup: (server, database URL, repo)."""
    pg = PostgresServer().start(tmp_path / "pg", durable=True)
    try:
        url = migrate_database(pg.create_database("ingest"))
        repo = PgBackRestRepo(tmp_path / "pgbackrest").attach(
            pg, archive_timeout=Settings().backup_archive_timeout)
        repo.backup("full")
        yield pg, url, repo
    finally:
        pg.cleanup()


@pytest.fixture
def tree(tmp_path: Path) -> Iterator[Tree]:
    """A copy of the repository (`Tree`); its `deploy/run.sh` stack stopped afterwards."""
    t = Tree(tmp_path)
    try:
        yield t
    finally:
        t.sh("deploy/run.sh stop", timeout=300)
