"""Real PostgreSQL 15 (+ TimescaleDB) and mosquitto servers on free loopback ports, for tests.

Each server lives in its own directory (a fresh one under /tmp unless one is given) and is driven
through its own pid only, so fault tests can stop, crash or signal it. Run as root (as CI is), the
servers run under their own users, postgres and mosquitto, exactly as deploy/services.sh runs them.
Pure stdlib plus psycopg. Every wait is bounded; a failed start raises with the server's log tail.

    pg = PostgresServer().start()               # fsync off: fast; durable=True for crash tests
    pg.create_database("t1"); psycopg.connect(pg.dsn("t1"))
    mq = MosquittoBroker().start(users={"ingester": "pw", "A000001": "pw"})  # shipped ACL
    mq.kill(); mq.restart()
    repo = PgBackRestRepo(tmp / "pgbackrest").attach(pg)   # WAL archive + stanza (shared.backup)
"""

from __future__ import annotations

import grp
import http.client
import importlib.util
import os
import pwd
import re
import shlex
import shutil
import signal as _signal
import socket
import stat
import subprocess
import sys
import tempfile
import time
from abc import ABC, abstractmethod
from pathlib import Path
from types import ModuleType, TracebackType

import psycopg
from psycopg import sql

REPO = Path(__file__).resolve().parents[1]
PG_BIN = Path("/usr/lib/postgresql/15/bin")
SHIPPED_CONF = REPO / "deploy" / "mosquitto" / "mosquitto.conf"
DURABLE_CONF = REPO / "deploy" / "mosquitto" / "durable.conf"
SHIPPED_ACL = REPO / "deploy" / "mosquitto" / "acl"

START_TIMEOUT = 60.0  # seconds; initdb + start is ~1-2 s here, crash recovery a little more
STOP_TIMEOUT = 30.0


