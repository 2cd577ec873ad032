"""Late data, the claim-then-recompute race, idempotence, backfill and zone changes
(reliability plan R20-R24, R29, R35)."""

from __future__ import annotations

import threading
from datetime import UTC, datetime, timedelta

import psycopg
import pytest

from aggregate import jobs, rollups
from shared import dirty
from shared.timeutil import bucket_of, zone
from tests.support.ingesting import wait_for
from tests.support.readings import insert_readings, series
from tests.support.rollups import fetch, make_location, run_all

END = datetime(2024, 7, 20, 12, 0, tzinfo=UTC)  # "now" of these scenarios
TABLES = rollups.TABLE_ORDER


def _checksum(conn: psycopg.Connection, table: str) -> str:
    """md5 over every value column of `table` except the bookkeeping times."""
    cols = fetch(conn, "SELECT column_name FROM information_schema.columns"
                 " WHERE table_name = %s AND column_name NOT IN ('create_time', 'update_time')"
                 " ORDER BY ordinal_position", table)
    names = ", ".join(c["column_name"] for c in cols)
    row = conn.execute(f"SELECT md5(coalesce(string_agg(r::text, '|' ORDER BY r.device,"
                       f" r.time), '')) FROM (SELECT {names} FROM {table}) r").fetchone()
    return row[0]


def _stamp(conn: psycopg.Connection) -> dict[tuple[str, datetime], datetime]:
    out = {}
    for table in TABLES:
        for r in fetch(conn, f"SELECT time, update_time FROM {table}"):
            out[(table, r["time"])] = r["update_time"]
    return out


@pytest.mark.parametrize("late", [
    pytest.param(timedelta(hours=1), id="1_hour"),
    pytest.param(timedelta(days=2), id="2_days"),
    pytest.param(timedelta(days=40), id="40_days"),
])
def test_late_reading_recomputes_exactly_its_buckets(db, late: timedelta, figures) -> None:
    loc = make_location(db, "America/Chicago", lat=41.9, lon=-87.6, elev=180.0, kc=1.0)
    missing = END - late
    rows = series(END - timedelta(days=41), END, tair=lambda i, t: 20.0 + (i % 12),
                  rh=lambda i, t: 0.6, wind_speed=lambda i, t: 2.0, swdw=lambda i, t: 300.0)
    on_time = [r for r in rows if r["time"] != missing]
    insert_readings(db, "L1", loc, on_time, marks=True)
    run_all(db)
    db.commit()
    before = _stamp(db)
    buckets = {t: bucket_of(t, missing, zone("America/Chicago")) for t in TABLES}
    old = {t: fetch(db, f"SELECT sample_pct FROM {t} WHERE time = %s", buckets[t][0])[0]
           for t in TABLES}

    insert_readings(db, "L1", loc, [{"time": missing, "tair": 50.0, "rh": 0.6}], marks=True)
    db.commit()
    pending = fetch(db, "SELECT rollup, bucket FROM rollup_dirty ORDER BY rollup")
    assert {(p["rollup"], p["bucket"]) for p in pending} == {
        (t, buckets[t][0]) for t in TABLES}, "one mark per table, at the reading's bucket"
    assert run_all(db) == 3
    db.commit()

    after = _stamp(db)
    changed = {k for k in after if after[k] != before.get(k)}
    assert changed == {(t, buckets[t][0]) for t in TABLES}
    figures.record(f"rollup.late_{late.total_seconds() / 3600:g}h", len(changed),
                   section="rollup",
                   title=f"Buckets recomputed for one reading {late} late (R22/R23)",
                   target="3 (hourly, local_hourly, daily)",
                   source="tests/aggregate/test_late_data.py")
    for t in TABLES:
        row = fetch(db, f"SELECT * FROM {t} WHERE time = %s", buckets[t][0])[0]
        slots = (buckets[t][1] - buckets[t][0]) / timedelta(minutes=5)
        # Both shares are rounded to 0.1 % at write.
        assert row["sample_pct"] == pytest.approx(old[t]["sample_pct"] + 1 / slots, abs=1e-3)
        assert row["maxt"] == 50.0
        assert row["update_time"] > row["create_time"]
    assert fetch(db, "SELECT count(*) AS n FROM rollup_dirty")[0]["n"] == 0


def _wait_blocked(conn: psycopg.Connection, pid: int, timeout: float = 10.0) -> None:
    def blocked() -> bool:
        row = conn.execute("SELECT wait_event_type FROM pg_stat_activity WHERE pid = %s",
                           (pid,)).fetchone()
        return bool(row and row[0] == "Lock")

    wait_for(blocked, timeout, every=0.02, what="the late writer blocked on the claimed mark")


