"""Connections and pools for PostgreSQL via psycopg 3; no queries live here.

Each process works under its own NOLOGIN database role (migration 0050, docs/security.md
"Database roles"): it connects with the configured URL and `SET ROLE`s on connect, so the
grants and row-level security policies of that role bound what its queries can reach.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any
from uuid import UUID

import psycopg
from psycopg import sql
from psycopg.rows import dict_row
from psycopg_pool import ConnectionPool

from shared.config import Settings

DictRow = dict[str, Any]

# The roles of migration 0050, one per kind of work.
ROLE_API = "sds_api"  # API views: one organisation's rows, chosen by app.org_id
ROLE_AUTH = "sds_auth"  # API credential checks, before the organisation is known
ROLE_INGEST = "sds_ingest"  # the MQTT ingester
ROLE_AGGREGATE = "sds_aggregate"  # the rollup scheduler
ROLE_ALERTS = "sds_alerts"  # the alert evaluator (migration 0101)
ROLES = (ROLE_API, ROLE_AUTH, ROLE_INGEST, ROLE_AGGREGATE, ROLE_ALERTS)


def role_for(settings: Settings, role: str | None) -> str | None:
    """`role` unless the settings turn database roles off (SDS_DB_ROLES=false)."""
    return role if role and settings.db_roles else None


def set_role(conn: psycopg.Connection, role: str) -> None:
    """Make `role` the session's current role (the connection is left idle)."""
    conn.execute(sql.SQL("SET ROLE {}").format(sql.Identifier(role)))
    if not conn.autocommit:
        conn.commit()  # a session-level SET survives the commit; the connection must be idle


def set_request_scope(conn: psycopg.Connection, role: str | None, org: UUID | None,
                      user: UUID | None = None, teams_only: bool = False) -> None:
    """Switch an idle connection to `role` (None: keep the current one), the request's
    organisation (None: none, so tenant policies match no row), its user (`app.user_id`, ''
    for none) and whether that user sees only their teams (`app.teams_only`: 'on' or ''), in
    one round trip.

    Session-level settings, committed at once: a view's own transaction then starts with its
    first statement, as before (e.g. SET TRANSACTION ... READ ONLY must come first).
    """
    values = (str(org) if org is not None else "", str(user) if user is not None else "",
              "on" if teams_only else "")
    was = conn.autocommit
    conn.autocommit = True
    try:
        if role is None:
            conn.execute("SELECT set_config('app.org_id', %s, false),"
                         " set_config('app.user_id', %s, false),"
                         " set_config('app.teams_only', %s, false)", values)
        else:
            conn.execute("SELECT set_config('role', %s, false),"
                         " set_config('app.org_id', %s, false),"
                         " set_config('app.user_id', %s, false),"
                         " set_config('app.teams_only', %s, false)", (role, *values))
    finally:
        conn.autocommit = was


# TCP keepalive probing for long-lived sessions: a silently dead network path turns into an
# error after about idle + probes x interval seconds instead of the kernel's two hours.
KEEPALIVE_IDLE = 10
KEEPALIVE_INTERVAL = 5


def session_options(settings: Mapping[str, object]) -> str:
    """libpq `options` setting server parameters for the session: `-c name=value ...`."""
    return " ".join(f"-c {name}={value}" for name, value in settings.items())


def connect(target: Settings | str, *, name: str | None = None, autocommit: bool = False,
            role: str | None = None, server: Mapping[str, object] | None = None,
            keepalive_probes: int | None = None, **kwargs: Any) -> psycopg.Connection:
    """One connection to the configured database (`target`: the settings, or a conninfo URL):
    the one way every process and command opens a connection outside a pool.

    `name` becomes application_name (operators and fault tests find sessions by it);
    `role`: SET ROLE on connect (with settings: unless SDS_DB_ROLES is off); `server`: server
    parameters for the session (statement_timeout, ...); `keepalive_probes`: TCP keepalives
    on (idle 10 s, every 5 s, this many probes). Other keywords go to psycopg.connect.
    """
    url = target.database_url if isinstance(target, Settings) else target
    if name is not None:
        kwargs["application_name"] = name
    if server:
        kwargs["options"] = session_options(server)
    if keepalive_probes is not None:
        kwargs.update(keepalives=1, keepalives_idle=KEEPALIVE_IDLE,
                      keepalives_interval=KEEPALIVE_INTERVAL, keepalives_count=keepalive_probes)
    conn = psycopg.connect(url, autocommit=autocommit, **kwargs)
    wanted = role_for(target, role) if isinstance(target, Settings) else role
    if wanted:
        try:
            set_role(conn, wanted)
        except BaseException:
            conn.close()
            raise
    return conn


