"""House rules that hold across the tree, each a check that fails the run:

- ruff with the rules in pyproject.toml (B, E, F, I, UP, W);
- mypy with the configuration in pyproject.toml (every function annotated, shared/ strict);
- the layering as import-linter contracts in pyproject.toml (shared imports none of the
  processes; ingest, aggregate and serve never import each other; people/ imports only shared/
  and no Flask, ingest, aggregate and alerts never import it, admin/ imports it but never
  serve/, serve.api never imports serve.web; the Python client and the service import nothing
  of each other; no import cycle between sibling modules), each with a negative case;
- importing the operator commands (admin.cli) loads no Flask;
- no block of 10 or more copied lines in production code (pylint's duplicate-code check);
- tests and benchmarks import helpers from tests/support, never from a test module or a
  conftest;
- production code connects only through shared.db.connect, takes advisory locks only
  through shared.locks, and makes a time zone from its name only in shared.timeutil (`zone`,
  cached, BadParameter for unknown names); from there zones travel as zones;
- code and docs cite documents that are in the repository (docs/..., the spec copied to
  docs/spec/), never the project spec beside a checkout.

Each runs alone too, e.g. `.venv/bin/python -m pytest tests/test_lint.py -k mypy`, or the tool
itself from the repository root: `.venv/bin/mypy`, `.venv/bin/lint-imports`,
`.venv/bin/pylint --rcfile pyproject.toml --disable=all --enable=duplicate-code shared ingest
aggregate serve client/sds_client` (docs/architecture.md).
"""

from __future__ import annotations

import ast
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PRODUCTION = ("shared", "people", "ingest", "aggregate", "serve", "alerts", "admin")


def _tool(name: str) -> str:
    found = shutil.which(name, path=str(Path(sys.executable).parent)) or shutil.which(name)
    assert found, f"{name} is part of the test extra (deploy/setup.sh installs it)"
    return found