def _late_writer(url: str, loc, t: datetime, ready: list) -> threading.Thread:
    def work() -> None:
        with psycopg.connect(url) as other:
            ready.append(other.info.backend_pid)
            insert_readings(other, "R1", loc, [{"time": t, "tair": 30.0}], marks=True)
            other.commit()
    thread = threading.Thread(target=work, daemon=True)
    thread.start()
    return thread


def test_reading_committed_during_a_rollup_is_not_lost(db, database_url) -> None:
    """Rollup claims marks; a late insert + mark waits on the claimed mark and commits after
    the rollup: its mark remains, and the next run includes the reading (R20)."""
    loc = make_location(db, "UTC")
    t0 = datetime(2024, 7, 1, 10, 0, tzinfo=UTC)
    insert_readings(db, "R1", loc, [{"time": t0, "tair": 10.0}], marks=True)
    db.commit()

    marks = rollups.claim_marks(db, table="hourly", limit=100)  # rollup transaction begins
    ready: list[int] = []
    writer = _late_writer(database_url, loc, t0 + timedelta(minutes=5), ready)
    wait_for(lambda: ready, 10, every=0.01, what="the late writer's session")
    with psycopg.connect(database_url, autocommit=True) as watch:
        _wait_blocked(watch, ready[0])
    buckets = rollups.resolve_marks(db, table="hourly", marks=marks)
    rollups.recompute(db, table="hourly", buckets=buckets, clear=marks, low_quality_pct=80)
    db.commit()
    writer.join(10)
    assert not writer.is_alive()

    row = fetch(db, "SELECT sample_pct, maxt FROM hourly")[0]
    raw = fetch(db, "SELECT count(*) AS n FROM calibrated")[0]["n"]
    left = fetch(db, "SELECT bucket FROM rollup_dirty WHERE rollup = 'hourly'")
    assert raw == 2 and row["sample_pct"] == pytest.approx(1 / 12, abs=5e-4)
    assert [m["bucket"] for m in left] == [t0], "rollup is stale, so its mark must remain"
    run_all(db)
    db.commit()
    row = fetch(db, "SELECT sample_pct, maxt FROM hourly")[0]
    assert row["sample_pct"] == pytest.approx(2 / 12, abs=5e-4) and row["maxt"] == 30.0
    assert fetch(db, "SELECT count(*) AS n FROM rollup_dirty")[0]["n"] == 0


def test_naive_recompute_then_delete_loses_the_reading(db, database_url) -> None:
    """Negative control for the test above: recompute first, delete marks after, and the
    late reading is neither rolled up nor marked (finding 7)."""
    loc = make_location(db, "UTC")
    t0 = datetime(2024, 7, 1, 10, 0, tzinfo=UTC)
    insert_readings(db, "R1", loc, [{"time": t0, "tair": 10.0}], marks=True)
    db.commit()
    marks = [(r["device"], r["bucket"]) for r in fetch(
        db, "SELECT device, bucket FROM rollup_dirty WHERE rollup = 'hourly'")]
    buckets = rollups.resolve_marks(db, table="hourly", marks=marks)
    rollups.recompute(db, table="hourly", buckets=buckets, low_quality_pct=80)
    ready: list[int] = []
    writer = _late_writer(database_url, loc, t0 + timedelta(minutes=5), ready)
    writer.join(10)
    assert not writer.is_alive()  # nothing blocks it: the mark already exists
    db.execute("DELETE FROM rollup_dirty WHERE rollup = 'hourly'")
    db.commit()
    raw = fetch(db, "SELECT count(*) AS n FROM calibrated")[0]["n"]
    row = fetch(db, "SELECT sample_pct FROM hourly")[0]
    left = fetch(db, "SELECT count(*) AS n FROM rollup_dirty WHERE rollup = 'hourly'")[0]["n"]
    assert (raw, round(row["sample_pct"] * 12), left) == (2, 1, 0)


