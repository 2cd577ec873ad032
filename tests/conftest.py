"""Session services and per-test databases.

A real PostgreSQL with TimescaleDB and a real mosquitto are started once per test session on
free loopback ports (testbed/postgres.py, testbed/mosquitto.py); each test that needs the
database gets a fresh database cloned from a migrated template, so tests never see each
other's rows. Setting TEST_DATABASE_URL points the suite at an existing server instead (a
maintenance database the role may create databases from); an unreachable one stops the run.
"""

from __future__ import annotations

import json
import multiprocessing.util
import os
import subprocess
from collections.abc import Generator, Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any, NoReturn

import psycopg
import pytest

from shared.config import Settings
from testbed.mosquitto import MosquittoBroker
from testbed.postgres import PostgresServer
from tests.support import durations
from tests.support.databases import clone_template, migrate_database, with_dbname
from tests.support.figures import Figures
from tests.support.ports import deployed_ports, held

ROOT = Path(__file__).resolve().parent.parent
# One per xdist worker (gw0, gw1, ...): workers on one TEST_DATABASE_URL server migrate their own.
TEMPLATE = "sds_template" + os.environ.get("PYTEST_XDIST_WORKER", "")


class _External:
    """An existing server named by TEST_DATABASE_URL."""

    def __init__(self, url: str) -> None:
        self.url = url

    def dsn(self, dbname: str = "postgres") -> str:
        return with_dbname(self.url, dbname)


@pytest.fixture(scope="session")
def pg_server() -> Iterator[PostgresServer | _External]:
    """The session's PostgreSQL server (TimescaleDB preloaded)."""
    url = os.environ.get("TEST_DATABASE_URL")
    if url:
        try:
            psycopg.connect(url, connect_timeout=5).close()
        except psycopg.OperationalError as exc:
            pytest.exit(f"TEST_DATABASE_URL is set but unreachable: {exc}", returncode=3)
        yield _External(url)
        return
    # In a directory of its own under /tmp, not under pytest's basetemp: each pytest run that
    # starts on the machine resets /tmp/pytest-of-<user> to mode 0700, and the server, running
    # as user postgres, then loses its data directory mid-session (PANIC: pg_control:
    # Permission denied; seen with two runs at once).
    server = PostgresServer().start()
    try:
        yield server
    finally:
        server.cleanup()


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
    # No metrics endpoints: a process started on these settings opens no port of the deployed
    # stack's (9108-9112), which may be running beside the tests.
    return Settings(database_url=database_url, metrics_port=0, aggregate_metrics_port=0,
                    alerts_metrics_port=0, api_metrics_port=0)


@pytest.fixture
def conn(database_url: str) -> Iterator[psycopg.Connection]:
    """A connection to the test's database; commit explicitly where other sessions must see it."""
    with psycopg.connect(database_url) as c:
        yield c


@pytest.fixture(scope="session")
def broker() -> Iterator[MosquittoBroker]:
    """A mosquitto with the shipped durable settings, anonymous access, for the session."""
    b = MosquittoBroker().start(durable=True)  # under /tmp, as the PostgreSQL above
    try:
        yield b
    finally:
        b.cleanup()


_HELD_PORTS = ExitStack()


def pytest_configure(config: pytest.Config) -> None:
    """Hold the deployed stack's ports for the run (tests/support/ports.py). Every process
    tries (the xdist controller first, then each worker takes what is still free): a port that
    another run on the machine held when this one started may be let go later."""
    _HELD_PORTS.enter_context(held(deployed_ports()))


def pytest_unconfigure(config: pytest.Config) -> None:
    """Let the deployed stack's ports go."""
    _HELD_PORTS.close()


_FIGURES = Figures()
_FIGURES_KEY = "sds_figures"  # where an xdist worker leaves its figures for the controller


@pytest.fixture(scope="session")
def figures() -> Figures:
    """Record a reliability figure: figures.record(key, value, section=, title=, target=,
    source=); docs/reliability.md is regenerated from them when the session ends."""
    return _FIGURES


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """Write the figures this run measured (only from a run whose tests all passed). An xdist
    worker hands its figures to the controller instead (pytest_testnodedown below), so the
    documents are written once, by the controller, from every worker's figures."""
    workeroutput = getattr(session.config, "workeroutput", None)
    if workeroutput is not None:
        # Through execnet, which carries plain types only: JSON, as write() stores them anyway.
        workeroutput[_FIGURES_KEY] = json.dumps(_FIGURES.export(), default=str)
    elif exitstatus == 0:
        _FIGURES.write()


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_auto_num_workers(config: pytest.Config) -> int:
    """`-n auto` (deploy/test.sh): SDS_TEST_WORKERS, by default twice the cores, as most tests
    wait on servers more than they compute; none for `-m quick`, where starting and collecting
    in each worker would cost more than the whole selection takes in one process."""
    if config.option.markexpr == "quick":
        return 0
    return int(os.environ.get("SDS_TEST_WORKERS") or 2 * (os.cpu_count() or 1))


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node: Any, error: object) -> None:
    """xdist controller: take in the figures of a worker that finished."""
    exported = getattr(node, "workeroutput", {}).get(_FIGURES_KEY)
    if exported:
        _FIGURES.absorb(json.loads(exported))