def _run(*args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    return subprocess.run(list(args), cwd=ROOT, capture_output=True, text=True,
                          timeout=timeout, check=False)


@pytest.mark.usefixtures("processes")
def test_ruff_finds_nothing() -> None:
    run = _run(_tool("ruff"), "check", "--output-format", "concise", *PRODUCTION, "bench",
               "tests", "client", timeout=120)
    assert run.returncode == 0, run.stdout + run.stderr


@pytest.mark.usefixtures("processes")
def test_mypy_finds_nothing() -> None:
    run = _run(_tool("mypy"))  # files and options: [tool.mypy] in pyproject.toml
    assert run.returncode == 0, run.stdout + run.stderr
    assert "Success: no issues found" in run.stdout


@pytest.mark.usefixtures("processes")
def test_layering_contracts_are_kept() -> None:
    run = _run(_tool("lint-imports"), "--no-cache")  # [tool.importlinter] in pyproject.toml
    assert run.returncode == 0, run.stdout + run.stderr
    assert "10 kept, 0 broken" in run.stdout, run.stdout


# ---- the layering contracts can fail ------------------------------------------------------------

# A tree of empty packages named as the service's, checked with pyproject's own contracts: clean,
# all are kept; one import that a contract forbids put in, that contract (and only it) breaks.
_TREE = ("shared", "people", "ingest", "aggregate", "alerts", "admin", "serve", "serve/api",
         "serve/web", "sds_client")


def _contract_tree(root: Path) -> None:
    for package in _TREE:
        (root / package).mkdir(parents=True)
        (root / package / "__init__.py").write_text('"""An empty package."""\n')
    (root / "pyproject.toml").write_text((ROOT / "pyproject.toml").read_text())


def _broken_contracts(root: Path) -> list[str]:
    # COLUMNS: lint-imports wraps long lines at the terminal's width.
    env = {**os.environ, "PYTHONPATH": str(root), "COLUMNS": "300"}
    run = subprocess.run([_tool("lint-imports"), "--no-cache"], cwd=root, capture_output=True,
                         text=True, timeout=120, check=False, env=env)
    return [line.removesuffix(" BROKEN").strip() for line in run.stdout.splitlines()
            if line.endswith(" BROKEN")]


@pytest.mark.usefixtures("processes")
def test_the_contract_tree_keeps_every_contract(tmp_path: Path) -> None:
    _contract_tree(tmp_path)
    assert _broken_contracts(tmp_path) == []


@pytest.mark.parametrize(("module", "line", "contract"), [
    ("shared/x.py", "import people", "shared imports none of the processes"),
    ("people/x.py", "import serve", "people/ imports only shared/, and no Flask"),
    ("people/x.py", "import flask", "people/ imports only shared/, and no Flask"),
    ("ingest/x.py", "import people",
     "ingest, aggregate and alerts never import people/"),
    ("alerts/x.py", "from people import x",
     "ingest, aggregate and alerts never import people/"),
    ("admin/x.py", "import flask",
     "admin/ imports people/, never serve/ nor Flask"),
    ("admin/x.py", "import serve.api",
     "admin/ imports people/, never serve/ nor Flask"),
    ("serve/api/x.py", "from serve.web import y",
     "the API (serve.api) never imports the dashboard (serve.web)"),
])
@pytest.mark.usefixtures("processes")
def test_a_broken_contract_is_found(tmp_path: Path, module: str, line: str,
                                    contract: str) -> None:
    _contract_tree(tmp_path)
    (tmp_path / module).write_text(line + "\n")
    assert _broken_contracts(tmp_path) == [contract]


@pytest.mark.usefixtures("processes")
def test_the_operator_commands_load_no_flask() -> None:
    # `sds config` and every other command: admin/ reaches people/, never serve/ (issue 31).
    probe = ("import admin.cli, sys; loaded = sorted(m for m in sys.modules"
             " if m.split('.')[0] in ('flask', 'serve')); assert not loaded, loaded")
    run = _run(sys.executable, "-c", probe, timeout=60)
    assert run.returncode == 0, run.stdout + run.stderr


@pytest.mark.usefixtures("processes")
def test_no_copied_blocks_in_production_code() -> None:
    # min-similarity-lines and what is ignored: [tool.pylint.similarities] in pyproject.toml.
    run = _run(_tool("pylint"), "--rcfile", "pyproject.toml", "--disable=all",
               "--enable=duplicate-code", "--score=n", *PRODUCTION, "client/sds_client")
    assert run.returncode == 0, (
        "a block of 10+ lines is copied; give it one home (docs/architecture.md)\n"
        + run.stdout + run.stderr)


# ---- tests import helpers from tests/support only ---------------------------------------------


def forbidden_imports(path: Path, source: str) -> list[str]:
    """The imports in `source` (the file at `path`) that reach into a test module or a
    conftest (`tests.<package>.test_*`, `tests.<package>.conftest`); from bench/ and testbed/,
    anything under tests/ (they share the servers of testbed/, not the tests' helpers); from
    testbed/, bench/ too."""
    outside = path.parts[0] in ("bench", "testbed")
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ImportFrom) and node.module:
            names = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
        elif isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        else:
            continue
        for name in names:
            parts = name.split(".")
            if path.parts[0] == "testbed" and parts[0] == "bench":
                found.append(f"{path}:{node.lineno}: {name}")
                break
            if parts[0] != "tests" or len(parts) < 2:
                continue
            into_test = any(p == "conftest" or p.startswith("test_") for p in parts[1:])
            if into_test or outside:
                found.append(f"{path}:{node.lineno}: {name}")
                break
    return found


