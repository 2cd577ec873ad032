"""Undo without loss: copy back what a mistake removed from a copy of the database restored
beside the live one at a moment T before the mistake (`sds restore --beside`), into the live
database, without touching what is there (docs/operations.md "Undo beside the live service").

Rows of the named tables that the copy has and the live database lacks are inserted with
`ON CONFLICT DO NOTHING`: a row still there, or changed since T, keeps its live value, and
what arrived after T stays. Tables go parents first (foreign keys), so an organisation's
rows can come back with the rows under it. Only tables with a primary key or unique index are
copied: without one "missing" cannot be told from "there".
"""

from __future__ import annotations

import graphlib
from collections.abc import Sequence
from dataclasses import dataclass

import psycopg
from psycopg import sql

# Never copied back: the migrations' ledger and the recovery kit belong to the live database.
NEVER = frozenset({"schema_migrations", "recovery_files"})


class UndoError(ValueError):
    """A table that cannot be copied back (unknown, no key, never)."""


@dataclass(frozen=True, slots=True)
class Copied:
    """One table's result: rows the copy held (under the condition) and rows inserted."""

    table: str
    found: int
    inserted: int


def ordered(conn: psycopg.Connection, tables: Sequence[str]) -> list[str]:
    """`tables` (of schema public), parents before the tables whose foreign keys name them."""
    known = {r[0] for r in conn.execute(
        "SELECT c.relname FROM pg_class c WHERE c.relnamespace = 'public'::regnamespace "
        "AND c.relkind IN ('r', 'p')")}
    for name in tables:
        if name in NEVER:
            raise UndoError(f"{name} is never copied back (it belongs to the live database)")
        if name not in known:
            raise UndoError(f"no table {name!r} in schema public")
    graph: dict[str, set[str]] = {name: set() for name in tables}
    for child, parent in conn.execute(
            "SELECT conrelid::regclass::text, confrelid::regclass::text FROM pg_constraint "
            "WHERE contype = 'f' AND connamespace = 'public'::regnamespace"):
        if child in graph and parent in graph and child != parent:
            graph[child].add(parent)
    return list(graphlib.TopologicalSorter(graph).static_order())


def _columns(conn: psycopg.Connection, table: str) -> list[str]:
    return [r[0] for r in conn.execute(
        "SELECT attname FROM pg_attribute WHERE attrelid = %s::regclass AND attnum > 0 "
        "AND NOT attisdropped AND attgenerated = '' ORDER BY attnum", (table,))]


def _has_key(conn: psycopg.Connection, table: str) -> bool:
    row = conn.execute("SELECT EXISTS (SELECT 1 FROM pg_index WHERE indrelid = %s::regclass "
                       "AND indisunique)", (table,)).fetchone()
    return bool(row and row[0])


def copy_back(source: psycopg.Connection, live: psycopg.Connection, tables: Sequence[str],
              where: str | None = None) -> list[Copied]:
    """Insert into `live` the rows of `tables` that `source` (the copy at T) has and `live`
    lacks, optionally only those matching the SQL condition `where` (the operator's own, as
    in their psql); in `live`'s transaction, which the caller commits."""
    results = []
    for table in ordered(live, tables):
        if not _has_key(live, table):
            raise UndoError(f"{table} has no primary key or unique index: rows missing from it "
                            "cannot be told from rows there")
        cols = _columns(live, table)
        col_list = sql.SQL(", ").join(sql.Identifier(c) for c in cols)
        select = sql.SQL("SELECT {} FROM {}").format(col_list, sql.Identifier(table))
        if where:
            select += sql.SQL(" WHERE ") + sql.SQL(where)  # the operator's own condition
        scratch = sql.Identifier(f"undo_{table}")
        live.execute(sql.SQL("CREATE TEMP TABLE {} (LIKE {}) ON COMMIT DROP").format(
            scratch, sql.Identifier(table)))
        found = 0
        with source.cursor().copy(sql.SQL("COPY ({}) TO STDOUT").format(select)) as out, \
                live.cursor().copy(sql.SQL("COPY {} ({}) FROM STDIN").format(
                    scratch, col_list)) as into:
            for chunk in out:
                into.write(chunk)
        found_row = live.execute(sql.SQL("SELECT count(*) FROM {}").format(scratch)).fetchone()
        found = int(found_row[0]) if found_row else 0
        inserted = live.execute(sql.SQL(
            "INSERT INTO {} ({}) OVERRIDING SYSTEM VALUE SELECT {} FROM {} ON CONFLICT DO NOTHING"
        ).format(sql.Identifier(table), col_list, col_list, scratch)).rowcount
        results.append(Copied(table, found, inserted))
    return results