class ServiceError(RuntimeError):
    """A test server failed to start, stop or answer; the message ends with its log tail."""


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago (the OS picks it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def port_open(port: int, host: str = "127.0.0.1") -> bool:
    """Whether something accepts TCP connections on host:port."""
    try:
        with socket.create_connection((host, port), timeout=0.5):
            return True
    except OSError:
        return False


def _is_root() -> bool:
    return os.geteuid() == 0


def _tail(path: Path, lines: int = 40) -> str:
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return f"(no {path})"
    return f"--- last {lines} lines of {path} ---\n" + "\n".join(text.splitlines()[-lines:])


def _chown_tree(path: Path, user: str) -> None:
    """Give a server's directory to the user it runs as (only possible, and needed, as root)."""
    if not _is_root():
        return
    pw = pwd.getpwnam(user)
    for root, dirs, files in os.walk(path):
        os.chown(root, pw.pw_uid, pw.pw_gid)
        for name in dirs + files:
            os.chown(os.path.join(root, name), pw.pw_uid, pw.pw_gid, follow_symlinks=False)


def _ensure_traversable(path: Path, user: str) -> None:
    """Grant o+x on any parent of path that user could not enter (e.g. pytest's 0700 tmp root).

    Only traverse rights are added, never read or write: the servers need to reach their own
    directory, nothing else.
    """
    if not _is_root():
        return
    pw = pwd.getpwnam(user)
    groups = {g.gr_gid for g in grp.getgrall() if user in g.gr_mem} | {pw.pw_gid}
    for parent in reversed(path.resolve().parents):
        st = parent.stat()
        if st.st_uid == pw.pw_uid:
            ok = st.st_mode & stat.S_IXUSR
        elif st.st_gid in groups:
            ok = st.st_mode & stat.S_IXGRP
        else:
            ok = st.st_mode & stat.S_IXOTH
        if not ok:
            os.chmod(parent, stat.S_IMODE(st.st_mode) | stat.S_IXOTH)


class _Server(ABC):
    """Directory bookkeeping shared by both servers."""

    base_dir: Path
    _owns_dir: bool = False

    def _prepare_dir(self, base_dir: Path | None, prefix: str) -> Path:
        if base_dir is None:
            # Under /tmp, so the server's user can reach it without touching anything else.
            self.base_dir = Path(tempfile.mkdtemp(prefix=prefix))
            self._owns_dir = True
        else:
            self.base_dir = Path(base_dir).resolve()
            self.base_dir.mkdir(parents=True, exist_ok=True)
        return self.base_dir

    def cleanup(self) -> None:
        """Stop the server and remove its directory if this helper created it."""
        self.stop()
        if self._owns_dir:
            shutil.rmtree(self.base_dir, ignore_errors=True)

    @abstractmethod
    def stop(self) -> None:
        """Stop the server (each server knows how)."""

    def __enter__(self) -> _Server:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.cleanup()


class _ProcessServer(_Server):
    """A server run in the foreground as one Popen handle on one port (mosquitto, gunicorn,
    nginx): the handle and port bookkeeping they share."""

    _port: int | None
    _proc: subprocess.Popen[bytes] | None

    def is_running(self) -> bool:
        """Whether the (master) process is alive."""
        return self._proc is not None and self._proc.poll() is None

    @property
    def port(self) -> int:
        if self._port is None:
            raise ServiceError(f"{type(self).__name__} not started")
        return self._port

    @property
    def pid(self) -> int:
        return self._require_proc().pid

    def _require_proc(self) -> subprocess.Popen[bytes]:
        if self._proc is None:
            raise ServiceError(f"{type(self).__name__} not started")
        return self._proc


class _PreforkServer(_ProcessServer):
    """A master with worker processes (gunicorn, nginx)."""

    def kill(self) -> None:
        """SIGKILL the master and its workers (a crash: in-flight connections are reset)."""
        if self._proc is not None and self._proc.poll() is None:
            workers = _children(self._proc.pid)
            self._proc.kill()
            for pid in workers:
                try:
                    os.kill(pid, _signal.SIGKILL)
                except ProcessLookupError:
                    pass
            self._proc.wait(timeout=STOP_TIMEOUT)


class PostgresServer(_Server):
    """A throwaway PostgreSQL 15 cluster with TimescaleDB preloaded, trust auth, loopback only."""

    def __init__(self) -> None:
        self._port: int | None = None
        self.durable = False
        self.timescaledb = True

    # -- lifecycle ------------------------------------------------------------------------------
    def start(
        self,
        base_dir: Path | None = None,
        *,
        durable: bool = False,
        port: int | None = None,
        timescaledb: bool = True,
    ) -> PostgresServer:
        """initdb (first time) into base_dir/data and start; returns self.

        durable=False turns off fsync, synchronous_commit and full_page_writes: much faster, but
        crash() may then lose the last commits (the WAL writer flushes asynchronously; seen
        here: a committed table gone after stop -m immediate). Tests of crash safety and commit
        durability pass durable=True to get PostgreSQL's defaults.
        timescaledb=False leaves the extension's library out: a plain PostgreSQL, like a managed
        service without it.
        """
        base = self._prepare_dir(base_dir, "sds-pg-")
        self.durable = durable
        self.timescaledb = timescaledb
        self._port = port or free_port()
        self.data_dir = base / "data"
        self.socket_dir = base / "run"
        self.log_path = base / "postgres.log"
        self.socket_dir.mkdir(exist_ok=True)
        _chown_tree(base, "postgres")
        _ensure_traversable(base, "postgres")
        if not (self.data_dir / "PG_VERSION").exists():
            # -A trust: tests connect as any role without passwords; --no-sync: nothing to
            # protect in a test cluster, and it saves most of initdb's time.
            self._run(
                [
                    str(PG_BIN / "initdb"),
                    "-D",
                    str(self.data_dir),
                    "-U",
                    "postgres",
                    "-A",
                    "trust",
                    "-E",
                    "UTF8",
                    "--locale=C",
                    "--no-sync",
                    "--no-instructions",
                ],
                what="initdb",
            )
        self._pg_ctl_start()
        return self

    def start_standby(
        self,
        primary: PostgresServer,
        base_dir: Path | None = None,
        *,
        slot: str = "sds_standby",
        durable: bool = True,
        port: int | None = None,
    ) -> PostgresServer:
        """A hot standby of `primary` (Debian's own streaming replication, as
        deploy/standby.sh sets one up): pg_basebackup through a new physical replication slot,
        standby.signal, primary_conninfo with application_name = `slot` (the name
        synchronous_standby_names refers to); then started like any server. Returns self."""
        base = self._prepare_dir(base_dir, "sds-pg-standby-")
        self.durable = durable
        self.timescaledb = primary.timescaledb
        self._port = port or free_port()
        self.data_dir = base / "data"
        self.socket_dir = base / "run"
        self.log_path = base / "postgres.log"
        self.socket_dir.mkdir(exist_ok=True)
        _chown_tree(base, "postgres")
        _ensure_traversable(base, "postgres")
        conninfo = (f"host=127.0.0.1 port={primary.port} user=postgres "
                    f"application_name={slot}")
        self._run(
            [
                str(PG_BIN / "pg_basebackup"),
                "-d",
                conninfo,
                "-D",
                str(self.data_dir),
                "-X",
                "stream",
                "-C",
                "-S",
                slot,
                "-R",
                "--no-sync",
                # Start at once: the default spread checkpoint can take minutes on a durable
                # primary (checkpoint_completion_target of checkpoint_timeout).
                "--checkpoint=fast",
            ],
            what="pg_basebackup",
        )
        self._pg_ctl_start()
        return self

    def promote(self) -> None:
        """pg_ctl promote -w: the standby leaves recovery and accepts writes."""
        self._run(
            [str(PG_BIN / "pg_ctl"), "-D", str(self.data_dir), "-w", "-t",
             str(int(START_TIMEOUT)), "promote"],
            what="pg_ctl promote",
        )

    def stop(self, mode: str = "fast") -> None:
        """pg_ctl stop -m mode (fast: roll back sessions, checkpoint; immediate: a crash)."""
        if self.is_running():
            self._run(
                [
                    str(PG_BIN / "pg_ctl"),
                    "-D",
                    str(self.data_dir),
                    "-m",
                    mode,
                    "-w",
                    "-t",
                    str(int(STOP_TIMEOUT)),
                    "stop",
                ],
                what=f"pg_ctl stop -m {mode}",
            )

    def crash(self) -> None:
        """Stop without a checkpoint (pg_ctl stop -m immediate); the next start runs recovery."""
        self.stop(mode="immediate")

    def restart(self) -> None:
        """Stop (fast) if running, then start again with the same directory, port and settings."""
        self.stop()
        self._pg_ctl_start()

    def is_running(self) -> bool:
        """Whether the cluster's postmaster is up (pg_ctl status)."""
        if not hasattr(self, "data_dir") or not (self.data_dir / "PG_VERSION").exists():
            return False
        result = subprocess.run(
            self._as_postgres([str(PG_BIN / "pg_ctl"), "-D", str(self.data_dir), "status"]),
            cwd=self.base_dir,
            capture_output=True,
            timeout=STOP_TIMEOUT,
        )
        return result.returncode == 0

    # -- connection info ------------------------------------------------------------------------
    @property
    def port(self) -> int:
        if self._port is None:
            raise ServiceError("PostgresServer not started")
        return self._port

    def dsn(self, dbname: str = "postgres", user: str = "postgres") -> str:
        """A libpq URL to this cluster over 127.0.0.1 (trust auth, no password)."""
        return f"postgresql://{user}@127.0.0.1:{self.port}/{dbname}"

    def create_database(self, name: str, template: str | None = None) -> str:
        """CREATE DATABASE name [TEMPLATE template]; returns its DSN."""
        stmt = sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name))
        if template:
            stmt += sql.SQL(" TEMPLATE {}").format(sql.Identifier(template))
        with psycopg.connect(self.dsn(), autocommit=True) as conn:
            conn.execute(stmt)
        return self.dsn(name)

    def drop_database(self, name: str) -> None:
        """DROP DATABASE IF EXISTS name WITH (FORCE): also ends sessions still connected."""
        stmt = sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name))
        with psycopg.connect(self.dsn(), autocommit=True) as conn:
            conn.execute(stmt)

    def log_text(self) -> str:
        """The server log so far."""
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    # -- internals ------------------------------------------------------------------------------
    def _options(self) -> str:
        opts = [
            "-c",
            "listen_addresses=127.0.0.1",
            "-p",
            str(self.port),
            "-c",
            f"unix_socket_directories={self.socket_dir}",
        ]
        # A standby answers reads while it replays (hot_standby is the default) and tells the
        # primary which rows its queries still need, so vacuum there does not cancel them.
        opts += ["-c", "hot_standby_feedback=on"]
        if self.timescaledb:
            opts += [
                "-c",
                "shared_preload_libraries=timescaledb",
                "-c",
                "timescaledb.telemetry_level=off",
                # No TimescaleDB job scheduler: it keeps a session open in every database that
                # has the extension, so CREATE DATABASE ... TEMPLATE that_db waits 5 s and then
                # fails with ObjectInUse (seen here). The Apache edition has no policies to run.
                "-c",
                "timescaledb.max_background_workers=0",
            ]
        if not self.durable:
            opts += [
                "-c",
                "fsync=off",
                "-c",
                "synchronous_commit=off",
                "-c",
                "full_page_writes=off",
            ]
        return shlex.join(opts)  # pg_ctl hands -o to /bin/sh

    def _pg_ctl_start(self) -> None:
        self._run(
            [
                str(PG_BIN / "pg_ctl"),
                "-D",
                str(self.data_dir),
                "-l",
                str(self.log_path),
                "-w",
                "-t",
                str(int(START_TIMEOUT)),
                "-o",
                self._options(),
                "start",
            ],
            what="pg_ctl start",
            timeout=START_TIMEOUT + 10,
        )

    def _as_postgres(self, cmd: list[str]) -> list[str]:
        # PostgreSQL refuses to run as root.
        return ["runuser", "-u", "postgres", "--", *cmd] if _is_root() else cmd

    def _run(self, cmd: list[str], *, what: str, timeout: float = START_TIMEOUT) -> None:
        try:
            result = subprocess.run(
                self._as_postgres(cmd),
                cwd=self.base_dir,
                capture_output=True,
                text=True,
                timeout=timeout,
            )
        except subprocess.TimeoutExpired as exc:
            raise ServiceError(
                f"{what} timed out after {timeout}s\n{_tail(self.log_path)}"
            ) from exc
        if result.returncode != 0:
            raise ServiceError(
                f"{what} failed ({result.returncode}): {result.stdout}{result.stderr}\n"
                f"{_tail(self.log_path)}"
            )