def test_the_import_rule_can_fail() -> None:
    assert forbidden_imports(Path("tests/chaos/test_x.py"),
                             "from tests.ingest.test_delivery import Run\n")
    assert forbidden_imports(Path("tests/x/test_y.py"), "from tests.access.conftest import W\n")
    assert forbidden_imports(Path("tests/x/test_y.py"), "from tests.serve import test_data\n")
    assert forbidden_imports(Path("bench/x/__main__.py"), "import tests.aggregate.reference\n")
    assert forbidden_imports(Path("bench/x/__main__.py"), "from tests.support import apps\n")
    assert forbidden_imports(Path("testbed/x.py"), "from tests.support import apps\n")
    assert forbidden_imports(Path("testbed/x.py"), "from bench.common import database\n")
    assert not forbidden_imports(Path("bench/x/__main__.py"),
                                 "from testbed.apiserver import GunicornServer\n")
    assert not forbidden_imports(Path("tests/aggregate/test_z.py"),
                                 "from tests.aggregate import reference\n")


@pytest.mark.parametrize("folder", ["tests", "bench", "testbed"])
def test_tests_and_benchmarks_import_no_test_module(folder: str) -> None:
    files = sorted((ROOT / folder).rglob("*.py"))
    assert files
    bad = [hit for f in files
           for hit in forbidden_imports(f.relative_to(ROOT), f.read_text())]
    assert not bad, ("import these from a tests/support module instead (move the helper "
                     "there if it is not yet):\n" + "\n".join(bad))


# ---- fixtures reach a folder one way; readings come from one factory --------------------------


def support_fixtures(root: Path) -> dict[str, set[str]]:
    """module name -> the pytest fixtures it defines, for every tests/support module."""
    found: dict[str, set[str]] = {}
    for f in sorted((root / "tests" / "support").glob("*.py")):
        found[f"tests.support.{f.stem}"] = {
            node.name for node in ast.parse(f.read_text()).body
            if isinstance(node, ast.FunctionDef)
            and any("fixture" in ast.unparse(d) for d in node.decorator_list)}
    return found


IMPORT_FROM_TESTS = re.compile(r"^\s*from (tests\.[\w.]+) import (\([^)]*\)|[^\n]*)", re.M)
ALL_LIST = re.compile(r"^__all__ = \[([^\]]*)\]", re.M)


def fixture_idiom_problems(path: Path, source: str, fixtures: dict[str, set[str]]) -> list[str]:
    """Departures from the one way a fixture of a support module reaches tests: the folder's
    conftest imports it by name and lists it in `__all__`. A star import, a test module that
    imports a fixture, or a conftest that imports one without listing it is a problem. (Read
    with regular expressions, not parsed: this runs over every test file in the quick set.)"""
    listed = ALL_LIST.search(source)
    exported = set(re.findall(r"[\"']([\w]+)[\"']", listed.group(1))) if listed else set()
    found = []
    for m in IMPORT_FROM_TESTS.finditer(source):
        module, names = m.group(1), re.sub(r"#[^\n]*", "", m.group(2)).strip("()\n ")
        where = f"{path}:{source.count(chr(10), 0, m.start()) + 1}"
        for name in (n.split(" as ")[0].strip() for n in names.split(",")):
            if name == "*":
                found.append(f"{where}: star import from {module}")
            elif name in fixtures.get(module, set()):
                if path.name != "conftest.py":
                    found.append(f"{where}: fixture {name} imported by a test module")
                elif name not in exported:
                    found.append(f"{where}: fixture {name} not in __all__")
    return found


def test_fixtures_are_registered_one_way() -> None:
    fixtures = support_fixtures(ROOT)
    bad = [hit for f in sorted((ROOT / "tests").rglob("*.py"))
           for hit in fixture_idiom_problems(f.relative_to(ROOT), f.read_text(), fixtures)]
    assert not bad, ("import a support fixture in the folder's conftest.py, by name, and list "
                     "it in __all__:\n" + "\n".join(bad))


