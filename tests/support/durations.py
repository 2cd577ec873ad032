"""How long each test module took in a measured run (tests/durations.json), which orders the
modules for the xdist workers: longest first, so the long ones start at once and the short ones
fill in at the end (tests/conftest.py, _order_for_xdist). The figures only order; a stale or
missing one costs some wall time, never a test.

Refresh it from a run's JUnit report: `deploy/test.sh --junitxml=/tmp/run.xml`, then
`.venv/bin/python -m tests.support.durations /tmp/run.xml` (modules the report does not name keep
their figure; modules that no longer exist are dropped).
"""

from __future__ import annotations

import json
import sys
import xml.etree.ElementTree as ET  # nosec B405  our own pytest's report, not outside input
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
FILE = ROOT / "tests" / "durations.json"


def load(path: Path | None = None) -> dict[str, float]:
    """Seconds per module path (tests/x/test_y.py), summed over its tests; {} when absent."""
    try:
        return {str(k): float(v) for k, v in json.loads((path or FILE).read_text()).items()}
    except FileNotFoundError:
        return {}


def from_junit(report: Path) -> dict[str, float]:
    """Seconds per module path in a JUnit report (each testcase's time: setup, call and
    teardown, so a module's fixtures count once, in its first test)."""
    totals: dict[str, float] = {}
    for case in ET.parse(report).iter("testcase"):  # nosec B314  see the import
        module = case.get("classname", "").replace(".", "/")
        # A test inside a class has the class as the last part of its classname.
        while module and not (ROOT / f"{module}.py").is_file():
            module = module.rpartition("/")[0]
        if module:
            path = f"{module}.py"
            totals[path] = totals.get(path, 0.0) + float(case.get("time") or 0.0)
    return totals


def main(argv: list[str]) -> int:
    """Merge the JUnit reports named in argv into tests/durations.json."""
    if not argv:
        print(__doc__.strip().splitlines()[-3], file=sys.stderr)
        return 2
    merged = load()
    for name in argv:
        merged.update(from_junit(Path(name)))
    kept = {k: round(v, 1) for k, v in sorted(merged.items()) if (ROOT / k).is_file()}
    FILE.write_text(json.dumps(kept, indent=1) + "\n")
    print(f"{FILE}: {len(kept)} modules, {sum(kept.values()):.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
