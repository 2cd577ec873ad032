"""`ingest.writer.write_batch` on its own: one batch of handled messages written in the
caller's transaction, without a broker or an ingester around it."""

from __future__ import annotations

import json
import math
import random
import struct
import threading
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from uuid import UUID

import psycopg
from psycopg import sql

from ingest import derive, writer
from ingest.handler import Message, handle
from shared import places
from shared.columns import READING_INPUTS, TABLES
from shared.units import stored_decimals
from tests.support.ingesting import ELEV, Site, iso, make_site, now_slot, wait_for


def _readings(device: str, *times: datetime, tair: float = 20.5) -> Message:
    body = json.dumps([{"time": iso(t), "tair": tair, "rh": 0.5} for t in times]).encode()
    return handle(f"sensors/{device}/readings", body)


def _count(conn: psycopg.Connection, query: str, *args: object) -> int:
    row = conn.execute(query, args).fetchone()
    assert row is not None
    return int(row[0])


def test_readings_health_and_rejections_in_one_batch(conn: psycopg.Connection) -> None:
    site: Site = make_site(conn)
    t1, t2 = now_slot(20), now_slot(15)
    bad = handle("sensors/A1/readings", json.dumps(
        [{"time": iso(t1), "tair": 500.0}]).encode())  # out of range: quarantined
    health = handle("sensors/A1/health", json.dumps(
        {"time": iso(t2), "batt_pct": 87.5, "fw": "1.2.3"}).encode())
    stranger = _readings("ZZ9", t1)  # not registered
    writer.prepare(conn)
    with conn.transaction():
        result = writer.write_batch(conn, [_readings("A1", t1, t2), bad, health, stranger])
    assert (result.stored, result.duplicates, result.health_stored) == (2, 0, 1)
    assert result.quarantined == {"out_of_range": 1, writer.UNKNOWN_DEVICE: 1}
    stored = conn.execute("SELECT time, location, tair, rh FROM calibrated WHERE device = 'A1'"
                          " ORDER BY time").fetchall()
    assert [(r[0], r[1]) for r in stored] == [(t1, site.location), (t2, site.location)]
    assert all(abs(r[2] - 20.5) < 1e-6 and abs(r[3] - 0.5) < 1e-6 for r in stored)
    assert conn.execute("SELECT batt_pct, fw FROM health WHERE device = 'A1'").fetchall() == [
        (87.5, "1.2.3")]
    reasons = conn.execute("SELECT device, reason FROM quarantine ORDER BY reason").fetchall()
    assert reasons == [("A1", "out_of_range"), ("ZZ9", writer.UNKNOWN_DEVICE)]
    # The rollups learn of the new readings in the same transaction.
    assert _count(conn, "SELECT count(*) FROM rollup_dirty WHERE device = 'A1'") > 0
    state = conn.execute("SELECT state, last_post IS NOT NULL, batt_pct FROM devices"
                         " WHERE name = 'A1'").fetchone()
    assert state == ("Active", True, 87.5)


def test_first_write_wins_and_duplicates_are_counted(conn: psycopg.Connection) -> None:
    make_site(conn)
    t = now_slot(30)
    writer.prepare(conn)
    with conn.transaction():
        first = writer.write_batch(conn, [_readings("A1", t, tair=10.0)])
    with conn.transaction():
        again = writer.write_batch(conn, [_readings("A1", t, tair=30.0),
                                          _readings("A1", t, t + timedelta(minutes=5))])
    assert (first.stored, first.duplicates) == (1, 0)
    assert (again.stored, again.duplicates) == (1, 2)
    assert conn.execute("SELECT tair FROM calibrated WHERE device = 'A1' AND time = %s",
                        (t,)).fetchone() == (10.0,)
    assert _count(conn, "SELECT count(*) FROM calibrated WHERE device = 'A1'") == 2


def test_nothing_is_written_when_the_caller_rolls_back(conn: psycopg.Connection) -> None:
    make_site(conn)
    writer.prepare(conn)
    conn.commit()
    result = writer.write_batch(conn, [_readings("A1", now_slot(40)),
                                       handle("sensors/A1/readings", b"{not json")])
    assert result.stored == 1 and sum(result.quarantined.values()) == 1
    conn.rollback()  # the caller's transaction fails: the batch leaves no trace
    for table in ("calibrated", "quarantine", "rollup_dirty"):
        assert _count(conn, f"SELECT count(*) FROM {table}") == 0, table
    assert conn.execute("SELECT state FROM devices WHERE name = 'A1'").fetchone() == ("New",)