def test_the_fixture_rule_can_fail() -> None:
    fixtures = {"tests.support.chaos": {"own_pg"}}
    conftest, module = Path("tests/x/conftest.py"), Path("tests/x/test_y.py")
    assert fixture_idiom_problems(conftest, "from tests.support.chaos import *\n", fixtures)
    assert fixture_idiom_problems(module, "from tests.support.chaos import own_pg\n", fixtures)
    assert fixture_idiom_problems(conftest, "from tests.support.chaos import own_pg\n", fixtures)
    assert not fixture_idiom_problems(
        conftest, 'from tests.support.chaos import own_pg\n__all__ = ["own_pg"]\n', fixtures)
    assert not fixture_idiom_problems(module, "from tests.support.chaos import slots\n", fixtures)
    assert "own_pg" in support_fixtures(ROOT)["tests.support.chaos"]


# Tests put readings in through tests/support/readings.py; these write the INSERT themselves
# because it is what they test (an isolation schedule; a role's privileges; this rule).
OWN_READING_INSERTS = {"tests/support/readings.py", "tests/aggregate/test_isolation.py",
                       "tests/security/test_rls.py", "tests/test_lint.py"}


def raw_reading_inserts(path: Path, source: str) -> list[str]:
    """Lines of `source` that write readings past the factory (an INSERT into calibrated)."""
    if path.as_posix() in OWN_READING_INSERTS:
        return []
    return [f"{path}:{n}" for n, line in enumerate(source.splitlines(), 1)
            if re.search(r"INSERT\s+INTO\s+calibrated\b", line, re.IGNORECASE)]


def test_tests_seed_readings_through_the_factory() -> None:
    bad = [hit for f in sorted((ROOT / "tests").rglob("*.py"))
           for hit in raw_reading_inserts(f.relative_to(ROOT), f.read_text())]
    assert not bad, ("use tests.support.readings (series, insert_readings):\n"
                     + "\n".join(bad))


def test_the_reading_rule_can_fail() -> None:
    assert raw_reading_inserts(Path("tests/serve/test_x.py"),
                               'c.execute("insert into calibrated (time) values (now())")\n')
    assert not raw_reading_inserts(Path("tests/security/test_rls.py"),
                                   'c.execute("INSERT INTO calibrated (time) VALUES (now())")\n')
    assert not raw_reading_inserts(Path("tests/serve/test_x.py"), "INSERT INTO hourly\n")


# ---- one home for each small rule ---------------------------------------------------------------

ONE_HOME = {
    "psycopg.connect(": "shared/db.py",  # every process connects through shared.db.connect
    "pg_try_advisory_lock(": "shared/locks.py",  # every leader lock is a shared.locks name
    "pg_advisory_lock(": "shared/locks.py",
    "pg_advisory_unlock(": "shared/locks.py",
    "ZoneInfo(": "shared/timeutil.py",  # a zone is made from its name by timeutil.zone only
    "mqtt.Client(": "shared/brokers.py",  # every MQTT client: brokers.new_client
    "start_http_server(": "shared/metrics.py",  # every process's metrics endpoint
    "lower(email)": "people/accounts.py",  # the user-by-email lookup: accounts.user_id
    "len(password) <": "people/credentials.py",  # the password rule: password_problem
    "smtplib.": "shared/mail.py",  # the one SMTP conversation (alerts, one-time links)
    'strftime("%Y-%m-%dT': "shared/timeutil.py",  # every text form of a UTC instant
    'replace("+00:00"': "shared/timeutil.py",
    # Every role rule: people/roles.py (valid roles, managers, teams-only roles, the owner rule).
    '("member", "viewer")': "people/roles.py",
    '"owner", "admin"': "people/roles.py",
    "only an owner of the organisation": "people/roles.py",
    "db.connect(": "",  # see SCOPED_HOME: per package
}
# The same for the deploy scripts and the test servers: the edge's upstream server options.
DEPLOY_HOME = {"max_fails=": "deploy/lib/edge_conf.py"}


