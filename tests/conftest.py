"""Session services and per-test databases.

A real PostgreSQL with TimescaleDB and a real mosquitto are started once per test session on
free loopback ports (testbed/services.py); each test that needs the database gets a fresh
database cloned from a migrated template, so tests never see each other's rows. Setting
TEST_DATABASE_URL points the suite at an existing server instead (a maintenance database the
role may create databases from); an unreachable one stops the run.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest

from shared.config import Settings
from testbed.services import MosquittoBroker, PostgresServer
from tests.support.databases import clone_template, migrate_database, with_dbname
from tests.support.figures import Figures

ROOT = Path(__file__).resolve().parent.parent
TEMPLATE = "sds_template"


class _External:
    """An existing server named by TEST_DATABASE_URL."""

    def __init__(self, url: str) -> None:
        self.url = url

    def dsn(self, dbname: str = "postgres") -> str:
        return with_dbname(self.url, dbname)


@pytest.fixture(scope="session")
def pg_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PostgresServer | _External]:
    """The session's PostgreSQL server (TimescaleDB preloaded)."""
    url = os.environ.get("TEST_DATABASE_URL")
    if url:
        try:
            psycopg.connect(url, connect_timeout=5).close()
        except psycopg.OperationalError as exc:
            pytest.exit(f"TEST_DATABASE_URL is set but unreachable: {exc}", returncode=3)
        yield _External(url)
        return
    server = PostgresServer().start(tmp_path_factory.mktemp("pg"))
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="session")
def template_url(pg_server: PostgresServer | _External) -> str:
    """A template database provisioned as deployed; per-test databases are cloned from it.
    Its URL is the superuser's (only its name is used)."""
    admin = pg_server.dsn("postgres")
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(f"DROP DATABASE IF EXISTS {TEMPLATE} WITH (FORCE)")
        conn.execute(f"CREATE DATABASE {TEMPLATE}")
    url = pg_server.dsn(TEMPLATE)
    # The roles, owner, extensions and migrating role of a deployment (testbed/database.py):
    # every database cloned from here is what deploy/services.sh and deploy/run.sh make.
    migrate_database(url)
    with psycopg.connect(admin, autocommit=True) as conn:
        # TimescaleDB's per-database scheduler worker keeps a session open, and CREATE DATABASE
        # ... TEMPLATE refuses a template in use: close the template to new sessions, end them.
        conn.execute(f"ALTER DATABASE {TEMPLATE} WITH ALLOW_CONNECTIONS false")
        conn.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = %s",
                     (TEMPLATE,))
    return url


@pytest.fixture
def database_url(pg_server: PostgresServer | _External, template_url: str) -> Iterator[str]:
    """A fresh migrated database for one test, as the deployment's login role `sds` (owner,
    no superuser, member of the process roles); dropped afterwards."""
    with clone_template(pg_server.dsn("postgres"), template_url, prefix="t_") as url:
        yield url


@pytest.fixture
def settings(database_url: str) -> Settings:
    """Settings pointing at the test's database (no broker)."""
    return Settings(database_url=database_url, metrics_port=0, aggregate_metrics_port=0)


@pytest.fixture
def conn(database_url: str) -> Iterator[psycopg.Connection]:
    """A connection to the test's database; commit explicitly where other sessions must see it."""
    with psycopg.connect(database_url) as c:
        yield c


@pytest.fixture(scope="session")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[MosquittoBroker]:
    """A mosquitto with the shipped durable settings, anonymous access, for the session."""
    b = MosquittoBroker().start(tmp_path_factory.mktemp("mqtt"), durable=True)
    try:
        yield b
    finally:
        b.stop()


_FIGURES = Figures()


@pytest.fixture(scope="session")
def figures() -> Figures:
    """Record a reliability figure: figures.record(key, value, section=, title=, target=,
    source=); docs/reliability.md is regenerated from them when the session ends."""
    return _FIGURES


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """Write the figures this run measured (only from a run whose tests all passed)."""
    if exitstatus == 0:
        _FIGURES.write()


# The edit-test loop's marker: `deploy/test.sh -m quick` runs the tests that need no service.
# A test is quick when none of its fixtures reaches a server (PostgreSQL, a broker) and its
# module starts no process of its own; derived here at collection, so a new test is sorted
# without anyone remembering a marker. The list of fixtures is the one thing to keep current.
SERVICE_FIXTURES = frozenset({"pg_server", "broker"})
# Modules that start servers or processes themselves (not through the fixtures above).
_PROCESS_WORDS = ("subprocess", "PostgresServer", "MosquittoBroker", "Popen", "RabbitCluster",
                  "apiserver", "browser", "services.", "run_script", "gunicorn", "nginx")


def _starts_processes(module: object) -> bool:
    path = getattr(module, "__file__", None)
    if not path:
        return True
    with open(path, encoding="utf-8") as f:
        text = f.read()
    return any(word in text for word in _PROCESS_WORDS)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Mark `quick` the tests that need no service (see SERVICE_FIXTURES)."""
    verdicts: dict[object, bool] = {}
    for item in items:
        fixtures = set(getattr(item, "fixturenames", ()))
        if fixtures & SERVICE_FIXTURES or item.get_closest_marker("chaos"):
            continue
        module = getattr(item, "module", None)
        if module not in verdicts:
            verdicts[module] = not _starts_processes(module)
        if verdicts[module]:
            item.add_marker(pytest.mark.quick)
