"""docs/architecture.md stays true to the tree (issue 31) where a check is possible: every file
or directory path it names exists, every dotted name it gives in backticks (`people.links.accept`)
is a module of the repository and, past the module, a name that module defines, and the
processes its first paragraph lists are the ones deploy/run.sh starts, counted in words. Each
check has a negative case."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "architecture.md"
RUN = ROOT / "deploy" / "run.sh"
TOP = ("shared", "people", "ingest", "aggregate", "serve", "alerts", "admin", "testbed",
       "tests", "deploy", "bench", "client", "docs")
PACKAGES = ("shared", "people", "ingest", "aggregate", "serve", "alerts", "admin", "testbed")
NUMBERS = {"three": 3, "four": 4, "five": 5, "six": 6, "seven": 7}
_PATH = re.compile(rf"(?<![\w/.-])((?:{'|'.join(TOP)})/[A-Za-z0-9_./*-]*[A-Za-z0-9_*/])")
_DOTTED = re.compile(rf"`((?:{'|'.join(PACKAGES)})(?:\.[A-Za-z_][A-Za-z0-9_]*)+)")


def missing_paths(text: str, root: Path = ROOT) -> list[str]:
    """Paths named in `text` (globs allowed) that match nothing under `root`."""
    named = sorted({m.group(1).rstrip(".") for m in _PATH.finditer(text)})
    return [p for p in named if not (any(root.glob(p)) if "*" in p else (root / p).exists())]


def _defines(source: str, name: str) -> bool:
    return re.search(rf"^(?:\s*(?:async\s+)?def|\s*class)\s+{name}\b|^{name}\b\s*[:=]|"
                     rf"^\s+self\.{name}\b|^\s+def {name}\b|^\s*{name}\s*=|import .*\b{name}\b",
                     source, re.M) is not None


def unknown_names(text: str, root: Path = ROOT) -> list[str]:
    """Dotted names in backticks in `text` that are not a module of the tree, or a name that
    module defines."""
    wrong = []
    for dotted in sorted({m.group(1) for m in _DOTTED.finditer(text)}):
        parts = dotted.split(".")
        for k in range(len(parts), 0, -1):
            base = root.joinpath(*parts[:k])
            module = base.with_suffix(".py") if base.with_suffix(".py").exists() else (
                base / "__init__.py")
            if module.exists():
                rest = parts[k:]
                if rest and not _defines(module.read_text(), rest[0]):
                    wrong.append(dotted)
                break
        else:
            wrong.append(dotted)
    return wrong


def run_processes(script: str) -> set[str]:
    """The service's programs in run.sh's `proc_argv`: `python -m X` modules and gunicorn's
    `X:app` applications."""
    body = script[script.index("proc_argv() {"):]
    body = body[:body.index("\n}\n")]
    return set(re.findall(r"/python\" -m ([\w.]+)\)", body)) | set(
        re.findall(r" ([\w.]+):app\)", body))


def doc_processes(text: str) -> tuple[int | None, set[str]]:
    """The count in words and the programs (`python -m X`, `gunicorn X:app`) of the page's
    first paragraph."""
    first = text.split("\n\n")[1]
    count = re.match(r"(\w+) processes", first)
    named = set(re.findall(r"`python -m ([\w.]+)`", first)) | set(
        re.findall(r"`gunicorn ([\w.]+):app`", first))
    return (NUMBERS.get(count.group(1).lower()) if count else None), named


def test_every_path_the_page_names_exists() -> None:
    assert missing_paths(DOC.read_text()) == []


def test_every_dotted_name_the_page_gives_is_in_the_tree() -> None:
    assert unknown_names(DOC.read_text()) == []


def test_the_process_list_is_run_shs() -> None:
    started = run_processes(RUN.read_text())
    assert started >= {"ingest", "aggregate", "alerts.evaluator", "alerts.delivery",
                       "serve.wsgi"}, started
    count, named = doc_processes(DOC.read_text())
    assert named == started
    assert count == len(started)


def test_the_checks_can_fail() -> None:
    assert missing_paths("see `serve/access.py` and serve/api/*.py") == ["serve/access.py"]
    assert unknown_names("`serve.access` and `people.links.no_such_rule` and "
                         "`people.links.accept`") == ["people.links.no_such_rule",
                                                      "serve.access"]
    text = DOC.read_text().replace("Five processes", "Four processes", 1)
    assert doc_processes(text)[0] == 4 != len(run_processes(RUN.read_text()))
    script = RUN.read_text().replace('alerts-deliver) ARGV=("$VENV/bin/python" -m '
                                     'alerts.delivery) ;;', "")
    assert "alerts.delivery" not in run_processes(script)
