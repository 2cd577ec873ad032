"""Cost of the database roles and row-level security (docs/security.md "Database roles").

    .venv/bin/python -m bench.rls [--quick] [--database-url URL]

On a throwaway PostgreSQL (TimescaleDB), loads `calibrated` the way bench.serve does (20 devices
of one organisation at one location, 200k 5-minute rows; plus a second organisation with its
own device) and times the API's own 10,000-row page statements (serve.queries.page_statement,
device page and location page) as the `sds_api` role with `app.org_id` set, i.e. through the
row-level security policies of migrations 0050/0051, against the same statements as the
owner (which RLS does not filter: superuser), interleaved, medians. Also times the per-checkout
round trip that switches a pooled connection's role and organisation (set_request_scope)
against a plain `SELECT 1`. Teams (migration 0155): the same pages for a teams-only member
whose team holds the location (so all 20 devices) against an unrestricted caller. Prints
ratios; a benchmark, not a test.
"""

from __future__ import annotations

import argparse
import dataclasses
import statistics
import time
from collections.abc import Callable
from datetime import timedelta
from uuid import UUID

import psycopg

from bench.common import scratch_database
from bench.serve.__main__ import (
    DEVICES,
    END,
    PAGE,
    World,
    device_name,
    load_calibrated,
    scan_for,
    seed,
)
from people import accounts
from serve import queries
from shared import db, places

STEPS = 10_000  # per device: 200k rows for 20 devices


def _time(fn: Callable[[], object]) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def _interleaved(a: Callable[[], object], b: Callable[[], object],
                 repeat: int) -> tuple[float, float]:
    ta, tb = [], []
    a(), b()  # warm caches and plans
    for _ in range(repeat):
        ta.append(_time(a))
        tb.append(_time(b))
    return statistics.median(ta), statistics.median(tb)


def _page(conn: psycopg.Connection, scan: object) -> Callable[[], object]:
    stmt, params = queries.page_statement(scan)  # type: ignore[arg-type]

    def run() -> object:
        with conn.cursor() as cur:
            rows = cur.execute(stmt, params).fetchall()  # type: ignore[call-overload]
        conn.rollback()
        assert len(rows) == PAGE, len(rows)
        return rows

    return run


def main() -> int:
    """Measure and print the table of ratios."""
    parser = argparse.ArgumentParser(prog="python -m bench.rls", description=__doc__)
    parser.add_argument("--quick", action="store_true", help="fewer repeats")
    parser.add_argument("--database-url", help="maintenance URL of an existing server")
    args = parser.parse_args()
    repeat = 9 if args.quick else 25
    with scratch_database(args.database_url, prefix="bench_rls") as url:
        world: World = seed(url)
        load_calibrated(world, first_step=0, steps=STEPS)
        with db.connect(url) as conn:  # a tenant whose rows the policy must skip
            other = accounts.create_org(conn, name="Other")
            places.register_device(conn, org=other, name="X00001")
            places.deploy_device(conn, device="X00001", location=world.location,
                                   start=END - timedelta(days=400))
            conn.execute("INSERT INTO calibrated (time, device, location) SELECT"
                         " %s - g * interval '5 minutes', 'X00001', %s"
                         " FROM generate_series(0, 9999) g", (END, world.location))
            # A teams-only member whose one team holds the location (migration 0155).
            member = accounts.create_user(conn, org=world.org, email="team@bench.example",
                                          password="bench-team-password")
            conn.execute("UPDATE memberships SET teams_only = true WHERE user_id = %s",
                         (member,))
            conn.execute("WITH t AS (INSERT INTO teams (org_id, name) VALUES (%s, 'bench')"
                         " RETURNING id) INSERT INTO team_members (team_id, org_id, user_id)"
                         " SELECT id, %s, %s FROM t", (world.org, world.org, member))
            conn.execute("INSERT INTO team_locations (team_id, org_id, location_id)"
                         " SELECT id, org_id, %s FROM teams WHERE name = 'bench'",
                         (world.location,))
            conn.commit()
        start = END - timedelta(minutes=5 * (PAGE + 10))
        device_scan = scan_for(world, device="B00000", start=start, end=END, csv=False)
        start_loc = END - timedelta(minutes=5 * (PAGE // 20 + 10))
        # The foreign device deployed at the location makes find_location restrict the
        # listing to the caller's devices, as the API does; RLS filters it once more.
        loc_scan = dataclasses.replace(device_scan, device=None, location=world.location,
                                       start=start_loc, only_devices=tuple(
                                           device_name(i) for i in range(DEVICES)))
        owner = db.connect(url, options="-c TimeZone=UTC")
        api = db.connect(url, options="-c TimeZone=UTC")
        db.set_request_scope(api, db.ROLE_API, UUID(str(world.org)))
        teams_only = db.connect(url, options="-c TimeZone=UTC")
        db.set_request_scope(teams_only, db.ROLE_API, UUID(str(world.org)), member, True)
        rows = []
        for name, scan in (("10k device page", device_scan), ("10k location page", loc_scan)):
            t_api, t_owner = _interleaved(_page(api, scan), _page(owner, scan), repeat)
            rows.append((f"{name}: sds_api + RLS / owner", t_api / t_owner,
                         f"{t_api * 1e3:.1f} ms vs {t_owner * 1e3:.1f} ms"))
        for name, scan in (("10k device page", device_scan), ("10k location page", loc_scan)):
            t_team, t_api = _interleaved(_page(teams_only, scan), _page(api, scan), repeat)
            rows.append((f"{name}: teams-only / unrestricted", t_team / t_api,
                         f"{t_team * 1e3:.1f} ms vs {t_api * 1e3:.1f} ms"))
        teams_only.close()
        n = 200
        t_scope, t_one = _interleaved(
            lambda: [db.set_request_scope(api, db.ROLE_API, world.org) for _ in range(n)],
            lambda: [api.execute("SELECT 1") and api.rollback() for _ in range(n)], repeat)
        rows.append(("checkout scope round trip / SELECT 1", t_scope / t_one,
                     f"{t_scope / n * 1e6:.0f} us vs {t_one / n * 1e6:.0f} us"))
        owner.close()
        api.close()
    print(f"bench.rls ({'quick, ' if args.quick else ''}{repeat} repeats)")
    for label, ratio, detail in rows:
        print(f"  {label:<48} {ratio:5.2f}  {detail}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
