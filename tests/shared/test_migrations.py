"""Migrations on an empty database: hypertables, extension, registry equals the database."""

from __future__ import annotations

import psycopg
import pytest

from admin import migrate
from shared.columns import TABLES
from testbed.postgres import PostgresServer


def test_timescaledb_installed_and_reported(conn: psycopg.Connection) -> None:
    version = migrate.timescaledb_version(conn)
    assert version is not None and version.split(".")[0] == "2"


def test_data_tables_are_hypertables(conn: psycopg.Connection) -> None:
    rows = conn.execute(
        "SELECT hypertable_name FROM timescaledb_information.hypertables").fetchall()
    assert {r[0] for r in rows} == set(TABLES)


@pytest.mark.parametrize("name", list(TABLES))
def test_database_columns_equal_registry(conn: psycopg.Connection, name: str) -> None:
    rows = conn.execute(
        "SELECT column_name, data_type FROM information_schema.columns"
        " WHERE table_schema = 'public' AND table_name = %s ORDER BY ordinal_position",
        (name,)).fetchall()
    assert rows == [(c.name, c.dtype) for c in TABLES[name].columns]


def test_every_migration_recorded_and_rerun_is_a_no_op(database_url: str) -> None:
    assert migrate.upgrade(database_url) == []
    with psycopg.connect(database_url) as c:
        versions = [r[0] for r in c.execute(
            "SELECT version FROM schema_migrations ORDER BY version")]
    assert versions == [m.version for m in migrate.available()]


def test_edited_migration_is_refused(database_url: str) -> None:
    with psycopg.connect(database_url, autocommit=True) as c:
        c.execute("UPDATE schema_migrations SET checksum = 'x' WHERE version = 1")
    with pytest.raises(migrate.MigrationError, match="changed after it was applied"):
        migrate.upgrade(database_url)


@pytest.mark.usefixtures("processes")
def test_migrations_apply_on_plain_postgresql(tmp_path_factory: pytest.TempPathFactory) -> None:
    """Without the extension, the schema still applies, with plain tables."""
    # Not preloaded: CREATE EXTENSION fails, as on a managed service that does not offer it.
    server = PostgresServer().start(tmp_path_factory.mktemp("plainpg"), timescaledb=False)
    try:
        url = server.dsn("postgres")
        assert len(migrate.upgrade(url)) == len(migrate.available())
        with psycopg.connect(url) as c:
            assert migrate.timescaledb_version(c) is None
            assert c.execute("SELECT count(*) FROM calibrated").fetchone() == (0,)
            assert c.execute("SELECT to_regclass('daily') IS NOT NULL").fetchone() == (True,)
    finally:
        server.stop()
