"""Write golden_rollups.json: the rollups of tests/aggregate/scenarios.py as the per-table
implementation computed them (run once, with that implementation, on a scratch database):

    .venv/bin/python -m tests.aggregate.make_golden postgresql://.../some_empty_migrated_db
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import psycopg

from tests.aggregate import scenarios
from tests.support.rollups import run_all

GOLDEN = Path(__file__).with_name("golden_rollups.json")


def main(url: str) -> None:
    """Load the scenarios, roll them up, and write the dump."""
    with psycopg.connect(url) as conn:
        n = scenarios.load(conn)
        run_all(conn)
        data = scenarios.dump(conn)
        conn.rollback()
    GOLDEN.write_text(json.dumps(data, sort_keys=True, separators=(",", ":")) + "\n")
    print(f"{n} readings; rows: " + ", ".join(f"{t} {len(r)}" for t, r in data.items()))


if __name__ == "__main__":
    main(sys.argv[1])
