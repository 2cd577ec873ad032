"""The hot path's share of the cold tier: a `/data/calibrated` JSON page of an organisation
with no cold file, read three ways, alternated so all see the same load (docs/benchmarks.md
"Cold tier"): as shipped (one statement in autocommit that checks the catalogue itself,
queries.Scan.guard); as the cold tier first read it (a REPEATABLE READ snapshot and a
catalogue lookup before the statement); and with no cold read at all (the page as it was
read before the cold tier).

    .venv/bin/python -m bench.cold.hotcost [--runs N] [--database-url URL]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from datetime import UTC, datetime, timedelta
from typing import Any

from bench.cold.__main__ import _rows
from bench.common import scratch_database
from people import accounts
from serve import coldread
from serve.api import data
from shared import coldfiles, db, places
from shared.config import Settings


def _seed(url: str) -> str:
    start = datetime(2025, 7, 1, tzinfo=UTC)
    with db.connect(url) as conn:
        org = accounts.create_org(conn, name="Bench hot")
        user = accounts.create_user(conn, org=org, email="h@hot.example", password="h-pw-123456")
        key = accounts.create_api_key(conn, user=user, scopes=["data:read"])["apikey"]
        places.register_device(conn, org=org, name="P000")
        rows = _rows("P000", None, start, start + timedelta(days=40), 0)
        names = ", ".join(coldfiles.NAMES)
        arrays = ", ".join(f"%s::{c.dtype}[]" for c in coldfiles.COLUMNS)
        conn.execute(f"INSERT INTO calibrated ({names}) SELECT * FROM unnest({arrays})",
                     [list(c) for c in zip(*rows, strict=True)])
        conn.commit()
        conn.execute("ANALYZE calibrated")
        conn.commit()
    return str(key)


def main(argv: list[str] | None = None) -> int:
    """Time pages of 10, 100, 1,000 and 10,000 rows with the cold read on and off."""
    from serve import create_app

    parser = argparse.ArgumentParser(prog="python -m bench.cold.hotcost")
    parser.add_argument("--runs", type=int, default=200)
    parser.add_argument("--database-url")
    args = parser.parse_args(argv)
    load = os.getloadavg()[0]
    shipped = (data._one_snapshot, coldread.attach, data.DataPage._scan)
    modes = ("guarded", "snapshot", "none")

    def unguarded(page: data.DataPage, conn: Any) -> Any:
        page._guard = False
        return shipped[2](page, conn)

    def toggle(mode: str) -> None:
        data._one_snapshot, coldread.attach, data.DataPage._scan = shipped  # type: ignore[method-assign]
        if mode != "guarded":
            data.DataPage._scan = unguarded  # type: ignore[method-assign]
        if mode == "none":
            data._one_snapshot = data._one_statement_each
            coldread.attach = lambda conn, scan, cold_path: scan

    with scratch_database(args.database_url, prefix="bench_hotcost_") as url:
        key = _seed(url)
        app = create_app(Settings(database_url=url, metrics_port=0, aggregate_metrics_port=0,
                                  cursor_secret="bench", api_rate_limit=10**9,
                                  api_user_rate_limit=10**9, api_org_rate_limit=10**9))
        client = app.test_client()
        headers = {"Authorization": f"Apikey {key}"}
        for limit in (10, 100, 1000, 10000):
            page = (f"/api/v2/data/calibrated?device=P000&start_time=2025-07-02T00:00:00Z"
                    f"&end_time=2025-08-08T00:00:00Z&limit={limit}")
            times: dict[str, list[float]] = {m: [] for m in modes}
            bodies: dict[str, bytes] = {}
            runs = max(5, args.runs * 10 // limit) if limit > 100 else args.runs
            for i in range(runs + 2):
                for mode in modes:
                    toggle(mode)
                    t0 = time.perf_counter()
                    got = client.get(page, headers=headers)
                    bodies[mode] = got.get_data()
                    if i >= 2:  # the first two warm the pool and the statement caches
                        times[mode].append((time.perf_counter() - t0) * 1000)
            toggle("guarded")
            assert len(set(bodies.values())) == 1
            ms = {m: statistics.median(times[m]) for m in modes}
            print(f"{limit:>6}-row JSON page, medians of {runs}: shipped {ms['guarded']:.2f} ms, "
                  f"snapshot + lookup {ms['snapshot']:.2f} ms, no cold read {ms['none']:.2f} ms "
                  f"(shipped {(ms['guarded'] / ms['none'] - 1) * 100:+.1f} %, snapshot "
                  f"{(ms['snapshot'] / ms['none'] - 1) * 100:+.1f} %)")
    print(f"load average (1 min): {load:.1f} at the start, {os.getloadavg()[0]:.1f} at the end "
          f"({os.cpu_count()} cores)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
