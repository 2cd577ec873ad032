"""The hot path's share of the cold tier: a `/data/calibrated` JSON page of an organisation
with no cold file, with the page's snapshot and catalogue lookup (serve.coldread) as shipped,
and with both toggled off (the page as it was read before the cold tier: one statement in
autocommit), alternated so both see the same load (docs/benchmarks.md "Cold tier").

    .venv/bin/python -m bench.cold.hotcost [--runs N] [--database-url URL]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from datetime import UTC, datetime, timedelta

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
    shipped = (data._one_snapshot, coldread.attach)

    def toggle(on: bool) -> None:
        if on:
            data._one_snapshot, coldread.attach = shipped
        else:
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
            times: dict[bool, list[float]] = {True: [], False: []}
            bodies: dict[bool, bytes] = {}
            runs = max(5, args.runs * 10 // limit) if limit > 100 else args.runs
            for i in range(runs + 2):
                for on in (True, False):
                    toggle(on)
                    t0 = time.perf_counter()
                    got = client.get(page, headers=headers)
                    bodies[on] = got.get_data()
                    if i >= 2:  # the first two warm the pool and the statement caches
                        times[on].append((time.perf_counter() - t0) * 1000)
            toggle(True)
            assert bodies[True] == bodies[False]
            on_ms, off_ms = statistics.median(times[True]), statistics.median(times[False])
            print(f"{limit:>6}-row JSON page: {on_ms:7.2f} ms with the cold read, "
                  f"{off_ms:7.2f} ms without ({(on_ms / off_ms - 1) * 100:+.1f} %, "
                  f"{on_ms - off_ms:+.2f} ms; medians of {runs})")
    print(f"load average (1 min): {load:.1f} at the start, {os.getloadavg()[0]:.1f} at the end "
          f"({os.cpu_count()} cores)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