class PgBackRestRepo:
    """A pgBackRest repository of a test's own for a PostgresServer, set up as deploy/services.sh
    sets up the shipped one: the configuration rendered by shared/backup.py for the server's
    data directory, port and socket, PostgreSQL archiving into it (ALTER SYSTEM, so a restored
    copy archives too), the stanza created. Commands run as postgres, like the deploy's.

        repo = PgBackRestRepo(tmp_path / "pgbackrest").attach(pg, archive_timeout=5)
        repo.backup("full"); repo.config  # for SDS_BACKUP_CONFIG
    """

    def __init__(self, base_dir: Path) -> None:
        self.base_dir = Path(base_dir).resolve()
        self.config = self.base_dir / "pgbackrest.conf"

    def attach(self, pg: PostgresServer, *, archive_timeout: int = 60,
               cipher_pass: str | None = None) -> PgBackRestRepo:
        """Render the configuration for `pg` (an encrypted repository with `cipher_pass`), turn
        archiving on (a restart), create the stanza."""
        from shared import backup
        from shared.config import Settings

        settings = Settings(backup_archive_timeout=archive_timeout,
                            backup_cipher_pass=cipher_pass)
        for sub in ("", "log", "lock", "spool", "repo"):
            (self.base_dir / sub).mkdir(parents=True, exist_ok=True, mode=0o700)
        node = backup.PgNode(str(pg.data_dir), pg.port, str(pg.socket_dir))
        self.config.write_text(backup.render_config(settings, [node], base_dir=str(self.base_dir)))
        self.config.chmod(0o600)
        _chown_tree(self.base_dir, "postgres")
        _ensure_traversable(self.base_dir, "postgres")
        with psycopg.connect(pg.dsn(), autocommit=True) as conn:
            for key, value in backup.archive_settings(str(self.config), settings).items():
                conn.execute(sql.SQL("ALTER SYSTEM SET {} = {}").format(
                    sql.Identifier(key), sql.Literal(value)))
        pg.restart()  # archive_mode takes a restart
        self.run("stanza-create", timeout=120)
        return self

    def run(self, *args: str, timeout: float = 600) -> str:
        """One pgbackrest command against the stanza; its output (a failure raises)."""
        from shared import backup

        try:
            return backup.run(str(self.config), *args, timeout=timeout).stdout
        except backup.BackupError as exc:
            raise ServiceError(str(exc)) from None

    def backup(self, kind: str = "full") -> str:
        """Take a backup of `kind`; its label."""
        from shared import backup

        self.run("backup", f"--type={kind}")
        newest = backup.info(str(self.config)).newest()
        assert newest is not None
        return newest.label

    def backup_dir(self, label: str) -> Path:
        """Where the files of backup `label` are in the repository."""
        return self.base_dir / "repo" / "backup" / "sds" / label