# The dashboard's facts that the API owns come from the server (the page's JSON), never typed
# into a script or template: the series palette and the API's largest page.
DASHBOARD_HOME = {"#d62728": "serve/web/charts.py", "10000": "serve/args.py",
                  "10_000": "serve/args.py", "50000": "serve/web/charts.py",
                  "50_000": "serve/web/charts.py"}


def dashboard_home_violations(root: Path) -> list[str]:
    """Where a dashboard fact with one home (DASHBOARD_HOME) is written elsewhere in serve/web."""
    web = root / "serve" / "web"
    files = [f for f in sorted(web.rglob("*")) if f.suffix in (".py", ".js", ".html")
             and "vendor" not in f.parts and "node_modules" not in f.parts]
    return [f"{f.relative_to(root)}: {needle} (belongs in {home})"
            for f in files for needle, home in DASHBOARD_HOME.items()
            if needle in f.read_text() and f.relative_to(root).as_posix() != home]


def test_dashboard_facts_come_from_the_server(tmp_path: Path) -> None:
    bad = dashboard_home_violations(ROOT)
    assert not bad, "\n".join(bad)
    (tmp_path / "serve" / "web" / "static").mkdir(parents=True)
    (tmp_path / "serve" / "web" / "static" / "x.js").write_text(
        'const COLORS = ["#d62728"]; const CAP = 10000; const MAX_ROWS = 50000;\n')
    assert len(dashboard_home_violations(tmp_path)) == 3


def deploy_home_violations(root: Path) -> list[str]:
    """Where a deploy rule with one home (DEPLOY_HOME) is written elsewhere under `root`."""
    files = [*sorted((root / "deploy").rglob("*.sh")), *sorted((root / "deploy").rglob("*.py")),
             *sorted((root / "testbed").rglob("*.py"))]
    return [f"{f.relative_to(root)}: {needle} (belongs in {home})"
            for f in files for needle, home in DEPLOY_HOME.items()
            if needle in f.read_text() and f.relative_to(root).as_posix() != home]


def test_deploy_rules_have_one_home(tmp_path: Path) -> None:
    bad = deploy_home_violations(ROOT)
    assert not bad, "\n".join(bad)
    # Negative case: the server options written again in run.sh are found.
    (tmp_path / "deploy").mkdir()
    (tmp_path / "deploy" / "run.sh").write_text('servers+="server $a max_fails=1;"\n')
    assert len(deploy_home_violations(tmp_path)) == 1
# Rules that hold inside one package: (package, needle) -> the one module there that may have it.
SCOPED_HOME = {
    ("admin", "db.connect("): "admin/context.py",  # every sds command: context.connection
}


def one_home_violations(root: Path, files: list[Path]) -> list[str]:
    """Where a rule with one home is written elsewhere (pure over the files given)."""
    bad = []
    for f in files:
        rel = f.relative_to(root).as_posix()
        text = f.read_text()
        for needle, home in ONE_HOME.items():
            if home and needle in text and rel != home:
                bad.append(f"{rel}: {needle} (belongs in {home})")
        for (package, needle), home in SCOPED_HOME.items():
            if rel.startswith(package + "/") and needle in text and rel != home:
                bad.append(f"{rel}: {needle} (in {package}/ belongs in {home})")
    return bad


def test_each_small_rule_has_one_home() -> None:
    files = [f for package in PRODUCTION for f in sorted((ROOT / package).rglob("*.py"))]
    assert len(files) > 20
    bad = one_home_violations(ROOT, files)
    assert not bad, "\n".join(bad)
    # The benchmarks connect as the service does, through shared.db.connect.
    direct = [f.relative_to(ROOT).as_posix() for f in sorted((ROOT / "bench").rglob("*.py"))
              if "psycopg.connect(" in f.read_text()]
    assert not direct, f"bench connects directly (use shared.db.connect): {direct}"