class _CheckoutPool(ConnectionPool):
    """A pool that runs a callback on every connection it hands out."""

    def __init__(self, *args: Any, checkout: Callable[[psycopg.Connection], None],
                 **kwargs: Any) -> None:
        self._checkout = checkout
        super().__init__(*args, **kwargs)

    def getconn(self, timeout: float | None = None) -> psycopg.Connection:
        """A connection from the pool, prepared by the checkout callback.

        The callback's statement is the connection's first use, so it finds a connection whose
        server went away (a restart, a promoted standby): that one is discarded and the next
        tried, up to the pool's size, so a request does not fail for each stale connection."""
        for attempt in range(self.max_size + 1):
            conn = super().getconn(timeout=timeout)
            try:
                self._checkout(conn)
            except psycopg.OperationalError:
                self.putconn(conn)  # a broken connection is closed and replaced by the pool
                if conn.broken and attempt < self.max_size:
                    continue
                raise
            except BaseException:
                self.putconn(conn)
                raise
            return conn
        raise AssertionError("unreachable: the last attempt returns or raises")


def make_pool(
    settings: Settings, *, name: str, configure: Any = None, role: str | None = None,
    checkout: Callable[[psycopg.Connection], None] | None = None, url: str | None = None,
    wait: bool = True, check: Callable[[psycopg.Connection], None] | None = None, **kwargs: Any
) -> ConnectionPool:
    """A pool opened at once; fails fast when the database is unreachable.

    `url` overrides SDS_DATABASE_URL (the API's standby pool). `wait=False` opens without
    waiting for the first connection (a server that may be down does not stop the process);
    `check` runs on each connection before it is handed out (psycopg_pool's check).

    `name` becomes the connections' application_name, so an operator (or a fault test) can
    find a process's sessions in pg_stat_activity. `role`: every new connection `SET ROLE`s to
    it (unless SDS_DB_ROLES is off). `checkout(conn)` runs on each connection handed out
    (the API sets the request's role and organisation there).
    """
    wanted = role_for(settings, role)

    def prepare(conn: psycopg.Connection) -> None:
        if wanted:
            set_role(conn, wanted)
        if configure is not None:
            configure(conn)

    extra: dict[str, Any] = {}
    pool_class: type[ConnectionPool] = ConnectionPool
    if checkout is not None:
        pool_class, extra = _CheckoutPool, {"checkout": checkout}
    if check is not None:
        extra["check"] = check
    pool = pool_class(
        url or settings.database_url,
        min_size=settings.db_pool_min,
        max_size=max(settings.db_pool_max, settings.db_pool_min),
        kwargs={"application_name": name, **kwargs},
        configure=prepare,
        open=False,
        name=name,
        **extra,
    )
    pool.open(wait=wait, timeout=30)
    return pool


def close_quietly(conn: psycopg.Connection | None) -> None:
    """Close a connection that may already be broken; the caller is discarding it anyway."""
    if conn is not None:
        try:
            conn.close()
        except psycopg.Error:
            pass


__all__ = ["ROLES", "ROLE_AGGREGATE", "ROLE_ALERTS", "ROLE_API", "ROLE_AUTH", "ROLE_INGEST",
           "DictRow", "close_quietly", "connect", "dict_row", "make_pool", "role_for",
           "session_options", "set_request_scope", "set_role"]