def shipped_durable_conf() -> str:
    """deploy/mosquitto/durable.conf: the persistence and queue settings production uses."""
    return DURABLE_CONF.read_text()


def conf_settings(text: str) -> dict[str, str]:
    """mosquitto.conf text as option -> value (last one wins; comments and blanks skipped)."""
    settings: dict[str, str] = {}
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        key, _, value = line.partition(" ")
        settings[key] = value.strip()
    return settings


class MosquittoBroker(_ProcessServer):
    """A mosquitto broker on a free 127.0.0.1 port, started in the foreground with a Popen handle.

    Faults go to this broker's pid only: signal(SIGSTOP), kill() (SIGKILL: loses what was queued
    since the last autosave), stop() (SIGTERM: saves first).
    """

    def __init__(self) -> None:
        self._port: int | None = None
        self._proc: subprocess.Popen[bytes] | None = None
        self._env: dict[str, str] = {}
        self._binary = "mosquitto"

    def start(
        self,
        base_dir: Path | None = None,
        *,
        durable: bool = True,
        port: int | None = None,
        users: dict[str, str] | None = None,
        acl: str | None = None,
        extra_conf: str = "",
        shipped_template: bool = False,
        env: dict[str, str] | None = None,
        binary: str = "mosquitto",
        plugin: Path | None = None,
    ) -> MosquittoBroker:
        """Write a config into base_dir and start the broker; returns self.

        users=None: anonymous clients allowed, no ACL. Otherwise a password file with these users
        and the given ACL text (default: the shipped deploy/mosquitto/acl). durable=True appends
        the shipped durable.conf. shipped_template=True renders deploy/mosquitto/mosquitto.conf
        itself (as deploy/services.sh does) instead of the helper's own listener/auth lines.
        env: extra environment for the broker process (e.g. a glibc malloc tunable). binary:
        another mosquitto executable than the one on PATH (a negative control). plugin: with the
        shipped template, load this build of deploy/mosquitto/sds_plugin.c instead of the
        installed one (a test of the source in this tree).
        """
        self._env = dict(env or {})
        self._binary = binary
        base = self._prepare_dir(base_dir, "sds-mqtt-")
        self._port = port or free_port()
        self.data_dir = base / "data"
        self.data_dir.mkdir(exist_ok=True)
        self.conf_path = base / "mosquitto.conf"
        self.log_path = base / "mosquitto.log"
        self.stderr_path = base / "stderr.log"
        passwd, acl_path = base / "passwd", base / "acl"

        if users is not None:
            passwd.unlink(missing_ok=True)
            for i, (name, password) in enumerate(users.items()):
                flags = ["-c", "-b"] if i == 0 else ["-b"]
                subprocess.run(
                    ["mosquitto_passwd", *flags, str(passwd), name, password],
                    check=True,
                    capture_output=True,
                    timeout=30,
                )
            if not users:
                passwd.touch()
            acl_path.write_text(acl if acl is not None else SHIPPED_ACL.read_text())

        if shipped_template:
            if users is None:
                raise ValueError("the shipped template requires users (it refuses anonymous)")
            conf = (
                SHIPPED_CONF.read_text()
                .replace("@BIND@", "127.0.0.1")
                .replace("@PORT@", str(self._port))
                .replace("@DIR@", str(base))
            )
            if plugin is not None:
                conf = conf.replace("/usr/local/lib/sds/mosquitto_sds.so", str(plugin))
        else:
            conf = f"listener {self._port} 127.0.0.1\n"
            if users is None:
                conf += "allow_anonymous true\n"
            else:
                conf += f"allow_anonymous false\npassword_file {passwd}\nacl_file {acl_path}\n"
            conf += (
                f"persistence_location {self.data_dir}/\nlog_dest file {self.log_path}\n"
                "log_type error\nlog_type warning\nlog_type notice\nlog_type information\n"
            )
        conf += "\n" + (shipped_durable_conf() if durable else "persistence false\n")
        conf += "\n" + extra_conf + "\n"
        self.conf_path.write_text(conf)
        # As root, mosquitto drops to user "mosquitto" (as in production) and must write its
        # store and log here; chowning keeps the tests honest about that, rather than "user root".
        _chown_tree(base, "mosquitto")
        _ensure_traversable(base, "mosquitto")
        self._launch()
        return self

    # -- faults and lifecycle -------------------------------------------------------------------
    def signal(self, sig: int) -> None:
        """Send sig (SIGHUP, SIGUSR1, SIGSTOP, SIGCONT, ...) to this broker's pid."""
        self._require_proc().send_signal(sig)

    def stop(self) -> None:
        """SIGTERM and wait: mosquitto saves its store on the way out."""
        if self.is_running():
            proc = self._require_proc()
            proc.send_signal(_signal.SIGCONT)  # a SIGSTOPped broker cannot act on SIGTERM
            proc.terminate()
            try:
                proc.wait(timeout=STOP_TIMEOUT)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=STOP_TIMEOUT)
                raise ServiceError(f"mosquitto ignored SIGTERM\n{_tail(self.log_path)}") from None

    def kill(self) -> None:
        """SIGKILL and wait: a crash, nothing saved since the last autosave."""
        if self.is_running():
            proc = self._require_proc()
            proc.kill()
            proc.wait(timeout=STOP_TIMEOUT)

    def restart(self) -> None:
        """Stop (SIGTERM) if running, then start again with the same config and port."""
        self.stop()
        self._launch()

    def log_text(self) -> str:
        """The broker's log file plus anything it wrote to stderr."""
        parts = [
            p.read_text(errors="replace") for p in (self.log_path, self.stderr_path) if p.exists()
        ]
        return "\n".join(parts)

    # -- internals ------------------------------------------------------------------------------

    def _launch(self) -> None:
        # Readiness comes from the log ("... running" after the listener opened), read from where
        # it ended before this launch; a probe connection would show up in the log and in tests.
        offset = self.log_path.stat().st_size if self.log_path.exists() else 0
        with open(self.stderr_path, "ab") as err:
            self._proc = subprocess.Popen(
                [self._binary, "-c", str(self.conf_path)],
                stdin=subprocess.DEVNULL,
                stdout=err,
                stderr=err,
                env={**os.environ, **self._env} if self._env else None,
            )
        deadline = time.monotonic() + START_TIMEOUT
        while time.monotonic() < deadline:
            if self._proc.poll() is not None:
                raise ServiceError(
                    f"mosquitto exited with {self._proc.returncode} at start\n"
                    f"{_tail(self.stderr_path)}\n{_tail(self.log_path)}"
                )
            if self._running_since(offset):
                return
            time.sleep(0.02)
        self.kill()
        raise ServiceError(
            f"mosquitto not listening on {self._port} after {START_TIMEOUT}s\n"
            f"{_tail(self.log_path)}"
        )

    def _running_since(self, offset: int) -> bool:
        try:
            with open(self.log_path, "rb") as f:
                f.seek(offset)
                text = f.read().decode(errors="replace")
        except OSError:
            return False
        return re.search(r"mosquitto version \S+ running", text) is not None