@pytest.mark.parametrize(("path", "text"), [
    ("serve/x.py", "conn = psycopg.connect(url)"),
    ("ingest/x.py", "client = mqtt.Client(mqtt.CallbackAPIVersion.VERSION2)"),
    ("aggregate/x.py", "start_http_server(port)"),
    ("serve/x.py", "SELECT id FROM users WHERE lower(email) = lower(%s)"),
    ("serve/x.py", "if len(password) < 12:"),
    ("admin/x.py", "with db.connect(settings) as conn:"),
    ("serve/x.py", 'return t.strftime("%Y-%m-%dT%H:%M:%SZ")'),
    ("shared/x.py", "ZoneInfo(name)"),
    ("people/links.py", 'if teams_only and role not in ("member", "viewer"):'),
    ("serve/api/orgs.py", 'raise Forbidden("only an owner of the organisation makes an owner")'),
    ("people/members.py", 'ROLES = ("owner", "admin", "member", "viewer")'),
])
def test_a_reintroduced_copy_is_found(tmp_path: Path, path: str, text: str) -> None:
    target = tmp_path / path
    target.parent.mkdir(parents=True)
    target.write_text(text + "\n")
    assert len(one_home_violations(tmp_path, [target])) == 1


# Citations of documents: code and docs cite files that are in this repository (docs/...), never
# the project spec beside a checkout (`shared/spec/...`) nor a bare "reference-facts".
_CITING = ("shared", "people", "ingest", "aggregate", "serve", "tests", "deploy", "docs", "bench",
           "client")
_SUFFIXES = {".py", ".md", ".sh", ".sql", ".conf", ".yaml", ".js", ".html"}


def citation_problems(text: str) -> list[str]:
    """What is wrong with the document citations in one file's text (pure)."""
    problems = []
    for n, line in enumerate(text.splitlines(), 1):
        if "shared/spec/" in line:
            problems.append(f"{n}: cites shared/spec/ (not in the repository; cite docs/spec/)")
        for found in re.finditer(r"reference-facts(?!\.md|\]\(spec/)", line):
            problems.append(f"{n}: bare reference-facts at column {found.start()} "
                            "(cite docs/spec/reference-facts.md)")
    return problems


def test_citation_problems_finds_what_it_should() -> None:
    assert citation_problems("see shared/spec/interface.md") != []
    assert citation_problems("(reference-facts decision 7)") != []
    assert citation_problems("(docs/spec/reference-facts.md decision 7)") == []
    assert citation_problems("([reference-facts](spec/reference-facts.md) decision 7)") == []


def test_every_cited_document_is_in_the_repository() -> None:
    files = [f for d in _CITING for f in sorted((ROOT / d).rglob("*"))
             if f.suffix in _SUFFIXES and "node_modules" not in f.parts
             and "vendor" not in f.parts and f.parent != ROOT / "docs" / "spec"
             and f != Path(__file__).resolve()]  # this file names the wrong forms
    bad = [f"{f.relative_to(ROOT)}:{p}" for f in files
           for p in citation_problems(f.read_text(errors="replace"))]
    missing = [f"{f.relative_to(ROOT)}: {m}" for f in files
               for m in re.findall(r"docs/[\w./-]+\.md", f.read_text(errors="replace"))
               if not (ROOT / m).exists()]
    assert not bad and not missing, "\n".join(bad + missing)


# The operator room: click commands live in admin/, never in the library or the processes.
def click_importers(root: Path, files: list[Path]) -> list[str]:
    """Modules of `files` outside `root`/admin/ that import click (pure over the files given)."""
    return [f.relative_to(root).as_posix() for f in files
            if f.relative_to(root).parts[0] != "admin"
            and re.search(r"^(import click|from click\b)", f.read_text(), re.M)]


