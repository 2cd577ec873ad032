"""`ingest.writer.write_batch` on its own: one batch of handled messages written in the
caller's transaction, without a broker or an ingester around it."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

import psycopg

from ingest import writer
from ingest.handler import handle
from tests.support.ingesting import Site, iso, make_site, now_slot


def _readings(device: str, *times: datetime, tair: float = 20.5) -> writer.Message:
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
