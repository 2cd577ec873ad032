"""Connections and pools for PostgreSQL via psycopg 3; no queries live here."""

from __future__ import annotations

from typing import Any

import psycopg
from psycopg.rows import dict_row
from psycopg_pool import ConnectionPool

from shared.config import Settings

DictRow = dict[str, Any]


def connect(settings: Settings, *, autocommit: bool = False, **kwargs: Any) -> psycopg.Connection:
    """One connection to the configured database."""
    return psycopg.connect(settings.database_url, autocommit=autocommit, **kwargs)


def make_pool(
    settings: Settings, *, name: str, configure: Any = None, **kwargs: Any
) -> ConnectionPool:
    """A pool opened at once; fails fast when the database is unreachable.

    `name` becomes the connections' application_name, so an operator (or a fault test) can
    find a process's sessions in pg_stat_activity.
    """
    pool = ConnectionPool(
        settings.database_url,
        min_size=settings.db_pool_min,
        max_size=max(settings.db_pool_max, settings.db_pool_min),
        kwargs={"application_name": name, **kwargs},
        configure=configure,
        open=False,
        name=name,
    )
    pool.open(wait=True, timeout=30)
    return pool


__all__ = ["DictRow", "connect", "dict_row", "make_pool"]
