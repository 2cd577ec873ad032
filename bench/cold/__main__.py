"""Benchmark: the cold tier's bytes per device-year and a cold 10k page against the same
page hot (docs/benchmarks.md "Cold tier", docs/scaling.md).

    .venv/bin/python -m bench.cold [--devices N] [--page-devices N] [--runs N] [--rough]
                                   [--database-url URL]

1. Bytes: a year of the simulator's readings (admin.simulate.weather, the derived columns as
   the ingester computes them, every value rounded to its column's stored decimals as the
   ingester's insert stores it) for N devices (default 4) of one organisation, written as the
   mover writes them (shared.coldfiles: one zstd Parquet file per organisation-month); the
   total over N is the figure per device-year. Also the same with the derived columns
   unrounded (this bench's first figure), and with --rough a rougher series: sensor-like noise
   (NOISE) added to the simulator's values before the derived columns are computed.
2. Pages: M devices (default 10) with two months of the simulator's readings in `calibrated`
   of a scratch database, and H000 with S000's readings two years later; the app in process
   (Flask test client, no gunicorn) answers S000's 10,000-row page (JSON and CSV), the mover
   (aggregate.coldmove) moves both months cold (timed: the mover's cost per device-month),
   then S000's page (cold) and H000's same page (hot) are timed alternately `--runs` times
   each (medians), so both see the same background load. Every cold answer must equal the
   hot answer S000 had before the move, byte for byte.
"""

from __future__ import annotations

import argparse
import math
import os
import random
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
from bench.common import median_get, scratch_database
from ingest.derive import derive_row
from people import accounts
from shared import coldfiles, db, places, units
from shared.config import Settings

YEAR = datetime(2025, 1, 1, tzinfo=UTC)
STEP = timedelta(minutes=5)


# A rougher series (--rough): the noise of a real station's sensors on top of the simulator's
# smooth weather, standard deviations in stored units (temperatures ~0.15 C, humidity 1.5 %,
# pressure 20 Pa, radiation 3 % + 2 W/m2, wind 0.3 m/s, direction 15 degrees), before the
# derived columns are computed from the noisy values, as the ingester computes them.
NOISE = {"tair": 0.15, "rh": 0.015, "p": 0.02, "wind_speed": 0.3, "wind_gust": 0.4,
         "wind_direction": 15.0, "tabove": 0.2, "tbelow": 0.15}
RADIATION = ("swdw", "swuw", "lwdw", "lwuw", "pardw", "paruw")
_RANGES = {c.name: c.valid_range for c in coldfiles.COLUMNS}
_POWER = {c.name: float(10 ** units.stored_decimals(c)) for c in coldfiles.COLUMNS
          if c.dtype == "real"}


def _roughen(w: dict[str, float], rng: random.Random) -> dict[str, float]:
    out = dict(w)
    for name, sd in NOISE.items():
        out[name] = w[name] + rng.gauss(0, sd)
    for name in RADIATION:
        out[name] = max(0.0, w[name] * (1 + rng.gauss(0, 0.03)) + rng.gauss(0, 2.0))
    out["wind_direction"] %= 360
    for name, value in out.items():
        lo, hi = _RANGES.get(name) or (-math.inf, math.inf)
        out[name] = min(hi, max(lo, value))
    return out


def _stored(name: str, value: float | None) -> float | None:
    """A value as the ingester's insert stores it: rounded to its column's stored decimals."""
    if value is None:
        return None
    power = _POWER[name]
    return round(float(value) * power) / power


def _rows(device: str, location: str | None, start: datetime, end: datetime,
          i: int, *, rough: bool = False, rounded: bool = True) -> list[tuple[Any, ...]]:
    site = Site(device, 40.0 - 7 * i, -90.0 + 11 * i, 100.0 + 50 * i)
    rng = random.Random(f"{device}-{i}")
    out = []
    t = start
    while t < end:
        w = weather(site, t)
        if rough:
            w = _roughen(w, rng)
        derived = derive_row(w["tair"], w["rh"], w["p"], site.elev)
        values = dict(zip(coldfiles.NAMES[3:], (*(w.get(n) for n in coldfiles.NAMES[3:19]),
                                                 *derived), strict=True))
        out.append((t, device, location, *(
            (_stored(n, v) if rounded else (None if v is None else float(v)))
            for n, v in values.items())))
        t += STEP
    return out