def test_only_the_operator_room_has_click_commands(tmp_path: Path) -> None:
    files = [f for package in PRODUCTION for f in sorted((ROOT / package).rglob("*.py"))]
    assert click_importers(ROOT, files) == []
    # Negative case: a command put back into shared/ is found, one in admin/ is not.
    (tmp_path / "shared").mkdir()
    (tmp_path / "admin").mkdir()
    (tmp_path / "shared" / "cli.py").write_text("import click\n")
    (tmp_path / "admin" / "cli.py").write_text("import click\n")
    assert click_importers(tmp_path, sorted(tmp_path.rglob("*.py"))) == ["shared/cli.py"]


# No module of the service, the test servers or the Python client grows past this: a file that
# does is two concerns waiting to be split (testbed/ and client/ since issue 31).
MAX_LINES = 500
CAPPED = (*PRODUCTION, "testbed", "client")
# Known offenders being split; the list may only shrink (empty since issue 21).
OVER_LIMIT: set[str] = set()


def files_over(root: Path, folders: tuple[str, ...], limit: int = MAX_LINES) -> set[str]:
    """The .py files under `folders` of `root` longer than `limit` lines."""
    files = [f for folder in folders for f in sorted((root / folder).rglob("*.py"))]
    return {f.relative_to(root).as_posix() for f in files
            if len(f.read_text().splitlines()) > limit}


def test_no_file_of_the_service_testbed_or_client_over_500_lines() -> None:
    over = files_over(ROOT, CAPPED)
    assert over <= OVER_LIMIT, f"over {MAX_LINES} lines: {sorted(over - OVER_LIMIT)}"
    assert OVER_LIMIT <= over, (
        f"no longer over the limit, drop from OVER_LIMIT: {OVER_LIMIT - over}")


def test_the_line_cap_covers_every_capped_folder(tmp_path: Path) -> None:
    for folder in CAPPED:
        (tmp_path / folder / "deep").mkdir(parents=True)
        (tmp_path / folder / "deep" / "long.py").write_text("x = 1\n" * (MAX_LINES + 1))
        (tmp_path / folder / "short.py").write_text("x = 1\n" * MAX_LINES)
    assert files_over(tmp_path, CAPPED) == {f"{f}/deep/long.py" for f in CAPPED}
    assert {"testbed", "client", *PRODUCTION} <= set(CAPPED)


# Blueprints (serve/api/*) import no other blueprint, and the dashboard (serve/web/) imports no
# blueprint: what they share is a read model (serve/readmodels.py).
def blueprint_imports(path: Path, source: str) -> list[str]:
    """Imports of `source` (the module at `path`) that reach into a blueprint module."""
    rel = path.as_posix()
    if not (rel.startswith("serve/api/") or rel.startswith("serve/web/")) \
            or rel == "serve/api/__init__.py":
        return []
    found = []
    for node in ast.walk(ast.parse(source)):
        names: list[str] = []
        if isinstance(node, ast.ImportFrom) and node.module:
            names = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
        elif isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        for name in names:
            if name.startswith("serve.api.") and name.count(".") >= 2 \
                    and not rel.startswith(name.replace(".", "/")):
                found.append(f"{rel}:{node.lineno}: {name}")
                break
    return found


def test_no_blueprint_imports_another() -> None:
    files = sorted((ROOT / "serve").rglob("*.py"))
    bad = [hit for f in files
           for hit in blueprint_imports(f.relative_to(ROOT), f.read_text())]
    assert not bad, "move what they share to serve/readmodels.py:\n" + "\n".join(bad)


def test_the_blueprint_rule_can_fail() -> None:
    assert blueprint_imports(Path("serve/api/data.py"), "from serve.api.schemas import t\n")
    assert blueprint_imports(Path("serve/web/views.py"), "from serve.api import locations\n")
    assert not blueprint_imports(Path("serve/api/data.py"), "from serve.readmodels import t\n")
    assert not blueprint_imports(Path("serve/__init__.py"), "from serve.api import data\n")
