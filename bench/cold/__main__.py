"""Benchmark: the cold tier's bytes per device-year and a cold 10k page against the same
page hot (docs/benchmarks.md "Cold tier", docs/scaling.md).

    .venv/bin/python -m bench.cold [--devices N] [--page-devices N] [--runs N] [--database-url URL]

1. Bytes: a year of the simulator's readings (admin.simulate.weather, the derived columns as
   the ingester computes them) for N devices (default 4) of one organisation, written as the
   mover writes them (shared.coldfiles: one zstd Parquet file per organisation-month); the
   total over N is the figure per device-year.
2. Pages: M devices (default 10) with two months of the simulator's readings in `calibrated`
   of a scratch database; the app in process (Flask test client, no gunicorn) answers a
   10,000-row JSON page and the same page as CSV `--runs` times each (median), then the
   mover (aggregate.coldmove) moves both months cold (timed: the mover's cost per
   device-month) and the same requests are timed again. The answers must be byte-identical;
   the ratio cold/hot is printed.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq

from admin.simulate import Site, weather
from aggregate import coldmove
from bench.common import scratch_database
from ingest.derive import derive_row
from people import accounts
from shared import coldfiles, db, places
from shared.config import Settings

YEAR = datetime(2025, 1, 1, tzinfo=UTC)
STEP = timedelta(minutes=5)


def _rows(device: str, location: str | None, start: datetime, end: datetime,
          i: int) -> list[tuple[Any, ...]]:
    site = Site(device, 40.0 - 7 * i, -90.0 + 11 * i, 100.0 + 50 * i)
    out = []
    t = start
    while t < end:
        w = weather(site, t)
        derived = derive_row(w["tair"], w["rh"], w["p"], site.elev)
        values = (*(w.get(n) for n in coldfiles.NAMES[3:19]), *derived)
        out.append((t, device, location, *(None if v is None else float(v) for v in values)))
        t += STEP
    return out


def bytes_per_device_year(devices: int, work: Path) -> tuple[float, int]:
    """(MB per device-year, rows per device-year) of a year of readings as cold files."""
    total = rows_total = 0
    per_device = {f"S{i:03d}": _rows(f"S{i:03d}", "00000000-0000-0000-0000-000000000001",
                                     YEAR, YEAR.replace(year=2026), i) for i in range(devices)}
    for month in range(1, 13):
        lo = YEAR.replace(month=month)
        hi = YEAR.replace(year=2026) if month == 12 else YEAR.replace(month=month + 1)
        rows = [r for rs in per_device.values() for r in rs if lo <= r[0] < hi]
        path = work / f"{month:02d}.parquet"
        pq.write_table(coldfiles.table_from_rows(rows), path, compression="zstd",
                       row_group_size=coldfiles.ROW_GROUP_ROWS)
        total += path.stat().st_size
        rows_total += len(rows)
    return total / devices / 1e6, rows_total // devices


def _time(client: Any, url: str, headers: dict[str, str], runs: int) -> tuple[float, bytes]:
    times, body = [], b""
    for _ in range(runs):
        t0 = time.perf_counter()
        got = client.get(url, headers=headers)
        body = got.get_data()
        times.append(time.perf_counter() - t0)
        assert got.status_code == 200, body[:300]
    return statistics.median(times) * 1000, body


def pages(url: str, devices: int, runs: int, work: Path) -> dict[str, float]:
    """Median ms of the hot and cold 10k pages (JSON, CSV) and the mover's ms per
    device-month."""
    from serve import create_app

    start, end = datetime(2025, 7, 1, tzinfo=UTC), datetime(2025, 9, 1, tzinfo=UTC)
    with db.connect(url) as conn:
        org = accounts.create_org(conn, name="Bench cold")
        loc = places.create_location(conn, org=org, loc=places.LocationInput(
            name="L", tz_name="Europe/Berlin"))
        user = accounts.create_user(conn, org=org, email="b@cold.example", password="b-pw-123456")
        key = accounts.create_api_key(conn, user=user, scopes=["data:read"])["apikey"]
        names = ", ".join(coldfiles.NAMES)
        arrays = ", ".join(f"%s::{c.dtype}[]" for c in coldfiles.COLUMNS)
        for i in range(devices):  # (COPY FROM is refused on a table with row-level security)
            places.register_device(conn, org=org, name=f"S{i:03d}")
            columns = [list(c) for c in zip(*_rows(f"S{i:03d}", str(loc), start, end, i),
                                            strict=True)]
            conn.execute(f"INSERT INTO calibrated ({names}) SELECT * FROM unnest({arrays})",
                         columns)
        conn.commit()
        conn.execute("ANALYZE calibrated")
        conn.commit()
    app = create_app(Settings(database_url=url, metrics_port=0, aggregate_metrics_port=0,
                              cursor_secret="bench", cold_path=str(work / "cold"),
                              api_rate_limit=10**9, api_user_rate_limit=10**9,
                              api_org_rate_limit=10**9))
    client = app.test_client()
    headers = {"Authorization": f"Apikey {key}"}
    page = ("/api/v2/data/calibrated?device=S000&start_time=2025-07-01T00:00:00Z"
            "&end_time=2025-08-31T23:59:59Z&limit=10000")
    csv = {**headers, "Accept": "text/csv"}
    _time(client, page, headers, 2)  # warm the pool and the caches
    hot_json, hot_body = _time(client, page, headers, runs)
    hot_csv, hot_csv_body = _time(client, page, csv, runs)
    with db.connect(url, autocommit=True) as conn:
        t0 = time.perf_counter()
        moved = coldmove.move(conn, hot_days=1, cold_path=str(work / "cold"),
                              now=datetime(2025, 9, 15, tzinfo=UTC))
        move_ms = (time.perf_counter() - t0) * 1000
    assert len(moved) == 2, moved
    _time(client, page, headers, 2)
    cold_json, cold_body = _time(client, page, headers, runs)
    cold_csv, cold_csv_body = _time(client, page, csv, runs)
    assert (cold_body, cold_csv_body) == (hot_body, hot_csv_body), "answers differ"
    return {"hot_json": hot_json, "cold_json": cold_json, "hot_csv": hot_csv,
            "cold_csv": cold_csv, "move_ms_per_device_month": move_ms / (2 * devices),
            "rows": hot_body.count(b'"time"')}


def main(argv: list[str] | None = None) -> int:
    """Run both parts and print the figures."""
    parser = argparse.ArgumentParser(prog="python -m bench.cold")
    parser.add_argument("--devices", type=int, default=4)
    parser.add_argument("--page-devices", type=int, default=10)
    parser.add_argument("--runs", type=int, default=7)
    parser.add_argument("--database-url")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="bench-cold-") as tmp:
        work = Path(tmp)
        mb, rows = bytes_per_device_year(args.devices, work)
        print(f"cold tier: {mb:.2f} MB per device-year ({rows} rows, "
              f"{mb * 1e6 / rows:.1f} bytes a row; simulator's data, {args.devices} devices)")
        with scratch_database(args.database_url, prefix="bench_cold_") as url:
            f = pages(url, args.page_devices, args.runs, work)
    print(f"10k page JSON: hot {f['hot_json']:.0f} ms, cold {f['cold_json']:.0f} ms, "
          f"ratio {f['cold_json'] / f['hot_json']:.2f}")
    print(f"10k page CSV:  hot {f['hot_csv']:.0f} ms, cold {f['cold_csv']:.0f} ms, "
          f"ratio {f['cold_csv'] / f['hot_csv']:.2f}")
    print(f"mover: {f['move_ms_per_device_month']:.0f} ms per device-month "
          f"({args.page_devices} devices x 2 months); answers byte-identical")
    return 0


if __name__ == "__main__":
    sys.exit(main())