def test_two_workers_on_the_same_marks_do_not_double_count(db, database_url) -> None:
    """SKIP LOCKED claims split the work; recomputation makes overlap harmless (R24)."""
    loc = make_location(db, "Asia/Kathmandu")
    start = datetime(2024, 7, 1, tzinfo=UTC)
    rows = series(start, start + timedelta(days=2), tair=lambda i, t: float(i % 50))
    insert_readings(db, "W1", loc, rows, marks=True)
    db.commit()
    result: dict[str, int] = {}

    def second_worker() -> None:
        with psycopg.connect(database_url) as other:
            result["second"] = rollups.process_marks(other, table="local_hourly", limit=1000,
                                                     low_quality_pct=80)
            other.commit()

    # Worker 1 holds its claim open while worker 2 runs; worker 2 may wait for worker 1's
    # new hypertable chunk, never for its marks.
    first = rollups.process_marks(db, table="local_hourly", limit=20, low_quality_pct=80)
    thread = threading.Thread(target=second_worker, daemon=True)
    thread.start()
    thread.join(0.5)
    db.commit()
    thread.join(30)
    assert not thread.is_alive()
    second = result["second"]
    assert first == 20 and second == 49 - 20
    got = fetch(db, "SELECT count(*) AS n, sum(sample_pct * 12) AS readings FROM local_hourly")
    assert got[0]["n"] == 49 and round(got[0]["readings"]) == len(rows)


CONCURRENT_ZONES = ("Australia/Lord_Howe", "Pacific/Chatham", "America/Santiago",
                    "Asia/Kolkata")


def _seed_fall_back(conn: psycopg.Connection, *, skip: int) -> int:
    """Three days of readings around the 2024-04-07 fall-back of the concurrent zones, one
    device per zone plus one undeployed, leaving out slots where i % 7 == skip (so a second
    wave with another `skip` adds late readings into existing buckets)."""
    start = datetime(2024, 4, 5, 12, 0, tzinfo=UTC)
    n = 0
    for i, tz in enumerate((*CONCURRENT_ZONES, None)):
        loc = None
        if tz is not None:
            row = conn.execute("SELECT id FROM locations WHERE tz_name = %s", (tz,)).fetchone()
            loc = row[0] if row else make_location(conn, tz)
        rows = [r for j, r in enumerate(series(
            start, start + timedelta(days=3),
            tair=lambda k, t, i=i: round(5 + i + (k * 37 % 101) / 10, 2))) if j % 7 != skip]
        n += insert_readings(conn, f"C{i}", loc, rows, marks=True)
    conn.commit()
    return n


def _deadlocks(conn: psycopg.Connection) -> int:
    return int(conn.execute("SELECT deadlocks FROM pg_stat_database"
                            " WHERE datname = current_database()").fetchone()[0])