@pytest.fixture(scope="session")
def processes() -> None:
    """Declares that a test (or a fixture) starts processes of its own: request it from such a
    fixture, or `pytestmark = pytest.mark.usefixtures("processes")` in such a module. It keeps
    the test out of `-m quick`; it starts nothing itself."""


# The edit-test loop's marker: `deploy/test.sh -m quick` runs the tests that need no service.
# A test is quick when none of its fixtures, direct or indirect, is a service fixture: one that
# reaches a server (PostgreSQL, a broker) or declares that it starts processes (`processes`).
# Derived here at collection from the fixtures alone, so a new test is sorted without anyone
# remembering a marker; and a quick test that starts a process anyway fails (_no_processes).
SERVICE_FIXTURES = frozenset({"pg_server", "broker", "processes"})


def _is_quick(item: pytest.Item) -> bool:
    fixtures = set(getattr(item, "fixturenames", ()))
    return not (fixtures & SERVICE_FIXTURES or item.get_closest_marker("chaos"))


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Mark `quick` the tests that need no service (see SERVICE_FIXTURES); under xdist, also
    order the modules for the workers (_order_for_xdist)."""
    for item in items:
        if _is_quick(item):
            item.add_marker(pytest.mark.quick)
    if hasattr(config, "workerinput"):
        _order_for_xdist(items)


# Under pytest-xdist (deploy/test.sh runs `-n` workers with `--dist loadfile
# --no-loadscope-reorder`) a worker runs whole modules, handed out in collection order: a
# module's module-scoped database, seeded world and servers are made once, on one worker.
# (Not loadgroup with xdist_group marks: xdist 3.8 groups by rewriting item._nodeid, which
# pytest 9 no longer reads, so nothing was grouped.) The longest modules come first, by the
# seconds a measured run took (tests/durations.json, tests/support/durations.py): they start at
# once instead of becoming the tail of the run, and the short ones fill in wherever a worker is
# free at the end. A module the file does not know yet is guessed from its kind: one with chaos
# scenarios as long (they run minutes), one that needs a service as short, a quick one as
# shortest.
UNMEASURED_S = {"chaos": 120.0, "service": 5.0, "quick": 0.0}


def _order_for_xdist(items: list[pytest.Item]) -> None:
    modules: dict[str, list[pytest.Item]] = {}
    for item in items:
        modules.setdefault(item.nodeid.split("::", 1)[0], []).append(item)
    measured = durations.load()

    def seconds(path: str) -> float:
        if path in measured:
            return measured[path]
        module = modules[path]
        if any(i.get_closest_marker("chaos") for i in module):
            return UNMEASURED_S["chaos"]
        quick = all(i.get_closest_marker("quick") for i in module)
        return UNMEASURED_S["quick" if quick else "service"]

    ordered = sorted(modules, key=lambda path: -seconds(path))  # stable: ties keep their order
    items[:] = [item for path in ordered for item in modules[path]]


_SPAWNERS = (
    (subprocess.Popen, "_execute_child"),
    (os, "fork"),
    (os, "posix_spawn"),
    (os, "posix_spawnp"),
    (multiprocessing.util, "spawnv_passfds"),
)


@contextmanager
def _no_processes(nodeid: str) -> Iterator[None]:
    """Make every way of starting a process raise, for a test marked quick: the marker is
    derived from fixtures, so a quick test that starts one must say so (`processes`)."""

    def refuse(*args: object, **kwargs: object) -> NoReturn:
        raise RuntimeError(f"{nodeid} is selected by -m quick (no service fixture) but starts a "
                           "process: declare it with the `processes` fixture (tests/conftest.py)")

    saved = [(owner, name, getattr(owner, name)) for owner, name in _SPAWNERS]
    for owner, name, _ in saved:
        setattr(owner, name, refuse)
    try:
        yield
    finally:
        for owner, name, original in saved:
            setattr(owner, name, original)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_setup(item: pytest.Item) -> Generator[None, None, None]:
    """Set up a quick test's fixtures with process starts refused (see _no_processes)."""
    yield from _refusing_processes(item)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Generator[None, None, None]:
    """Run a quick test with process starts refused (see _no_processes)."""
    yield from _refusing_processes(item)


def _refusing_processes(item: pytest.Item) -> Generator[None, None, None]:
    # Not in teardown: the last test of a worker also finalizes the session's servers there.
    if item.get_closest_marker("quick") is None:
        return (yield)
    with _no_processes(item.nodeid):
        return (yield)