SHIPPED_NGINX_CONF = REPO / "deploy" / "nginx" / "nginx.conf"
GUNICORN_CONF = REPO / "deploy" / "gunicorn.conf.py"


def _edge_conf() -> ModuleType:
    spec = importlib.util.spec_from_file_location("sds_edge_conf",
                                                  REPO / "deploy" / "lib" / "edge_conf.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def render_nginx_conf(directory: Path, listen: str, upstreams: list[str]) -> str:
    """deploy/nginx/nginx.conf rendered exactly as deploy/run.sh renders it
    (deploy/lib/edge_conf.py)."""
    return str(_edge_conf().render(str(directory), listen, upstreams,
                                   SHIPPED_NGINX_CONF.read_text()))


class GunicornServer(_PreforkServer):
    """The API as deployed (gunicorn -c deploy/gunicorn.conf.py serve.wsgi:app) on a free port.

    `env` adds SDS_* settings (SDS_DATABASE_URL at least); the access log goes to base_dir.
    Its master serves the workers' Prometheus metrics on `metrics_port` (a free port unless
    SDS_API_METRICS_PORT is given), from files in base_dir/metrics.
    """

    def __init__(self) -> None:
        self._port: int | None = None
        self._proc: subprocess.Popen[bytes] | None = None

    def start(self, env: dict[str, str], base_dir: Path | None = None, *,
              workers: int | None = 2, port: int | None = None) -> GunicornServer:
        """Start and wait until /api/v2/health answers 200; returns self. `workers` None:
        as many as deploy/gunicorn.conf.py starts by default (the shipped count)."""
        base = self._prepare_dir(base_dir, "sds-gunicorn-")
        self._port = port or free_port()
        self.stderr_path = base / "stderr.log"
        self.access_log = base / "access.log"
        self._env = {**os.environ, "SDS_HTTP_BIND": f"127.0.0.1:{self._port}",
                     "SDS_HTTP_WORKERS": str(workers), "SDS_LOG_DIR": str(base),
                     "SDS_DB_POOL_MIN": "1", "SDS_DB_POOL_MAX": "2",
                     "SDS_API_METRICS_PORT": str(free_port()),
                     "PROMETHEUS_MULTIPROC_DIR": str(base / "metrics"), **env}
        if workers is None:
            self._env.pop("SDS_HTTP_WORKERS")
        self.metrics_port = int(self._env["SDS_API_METRICS_PORT"])
        self._launch()
        return self

    def _launch(self) -> None:
        gunicorn = Path(sys.executable).with_name("gunicorn")
        with open(self.stderr_path, "ab") as err:
            self._proc = subprocess.Popen(
                [str(gunicorn), "-c", str(GUNICORN_CONF), "serve.wsgi:app"],
                cwd=REPO, env=self._env, stdin=subprocess.DEVNULL, stdout=err, stderr=err)
        deadline = time.monotonic() + START_TIMEOUT
        while not _http_ok(self.port, "/api/v2/health"):
            if self._proc.poll() is not None or time.monotonic() > deadline:
                self.kill()
                raise ServiceError(f"gunicorn did not answer\n{_tail(self.stderr_path)}")
            time.sleep(0.1)

    def restart(self) -> None:
        """Start again (after kill or stop) with the same port and settings."""
        self.stop()
        self._launch()

    def stop(self) -> None:
        """SIGTERM (graceful: in-flight requests finish) and wait."""
        if self.is_running():
            proc = self._require_proc()
            proc.terminate()
            try:
                proc.wait(timeout=STOP_TIMEOUT)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=STOP_TIMEOUT)



