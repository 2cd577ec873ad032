"""A real PostgreSQL 15 (+ TimescaleDB) cluster on a free loopback port, for tests.

    pg = PostgresServer().start()               # fsync off: fast; durable=True for crash tests
    pg.create_database("t1"); psycopg.connect(pg.dsn("t1"))
    standby = PostgresServer().start_standby(pg)  # streaming replication, as deploy/standby.sh
    pg.crash(); pg.restart()

Run as root (as CI is), the cluster runs as user postgres, as deploy/services.sh runs it; its
directory, readiness and errors follow testbed.process.
"""

from __future__ import annotations

import shlex
import subprocess
from pathlib import Path

import psycopg
from psycopg import sql

from testbed.process import (
    START_TIMEOUT,
    STOP_TIMEOUT,
    Server,
    ServiceError,
    chown_tree,
    ensure_traversable,
    free_port,
    is_root,
    tail,
)

PG_BIN = Path("/usr/lib/postgresql/15/bin")


class PostgresServer(Server):
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
        chown_tree(base, "postgres")
        ensure_traversable(base, "postgres")
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
        chown_tree(base, "postgres")
        ensure_traversable(base, "postgres")
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
        return ["runuser", "-u", "postgres", "--", *cmd] if is_root() else cmd

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
                f"{what} timed out after {timeout}s\n{tail(self.log_path)}"
            ) from exc
        if result.returncode != 0:
            raise ServiceError(
                f"{what} failed ({result.returncode}): {result.stdout}{result.stderr}\n"
                f"{tail(self.log_path)}"
            )