def test_an_undeployed_device_stores_readings_without_a_location(
        conn: psycopg.Connection) -> None:
    make_site(conn, device="U1", deploy=False)
    t = datetime.now(UTC).replace(second=0, microsecond=0) - timedelta(minutes=10)
    t -= timedelta(minutes=t.minute % 5)
    writer.prepare(conn)
    with conn.transaction():
        result = writer.write_batch(conn, [_readings("U1", t)])
    assert result.stored == 1
    assert conn.execute("SELECT location FROM calibrated WHERE device = 'U1'").fetchone() == (
        None,)


def _waiting_query(conn: psycopg.Connection, pid: int) -> str | None:
    """The statement backend `pid` is running while it waits for a lock, else None."""
    row = conn.execute("SELECT query FROM pg_stat_activity WHERE pid = %s"
                       " AND wait_event_type = 'Lock'", (pid,)).fetchone()
    return None if row is None else str(row[0])


def _waits_until_commit(holder: psycopg.Connection, waiter: psycopg.Connection,
                        work: Callable[[], object], watch: psycopg.Connection,
                        while_waiting: Callable[[int, str], None]) -> None:
    """Run `work` (on `waiter`) in a thread until it waits for a lock; call `while_waiting`
    with its backend pid and the statement it waits in; then commit `holder` and check that
    `work` finished without an error."""
    errors: list[BaseException] = []

    def run() -> None:
        try:
            work()
        except BaseException as exc:  # reported by the assertion below
            errors.append(exc)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    try:
        pid = waiter.info.backend_pid
        waiting = wait_for(lambda: _waiting_query(watch, pid), 10, what="a wait for a lock")
        while_waiting(pid, waiting)
    finally:
        holder.commit()
        thread.join(10)
    assert not thread.is_alive() and not errors, errors


def _expect_in(fragment: str, statement: str) -> None:
    assert fragment in statement, statement


def _moved_to(conn: psycopg.Connection, site: Site) -> UUID:
    """A second location of the site's organisation (a +05:30 zone), committed."""
    loc = places.create_location(conn, org=site.org, loc=places.LocationInput(
        name="moved", tz_name="Asia/Kolkata", lat=28.6, lon=77.2, elev=216.0))
    conn.commit()
    return loc


def test_concurrent_batches_of_one_device_wait_only_at_the_end(
        conn: psycopg.Connection, database_url: str) -> None:
    """Two batches of the same device (two shards): the second writes its readings while the
    first is still open and waits only at its closing statements (marks, device row)."""
    make_site(conn)
    writer.prepare(conn)
    # An earlier reading, committed: its chunk exists (creating a chunk is a lock of its own,
    # taken once per chunk interval, not per batch).
    writer.write_batch(conn, [_readings("A1", now_slot(65))])
    conn.commit()
    first = _readings("A1", now_slot(60), now_slot(55))
    second = _readings("A1", now_slot(50), now_slot(45))
    with psycopg.connect(database_url) as other, psycopg.connect(database_url,
                                                                autocommit=True) as watch:
        writer.prepare(other)
        writer.write_batch(conn, [first])  # open, uncommitted

        def second_batch() -> None:
            writer.write_batch(other, [second])
            other.commit()

        def at_its_closing_statements(pid: int, waiting: str) -> None:
            assert "rollup_dirty" in waiting or "UPDATE devices" in waiting, waiting
            # Its readings went in before it waited: it holds calibrated's insert lock.
            assert _count(watch, "SELECT count(*) FROM pg_locks WHERE pid = %s AND granted"
                          " AND mode = 'RowExclusiveLock' AND relation = 'calibrated'::regclass",
                          pid) == 1

        _waits_until_commit(conn, other, second_batch, watch, at_its_closing_statements)
    assert _count(conn, "SELECT count(*) FROM calibrated WHERE device = 'A1'") == 5