class NginxEdge(_PreforkServer):
    """The shipped edge (deploy/nginx/nginx.conf) on a free port in front of given upstreams,
    in the foreground with its own directory for config, pid, logs and temp files."""

    def __init__(self) -> None:
        self._port: int | None = None
        self._proc: subprocess.Popen[bytes] | None = None

    def start(self, upstreams: list[str], base_dir: Path | None = None, *,
              port: int | None = None) -> NginxEdge:
        """Render the config for `upstreams` ("127.0.0.1:port"), start, wait for the port."""
        base = self._prepare_dir(base_dir, "sds-nginx-")
        self._port = port or free_port()
        (base / "tmp").mkdir(exist_ok=True)
        self.conf_path = base / "nginx.conf"
        self.access_log = base / "access.log"
        self.error_log = base / "error.log"
        self.conf_path.write_text(
            render_nginx_conf(base, f"127.0.0.1:{self._port}", upstreams))
        # The workers run as www-data and write request bodies and big answers under tmp/.
        _ensure_traversable(base, "www-data")
        self._launch()
        return self

    def _launch(self) -> None:
        with open(self.error_log, "ab") as err:
            self._proc = subprocess.Popen(
                ["nginx", "-c", str(self.conf_path), "-e", str(self.error_log)],
                stdin=subprocess.DEVNULL, stdout=err, stderr=err)
        deadline = time.monotonic() + START_TIMEOUT
        while not port_open(self.port):
            if self._proc.poll() is not None or time.monotonic() > deadline:
                self.kill()
                raise ServiceError(f"nginx did not start\n{_tail(self.error_log)}")
            time.sleep(0.05)

    def stop(self) -> None:
        """SIGQUIT: graceful shutdown (stops accepting, finishes in-flight requests), then wait."""
        if self.is_running():
            proc = self._require_proc()
            proc.send_signal(_signal.SIGQUIT)
            try:
                proc.wait(timeout=STOP_TIMEOUT)
            except subprocess.TimeoutExpired:
                self.kill()



def _children(pid: int) -> list[int]:
    """Direct children of `pid` (from /proc), e.g. gunicorn's or nginx's workers."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat_fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(stat_fields[1]) == pid:
            found.append(int(entry.name))
    return found


def _http_ok(port: int, path: str) -> bool:
    """Whether GET path on 127.0.0.1:port answers 200 within a second."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=1)
    try:
        conn.request("GET", path)
        return conn.getresponse().status == 200
    except OSError:
        return False
    finally:
        conn.close()