def test_concurrent_workers_and_a_lost_lock_match_the_reference(
        db, database_url, settings, figures) -> None:
    """R24: two workers on their own connections drain the same dirty set at once (batches of
    25, opposite table orders); then a leader loses its lock with a claimed batch open while
    the new leader drains. No mark is processed twice, nothing deadlocks, and after the next
    run every bucket equals the reference from the raw rows with no mark left."""
    from aggregate.leader import LeaderLock, LeadershipLost
    from shared.db import make_pool
    from tests.aggregate import reference

    _seed_fall_back(db, skip=3)
    with psycopg.connect(database_url, autocommit=True) as admin:
        deadlocks_before = _deadlocks(admin)
    pending = fetch(db, "SELECT count(*) AS n FROM rollup_dirty")[0]["n"]
    db.commit()
    pools = [make_pool(settings, name=f"sds-aggregate-w{i}") for i in range(2)]
    try:
        # --- phase 1: two free-running workers on one dirty set ----------------------------
        barrier = threading.Barrier(2)
        done: dict[int, int] = {}
        errors: list[BaseException] = []

        def worker(i: int) -> None:
            try:
                barrier.wait(10)
                order = TABLES if i == 0 else tuple(reversed(TABLES))
                done[i] = sum(jobs.drain(pools[i], table=t, low_quality_pct=80, batch=25)
                              for t in order)
            except BaseException as exc:  # reported by the main thread
                errors.append(exc)

        threads = [threading.Thread(target=worker, args=(i,), daemon=True) for i in range(2)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
        assert not any(t.is_alive() for t in threads), "a worker hung (lock wait or deadlock)"
        assert not errors, errors
        assert done[0] > 0 and done[1] > 0, done
        assert done[0] + done[1] == pending, "a mark was processed twice or not at all"
        assert reference.marks_left(db) == 0
        assert not reference.mismatches(db)
        db.commit()

        # --- phase 2: the leader loses its lock mid-run -------------------------------------
        raw_before = fetch(db, "SELECT count(*) AS n FROM calibrated")[0]["n"]
        _seed_fall_back(db, skip=5)
        late = fetch(db, "SELECT count(*) AS n FROM calibrated")[0]["n"] - raw_before
        assert late > 0
        old, new = LeaderLock(database_url), LeaderLock(database_url)
        assert old.try_acquire()
        calls = {"n": 0}
        overlap: dict[str, int] = {}

        def losing_guard(conn: psycopg.Connection) -> None:
            """The real guard; on the pre-commit check of the old leader's second batch its
            lock session is ended and the new leader drains while that batch is still open."""
            calls["n"] += 1
            if calls["n"] == 4:
                with psycopg.connect(database_url, autocommit=True) as admin:
                    admin.execute("SELECT pg_terminate_backend(%s)", (old.backend_pid,))
                wait_for(new.try_acquire, 10, what="the old leader's lock freed")
                thread = threading.Thread(target=lambda: overlap.update(
                    {t: jobs.drain(pools[1], table=t, low_quality_pct=80, guard=new.guard,
                                   batch=25) for t in TABLES}), daemon=True)
                thread.start()
                thread.join(30)
                assert not thread.is_alive(), "the new leader waited on the old one's batch"
            old.guard(conn)

        with pytest.raises(LeadershipLost):
            jobs.drain(pools[0], table="hourly", low_quality_pct=80, guard=losing_guard,
                       batch=25)
        # The old leader's open batch rolled back: its 25 marks are pending again, and the
        # new leader's next run recomputes them.
        assert fetch(db, "SELECT count(*) AS n FROM rollup_dirty")[0]["n"] == 25
        db.commit()
        caught_up = {t: jobs.drain(pools[1], table=t, low_quality_pct=80, guard=new.guard)
                     for t in TABLES}
        assert caught_up["hourly"] == 25
        left = reference.marks_left(db)
        assert left == 0
        wrong = reference.mismatches(db)
        assert not wrong, sorted(wrong.items(), key=str)[:5]
        buckets = reference.bucket_count(db)
        old.release()
        new.release()
    finally:
        for p in pools:
            p.close()
    # Negative control: the comparison does see a wrong bucket.
    db.execute("UPDATE hourly SET maxt = maxt + 1 WHERE ctid = (SELECT min(ctid) FROM hourly"
               " WHERE device = 'C0')")
    assert len(reference.mismatches(db)) == 1
    db.rollback()
    with psycopg.connect(database_url, autocommit=True) as admin:
        deadlocks = _deadlocks(admin) - deadlocks_before
    assert deadlocks == 0
    figures.record("rollup.concurrent_workers",
                   {"marks (2 workers)": pending, "split": f"{done[0]}/{done[1]}",
                    "late readings": late, "batches rolled back on lock loss": 1,
                    "buckets compared": buckets, "mismatched": len(wrong), "marks left": left,
                    "deadlocks": deadlocks},
                   section="rollup",
                   title="Concurrent rollup workers on one dirty set, and a leader losing its "
                         "lock with a batch open (R24)",
                   target="no double counting, no deadlock, tables = reference",
                   source="tests/aggregate/test_late_data.py")


def _mark_everything(conn: psycopg.Connection) -> int:
    """Write a dirty mark for every bucket of every stored reading; returns marks written."""
    marks: set = set()
    for loc, tz_name in fetch_rows(conn, "SELECT DISTINCT c.location, l.tz_name FROM calibrated c"
                                         " LEFT JOIN locations l ON l.id = c.location"):
        times: dict[str, list[datetime]] = {}
        for device, t in fetch_rows(conn, "SELECT device, time FROM calibrated"
                                          " WHERE location IS NOT DISTINCT FROM %s", loc):
            times.setdefault(device, []).append(t)
        for device, ts in times.items():
            marks |= dirty.bucket_marks(device, ts, zone(tz_name) if tz_name else None)
    return dirty.write_marks(conn, marks)


def fetch_rows(conn: psycopg.Connection, sql: str, *args) -> list[tuple]:  # type: ignore[no-untyped-def]
    """Rows as tuples."""
    return conn.execute(sql, args).fetchall()


def test_rollups_are_idempotent_and_backfill_equals_incremental(db, database_url,
                                                                 figures) -> None:
    """R35: every rollup run twice in a row (from marks, by backfill, into empty tables)
    leaves identical table checksums."""
    locs = {tz: make_location(db, tz, lat=-33.4, lon=-70.6, elev=500.0, kc=0.8)
            for tz in ("America/Santiago", "Australia/Lord_Howe", "Asia/Kolkata")}
    start = datetime(2024, 9, 6, tzinfo=UTC)
    for i, (_tz, loc) in enumerate(locs.items()):
        rows = series(start, start + timedelta(days=4), tair=lambda j, t: 10 + (j % 40) * 0.5,
                      rh=lambda j, t: 0.4 + (j % 10) * 0.05, wind_speed=lambda j, t: 1.5,
                      wind_gust=lambda j, t: 4.0, swdw=lambda j, t: 200.0 + j % 300,
                      precip=lambda j, t: 0.2 if j % 31 == 0 else 0.0,
                      wind_direction=lambda j, t: (j * 7) % 360)
        insert_readings(db, f"I{i}", loc, rows[i * 3:], marks=True)  # uneven coverage per device
    run_all(db)
    db.commit()
    first = {t: _checksum(db, t) for t in TABLES}
    counts = {t: fetch(db, f"SELECT count(*) AS n FROM {t}")[0]["n"] for t in TABLES}
    assert all(counts.values())
    # Run every rollup twice in a row through the scheduler's own path: mark every bucket of
    # every reading dirty, drain, and compare the checksums after each run.
    remarked, differing = 0, 0
    for _ in range(2):
        remarked = _mark_everything(db)
        assert run_all(db) == remarked
        db.commit()
        again = {t: _checksum(db, t) for t in TABLES}
        differing += sum(again[t] != first[t] for t in TABLES)
        assert again == first
    assert remarked == sum(counts.values())
    # Run every bucket again, twice, by backfill: identical values.
    for _ in range(2):
        jobs.backfill(db, tables=TABLES, start=start - timedelta(days=1),
                      end=start + timedelta(days=6), devices=None, low_quality_pct=80,
                      chunk_days=2)
        again = {t: _checksum(db, t) for t in TABLES}
        differing += sum(again[t] != first[t] for t in TABLES)
        assert again == first
    # A backfill into empty tables reproduces the incremental result, also with the tables
    # computed side by side on their own connections.
    for workers in (1, 3):
        for t in TABLES:
            db.execute(f"DELETE FROM {t}")
        db.commit()
        jobs.backfill(db, tables=TABLES, start=start, end=start + timedelta(days=4),
                      devices=None, low_quality_pct=80, chunk_days=1, workers=workers,
                      connect=lambda: psycopg.connect(database_url))
        db.commit()
        again = {t: _checksum(db, t) for t in TABLES}
        differing += sum(again[t] != first[t] for t in TABLES)
        assert again == first, workers
    assert run_all(db) == 0  # nothing pending: a second run does nothing
    from tests.aggregate import reference

    assert not reference.mismatches(db)
    figures.record("rollup.idempotence",
                   {"rows checked": sum(counts.values()), "reruns": "2 from marks, 2 backfills, "
                    "2 rebuilds", "table checksums differing": differing},
                   section="rollup",
                   title="Every rollup run twice in a row: md5 of each table's values before "
                         "and after (R35)",
                   target="identical", source="tests/aggregate/test_late_data.py")


def test_zone_change_rebuckets_the_location(db) -> None:
    loc = make_location(db, "UTC", lat=20.0, lon=78.0)
    start = datetime(2024, 6, 1, tzinfo=UTC)
    rows = series(start, start + timedelta(days=2), tair=lambda i, t: float(i % 24))
    insert_readings(db, "TZ1", loc, rows, marks=True)
    run_all(db)
    db.commit()
    assert {r["m"] for r in fetch(db, "SELECT extract(minute FROM time) AS m"
                                      " FROM local_hourly")} == {0}
    db.execute("UPDATE locations SET tz_name = 'Asia/Kolkata' WHERE id = %s", (loc,))
    n = dirty.mark_location(db, loc)
    assert n > 0
    run_all(db)
    db.commit()
    local = fetch(db, "SELECT time, tair, sample_pct FROM local_hourly ORDER BY time")
    assert {r["time"].minute for r in local} == {30}
    assert len(local) == 49  # 23:30Z .. 23:30Z, partial at both ends
    days = [r["time"] for r in fetch(db, "SELECT time FROM daily ORDER BY time")]
    assert days == [datetime(2024, 5, 31, 18, 30, tzinfo=UTC),
                    datetime(2024, 6, 1, 18, 30, tzinfo=UTC),
                    datetime(2024, 6, 2, 18, 30, tzinfo=UTC)]
    hourly = fetch(db, "SELECT count(*) AS n FROM hourly")[0]["n"]
    assert hourly == 48  # UTC hours are not affected by the zone
