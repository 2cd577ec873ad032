"""R20: the dirty-mark race as a PostgreSQL isolationtester spec, with the real claim statement.

The claim-then-recompute order keeps the invariant "rollup equals the raw rows, or a dirty mark
is left for the next run" in every interleaving; the naive recompute-then-clear order (the
negative control) loses a late reading. The output must also equal the reviewed expected file.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import psycopg
import pytest

from aggregate import statements
from tests.support.figures import Figures

HERE = Path(__file__).parent
ISOLATIONTESTER = Path("/usr/lib/postgresql/15/lib/pgxs/src/test/isolation/isolationtester")
ROW = re.compile(r"^\s*(\d+|\s*)\|\s*(\d+)\|\s*(\d+)\s*$")


def _render(database_url: str) -> str:
    with psycopg.connect(database_url) as conn:
        claim = psycopg.ClientCursor(conn).mogrify(
            statements.CLAIM.as_string(conn), {"rollup": "hourly", "limit": 1000})
    return (HERE / "dirty_race.spec.in").read_text().replace("@CLAIM@", claim)


@pytest.mark.skipif(not ISOLATIONTESTER.exists(), reason="postgresql-client-15 not installed")
def test_dirty_mark_race(database_url: str, tmp_path: Path, figures: Figures) -> None:
    spec = tmp_path / "dirty_race.spec"
    spec.write_text(_render(database_url))
    with spec.open() as stdin:
        run = subprocess.run([str(ISOLATIONTESTER), database_url], stdin=stdin,
                             capture_output=True, text=True, timeout=120, check=False)
    assert run.returncode == 0, run.stderr
    out = run.stdout
    checks = []
    for block in out.split("starting permutation:")[1:]:
        steps = block.splitlines()[0].split()
        rows = [ROW.match(line) for line in block.splitlines()]
        (vals,) = [m for m in rows if m]
        rollup_n = int(vals.group(1)) if vals.group(1).strip() else 0
        raw_n, marks = int(vals.group(2)), int(vals.group(3))
        checks.append((steps, rollup_n, raw_n, marks))
    assert len(checks) == 5
    for steps, rollup_n, raw_n, marks in checks[:4]:
        assert rollup_n == raw_n or marks > 0, f"lost update in {steps}"
    # Negative control: the naive order must lose the reading, or this test proves nothing.
    assert checks[4][1:] == (1, 2, 0)
    (tmp_path / "actual.out").write_text(out)
    expected = (HERE / "dirty_race.out").read_text()
    assert out == expected, f"isolationtester output changed; see {tmp_path}/actual.out"
    figures.record("rollup.race_permutations", f"{len(checks) - 1}/4 keep the invariant; "
                   "naive control loses 1 of 2 readings", section="rollup",
                   title="Dirty-mark race (isolationtester permutations)",
                   target="all keep rollup = truth or a mark", source="test_dirty_mark_race")
