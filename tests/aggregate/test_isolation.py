"""The dirty-mark race as a PostgreSQL isolation spec (reliability plan R20), run with Debian's
`isolationtester` over the rollup's own generated SQL.

Sessions: `rollup` (claim marks, recompute, commit), `late` (insert a reading and its mark,
commit) and `check`. Every permutation must end with `rollup == truth OR a mark exists`; the
naive recompute-then-delete variant must break it.
"""

from __future__ import annotations

import re
import subprocess
from datetime import UTC, datetime, timedelta
from pathlib import Path

import psycopg
import pytest

from aggregate import rollups, statements

ISOLATIONTESTER = Path("/usr/lib/postgresql/15/lib/pgxs/src/test/isolation/isolationtester")
T0 = datetime(2024, 7, 1, 10, 0, tzinfo=UTC)


def _literal(conn: psycopg.Connection, query, params: dict) -> str:  # type: ignore[no-untyped-def]
    """The statement with its parameters inlined, without braces (they end a spec block)."""
    text = query.as_string(conn).replace(")b", ")s")  # client-side binding: text parameters
    bound = psycopg.ClientCursor(conn).mogrify(text, params)
    return re.sub(r"'\{(.*?)\}'", lambda m: "string_to_array('{}', ',', 'NULL')".format(
        m.group(1).replace('"', "")), bound)


def _spec(conn: psycopg.Connection) -> str:
    bucket = rollups.Bucket("R1", T0, T0 + timedelta(hours=1))
    load = _literal(conn, statements.load_partials_buckets("hourly"), {
        "device": [bucket.device], "location": [None], "start": [bucket.start],
        "end": [bucket.end]})
    write = _literal(conn, statements.write("hourly", scope="pairs"), {
        "device": [bucket.device], "start": [bucket.start], "lo": None, "hi": None,
        "after": None, "low_quality_pct": 80.0})
    claim = _literal(conn, statements.CLAIM, {"rollup": "hourly", "limit": 100})
    recompute = "; ".join([statements.create_temp().as_string(conn), load, write,
                           statements.CLEAR_TEMP.as_string(conn)])
    mark = ("INSERT INTO rollup_dirty (rollup, device, bucket) VALUES "
            "('hourly', 'R1', '2024-07-01T10:00:00Z') ON CONFLICT DO NOTHING")
    return f"""
setup {{
  DELETE FROM calibrated; DELETE FROM hourly; DELETE FROM rollup_dirty;
  INSERT INTO calibrated (time, device, tair) VALUES ('2024-07-01T10:00:00Z', 'R1', 10);
  {mark};
}}

session rollup
step claim {{ BEGIN; {claim}; }}
step recompute {{ {recompute}; }}
step commit {{ COMMIT; }}
step naive_recompute {{ BEGIN; {recompute}; }}
step naive_delete {{ DELETE FROM rollup_dirty WHERE rollup = 'hourly'; COMMIT; }}

session late
step insert {{
  BEGIN;
  INSERT INTO calibrated (time, device, tair) VALUES ('2024-07-01T10:05:00Z', 'R1', 30);
  {mark};
  COMMIT;
}}

session check
step check {{
  SELECT (SELECT round(sample_pct * 12)::int FROM hourly WHERE device = 'R1') AS rollup_n,
         (SELECT count(*) FROM calibrated WHERE device = 'R1') AS raw_n,
         (SELECT count(*) FROM rollup_dirty WHERE rollup = 'hourly') AS marks;
}}

permutation insert claim recompute commit check
permutation claim insert recompute commit check
permutation claim recompute insert commit check
permutation claim recompute commit insert check
permutation naive_recompute insert naive_delete check
"""


def _results(output: str) -> dict[str, tuple[int, int, int]]:
    found = {}
    for block in output.split("starting permutation: ")[1:]:
        name = block.splitlines()[0].strip()
        m = re.search(r"rollup_n\|raw_n\|marks\n[-+]+\n\s*(\d+)\|\s*(\d+)\|\s*(\d+)", block)
        assert m, block
        found[name] = (int(m.group(1)), int(m.group(2)), int(m.group(3)))
    return found


@pytest.mark.skipif(not ISOLATIONTESTER.exists(),
                    reason="PostgreSQL's isolationtester is not installed")
def test_claim_then_recompute_keeps_the_invariant_in_every_interleaving(
        database_url, tmp_path, figures) -> None:
    with psycopg.connect(database_url) as conn:
        spec = _spec(conn)
    path = tmp_path / "dirty_claim.spec"
    path.write_text(spec)
    with path.open() as stdin:
        done = subprocess.run([str(ISOLATIONTESTER), database_url], stdin=stdin,
                              capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr + done.stdout
    results = _results(done.stdout)
    assert len(results) == 5, done.stdout
    for name, (rollup_n, raw_n, marks) in results.items():
        holds = rollup_n == raw_n or marks > 0
        if name.startswith("naive"):
            assert (rollup_n, raw_n, marks) == (1, 2, 0), "the negative control must lose"
            assert not holds
        else:
            assert holds, (name, rollup_n, raw_n, marks)
    # Where the late insert commits before the claim, the rollup already counts it; where it
    # commits during or after the run, the rollup is stale and a mark remains.
    assert results["insert claim recompute commit check"] == (2, 2, 0)
    assert results["claim insert recompute commit check"] == (1, 2, 1)
    assert results["claim recompute commit insert check"] == (1, 2, 1)
    figures.record("rollup.race_permutations",
                   f"{len(results) - 1}/{len(results) - 1} keep the invariant; the naive control "
                   "loses 1 of 2 readings", section="rollup",
                   title="Dirty-mark race, isolationtester permutations (R20)",
                   target="all keep rollup = truth or a mark left", source="test_isolation.py")
