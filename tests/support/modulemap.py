"""The module map in docs/architecture.md: every production module with the first sentence of
its docstring, generated so the page cannot fall behind the tree.

Regenerate after adding, removing or re-describing a module:
`.venv/bin/python -m tests.support.modulemap` (rewrites the section between the
`module-map:start` and `module-map:end` markers); tests/test_docs.py fails while it is stale.
"""

from __future__ import annotations

import ast
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PAGE = ROOT / "docs" / "architecture.md"
PACKAGES = ("shared", "people", "ingest", "aggregate", "serve", "alerts", "admin")
START, END = "<!-- module-map:start -->", "<!-- module-map:end -->"


def _summary(path: Path) -> str:
    doc = ast.get_docstring(ast.parse(path.read_text())) or ""
    para = " ".join(doc.split("\n\n")[0].split())
    # The first sentence: up to the first ". " or ": " that ends it, whole if short.
    m = re.match(r"(.+?[.!?])(\s|$)", para)
    text = m.group(1) if m else para
    return text.replace("|", "\\|")


def modules() -> list[Path]:
    """Every production module, by package and path."""
    return [p for pkg in PACKAGES for p in sorted((ROOT / pkg).rglob("*.py"))
            if "migrations" not in p.parts]


def render() -> str:
    """The module map as Markdown (one table per package)."""
    out: list[str] = []
    for pkg in PACKAGES:
        out += [f"### {pkg}/", "", "| Module | What it is |", "|---|---|"]
        for p in modules():
            rel = p.relative_to(ROOT).as_posix()
            if rel.split("/")[0] == pkg:
                out.append(f"| `{rel}` | {_summary(p) or '(no docstring)'} |")
        out.append("")
    return "\n".join(out).rstrip("\n")


def current() -> str | None:
    """The map as it stands in the page, None without the markers."""
    m = re.search(re.escape(START) + r"\n(.*?)" + re.escape(END), PAGE.read_text(), re.S)
    return m.group(1).rstrip("\n") if m else None


def main() -> int:
    text = PAGE.read_text()
    if current() is None:
        print(f"{PAGE}: no {START} ... {END} markers", file=sys.stderr)
        return 1
    new = re.sub(re.escape(START) + r"\n.*?" + re.escape(END),
                 lambda _: f"{START}\n{render()}\n{END}", text, flags=re.S)
    PAGE.write_text(new)
    print(f"{PAGE.relative_to(ROOT)}: module map of {len(modules())} modules written")
    return 0


if __name__ == "__main__":
    sys.exit(main())
