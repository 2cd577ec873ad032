"""Benchmark: aggregated `/data/calibrated` pages (`interval`, `points`) over cold months against
the same pages hot (docs/benchmarks.md "Cold tier: aggregated pages").

    .venv/bin/python -m bench.coldagg [--devices N] [--runs N] [--database-url URL]

N devices (default 10) of one organisation at one location get two months of the simulator's
readings (bench.cold's) in `calibrated` of a scratch database; the app in process (Flask test
client) answers each page below `--runs` times (median), the mover moves both months cold, and
the same pages are timed again. The answers must be byte-identical; the ratio cold/hot is
printed. No stored rollups exist, so `1h` and `1d` buckets are computed from the readings
(counted against `hourly`/`daily` first, as a page reads them).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from datetime import UTC, datetime
from pathlib import Path

from aggregate import coldmove
from bench.cold.__main__ import _rows
from bench.common import median_get, scratch_database
from people import accounts
from shared import coldfiles, db, places
from shared.config import Settings

START, END = datetime(2025, 7, 1, tzinfo=UTC), datetime(2025, 9, 1, tzinfo=UTC)
WINDOW = "start_time=2025-07-01T00:00:00Z&end_time=2025-08-31T23:59:59Z"


def _pages(location: str) -> dict[str, str]:
    base = "/api/v2/data/calibrated?"
    return {
        "one device, 1h, every column (1,488 buckets)": f"{base}device=S000&{WINDOW}&interval=1h",
        "one device, 15m, tair (5,952 buckets)":
            f"{base}device=S000&{WINDOW}&interval=15m&select=time,tair&limit=10000",
        "one device, 1d local, every column (62 buckets)":
            f"{base}device=S000&{WINDOW}&interval=1d",
        "location, points=100 (12h), every column":
            f"{base}location={location}&{WINDOW}&points=100",
    }


def run(url: str, devices: int, runs: int, work: Path) -> list[tuple[str, float, float]]:
    """(page, hot ms, cold ms) of each page."""
    from serve import create_app

    with db.connect(url) as conn:
        org = accounts.create_org(conn, name="Bench coldagg")
        loc = places.create_location(conn, org=org, loc=places.LocationInput(
            name="L", tz_name="Europe/Berlin"))
        user = accounts.create_user(conn, org=org, email="b@coldagg.example",
                                    password="b-pw-123456")
        key = accounts.create_api_key(conn, user=user, scopes=["data:read"])["apikey"]
        names = ", ".join(coldfiles.NAMES)
        arrays = ", ".join(f"%s::{c.dtype}[]" for c in coldfiles.COLUMNS)
        for i in range(devices):
            places.register_device(conn, org=org, name=f"S{i:03d}")
            columns = [list(c) for c in zip(*_rows(f"S{i:03d}", str(loc), START, END, i),
                                            strict=True)]
            conn.execute(f"INSERT INTO calibrated ({names}) SELECT * FROM unnest({arrays})",
                         columns)
        conn.commit()
        conn.execute("ANALYZE calibrated")
        conn.commit()
    app = create_app(Settings(database_url=url, metrics_port=0, aggregate_metrics_port=0,
                              cursor_secret="bench", cold_path=str(work / "cold"),
                              api_rate_limit=10**9, api_user_rate_limit=10**9,
                              api_org_rate_limit=10**9, api_heavy_slots=0))
    client = app.test_client()
    headers = {"Authorization": f"Apikey {key}"}
    pages = _pages(str(loc))
    hot = {}
    for name, page in pages.items():
        median_get(client, page, headers, 1)
        hot[name] = median_get(client, page, headers, runs)
    with db.connect(url, autocommit=True) as conn:
        moved = coldmove.move(conn, hot_days=1, cold_path=str(work / "cold"),
                              now=datetime(2025, 9, 15, tzinfo=UTC))
    assert len(moved) == 2, moved
    out = []
    for name, page in pages.items():
        median_get(client, page, headers, 1)
        cold = median_get(client, page, headers, runs)
        assert cold[1] == hot[name][1], f"answers differ: {name}"
        out.append((name, hot[name][0], cold[0]))
    return out


def main(argv: list[str] | None = None) -> int:
    """Time the pages hot and cold and print the figures."""
    parser = argparse.ArgumentParser(prog="python -m bench.coldagg")
    parser.add_argument("--devices", type=int, default=10)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--database-url")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="bench-coldagg-") as tmp, scratch_database(
            args.database_url, prefix="bench_coldagg_") as url:
        figures = run(url, args.devices, args.runs, Path(tmp))
    for name, hot, cold in figures:
        print(f"{name}: hot {hot:.0f} ms, cold {cold:.0f} ms, ratio {cold / hot:.2f}")
    print(f"({args.devices} devices x 2 months; answers byte-identical)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