def bytes_per_device_year(devices: int, work: Path, **kind: bool) -> tuple[float, int]:
    """(MB per device-year, rows per device-year) of a year of readings as cold files
    (`kind`: _rows' rough and rounded)."""
    total = rows_total = 0
    per_device = {f"S{i:03d}": _rows(f"S{i:03d}", "00000000-0000-0000-0000-000000000001",
                                     YEAR, YEAR.replace(year=2026), i, **kind)
                  for i in range(devices)}
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
        places.register_device(conn, org=org, name="H000")
        for i in range(devices):  # (COPY FROM is refused on a table with row-level security)
            places.register_device(conn, org=org, name=f"S{i:03d}")
            rows = _rows(f"S{i:03d}", str(loc), start, end, i)
            if i == 0:  # H000: S000's readings two years on, hot while S000's are cold
                rows += [(t.replace(year=t.year + 2), "H000", *rest) for t, _d, *rest in rows]
            columns = [list(c) for c in zip(*rows, strict=True)]
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
    twin = page.replace("S000", "H000").replace("=2025-", "=2027-")
    median_get(client, page, headers, 2)  # warm the pool and the caches
    _, hot_body = median_get(client, page, headers, 1)
    _, hot_csv_body = median_get(client, page, csv, 1)
    with db.connect(url, autocommit=True) as conn:
        t0 = time.perf_counter()
        moved = coldmove.move(conn, hot_days=1, cold_path=str(work / "cold"),
                              now=datetime(2025, 9, 15, tzinfo=UTC))
        move_ms = (time.perf_counter() - t0) * 1000
    assert len(moved) == 2, moved
    median_get(client, page, headers, 2)
    # Cold S000 and hot H000 (the same readings two years on) alternate, so both see the same
    # background load on a shared machine.
    times: dict[str, list[float]] = {"hot_json": [], "cold_json": [], "hot_csv": [],
                                     "cold_csv": []}
    for _ in range(runs):
        for name, url_, hdrs in (("hot_json", twin, headers), ("cold_json", page, headers),
                                 ("hot_csv", twin, csv), ("cold_csv", page, csv)):
            ms, body = median_get(client, url_, hdrs, 1)
            times[name].append(ms)
            if name == "cold_json":
                assert body == hot_body, "JSON answers differ"
            elif name == "cold_csv":
                assert body == hot_csv_body, "CSV answers differ"
    figures = {name: statistics.median(ms) for name, ms in times.items()}
    return {**figures, "move_ms_per_device_month": move_ms / (2 * devices),
            "rows": hot_body.count(b'"time"')}


def main(argv: list[str] | None = None) -> int:
    """Run both parts and print the figures."""
    parser = argparse.ArgumentParser(prog="python -m bench.cold")
    parser.add_argument("--devices", type=int, default=4)
    parser.add_argument("--page-devices", type=int, default=10)
    parser.add_argument("--runs", type=int, default=7)
    parser.add_argument("--rough", action="store_true",
                        help="also the bytes of a rougher series (sensor-like noise)")
    parser.add_argument("--database-url")
    args = parser.parse_args(argv)
    load = os.getloadavg()[0]
    with tempfile.TemporaryDirectory(prefix="bench-cold-") as tmp:
        work = Path(tmp)
        for label, kind in (("simulator's data as stored", {}),
                            ("simulator's data, derived columns unrounded", {"rounded": False}),
                            ("rough series (--rough noise) as stored", {"rough": True})):
            if kind.get("rough") and not args.rough:
                continue
            mb, rows = bytes_per_device_year(args.devices, work, **kind)
            print(f"cold tier: {mb:.2f} MB per device-year ({rows} rows, "
                  f"{mb * 1e6 / rows:.1f} bytes a row; {label}, {args.devices} devices)")
        with scratch_database(args.database_url, prefix="bench_cold_") as url:
            f = pages(url, args.page_devices, args.runs, work)
    print(f"10k page JSON: hot {f['hot_json']:.0f} ms, cold {f['cold_json']:.0f} ms, "
          f"ratio {f['cold_json'] / f['hot_json']:.2f}")
    print(f"10k page CSV:  hot {f['hot_csv']:.0f} ms, cold {f['cold_csv']:.0f} ms, "
          f"ratio {f['cold_csv'] / f['hot_csv']:.2f}")
    print(f"mover: {f['move_ms_per_device_month']:.0f} ms per device-month "
          f"({args.page_devices} devices x 2 months); answers byte-identical")
    print(f"load average (1 min): {load:.1f} at the start, {os.getloadavg()[0]:.1f} at the end "
          f"({os.cpu_count()} cores)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