def test_a_deployment_change_waits_for_an_open_batch_and_relabels_its_rows(
        conn: psycopg.Connection, database_url: str) -> None:
    """A batch holds its device row (KEY SHARE) until it commits: a move of the device
    (deploy_device, FOR UPDATE) waits for it and then relabels the batch's readings."""
    site = make_site(conn)
    t = now_slot(30)
    writer.prepare(conn)
    writer.write_batch(conn, [_readings("A1", t)])  # labelled with the old location, open
    with psycopg.connect(database_url) as mover, psycopg.connect(database_url,
                                                                autocommit=True) as watch:
        new_loc = _moved_to(mover, site)

        def move() -> None:
            places.deploy_device(mover, device="A1", location=new_loc, start=t)
            mover.commit()

        _waits_until_commit(conn, mover, move, watch,
                            lambda _pid, waiting: _expect_in("FOR UPDATE", waiting))
    assert conn.execute("SELECT location FROM calibrated WHERE device = 'A1'").fetchone() == (
        new_loc,)


def test_a_batch_after_an_open_deployment_change_sees_the_new_location(
        conn: psycopg.Connection, database_url: str) -> None:
    """The other order: a move holds the device row until it commits; a batch that starts
    meanwhile waits at its KEY SHARE and labels its readings with the new location."""
    site = make_site(conn)
    t = now_slot(30)
    new_loc = _moved_to(conn, site)
    places.deploy_device(conn, device="A1", location=new_loc, start=t - timedelta(hours=1))
    with psycopg.connect(database_url) as ingest, psycopg.connect(database_url,
                                                                 autocommit=True) as watch:
        writer.prepare(ingest)

        def batch() -> None:
            writer.write_batch(ingest, [_readings("A1", t)])
            ingest.commit()

        _waits_until_commit(conn, ingest, batch, watch,
                            lambda _pid, waiting: _expect_in("FOR KEY SHARE", waiting))
    assert conn.execute("SELECT location FROM calibrated WHERE device = 'A1'").fetchone() == (
        new_loc,)


def test_stored_values_are_the_python_rounding_of_the_values_as_sent(
        conn: psycopg.Connection) -> None:
    """The insert rounds in the database (float8 `round`, half to even): every stored value,
    sent or derived, equals round(v * 10^n) / 10^n in Python stored as its column's type,
    for random values and for values a half step from a boundary."""
    make_site(conn)
    rng = random.Random(7)
    inputs = [c for c in READING_INPUTS if c.valid_range is not None]
    sent: dict[datetime, dict[str, float]] = {}
    for k in range(200):
        values: dict[str, float] = {}
        for col in inputs:
            lo, hi = col.valid_range
            step = 10.0 ** -stored_decimals(col)
            v = rng.uniform(lo, hi)
            if k % 2:  # a half step: where rounding half to even and half up differ
                v = min(hi, max(lo, (math.floor(v / step) + 0.5) * step))
            values[col.name] = v
        sent[now_slot(5 * (k + 1))] = values
    body = json.dumps([{"time": iso(t), **v} for t, v in sent.items()]).encode()
    writer.prepare(conn)
    with conn.transaction():
        assert writer.write_batch(conn, [handle("sensors/A1/readings", body)]).stored == 200
    names = [c.name for c in inputs] + list(derive.DERIVED)
    # ::float8: every bit of the stored value (a real's text form is its shortest decimal).
    rows = conn.execute(sql.SQL("SELECT time, {} FROM calibrated WHERE device = 'A1'").format(
        sql.SQL(", ").join(sql.SQL("{}::float8").format(sql.Identifier(n))
                           for n in names))).fetchall()
    assert len(rows) == 200
    for t, *stored in rows:
        as_sent = sent[t]
        expected = {**as_sent, **derive.derive(as_sent, ELEV)}
        for name, got in zip(names, stored, strict=True):
            col = TABLES["calibrated"].column(name)
            p = float(10 ** stored_decimals(col))
            want = round(expected[name] * p) / p
            if col.dtype == "real":  # the float4 nearest the rounded double
                want = struct.unpack("f", struct.pack("f", want))[0]
            assert got == want, (name, expected[name], got, want)
