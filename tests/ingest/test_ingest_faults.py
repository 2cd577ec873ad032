"""Smaller fault cases in-process: a poisoned message, a lost broker session, the metrics
endpoint, a device moved while readings arrive."""

from __future__ import annotations

import json
import urllib.request
from datetime import timedelta
from pathlib import Path

import psycopg
import pytest

from ingest.committer import retry_later
from shared import places
from shared.config import Settings
from testbed.mosquitto import MosquittoBroker
from testbed.process import free_port
from tests.support.ingesting import (
    Ledger,
    RunningIngester,
    Site,
    iso,
    make_site,
    now_slot,
    wait_for,
)


def count(conn: psycopg.Connection, query: str, *args: object) -> int:
    conn.rollback()
    return int(conn.execute(query, args).fetchone()[0])


def test_message_the_database_refuses_is_quarantined_and_neighbours_stored(
    conn: psycopg.Connection, site: Site, mqtt_settings: Settings, ingester: RunningIngester,
    publisher: Ledger,
) -> None:
    """A non-transient database error must not stall the ingester: the batch is retried
    message by message and the poisoned one is kept as db_rejected."""
    conn.execute("""
        CREATE FUNCTION refuse_666() RETURNS trigger LANGUAGE plpgsql AS $$
        BEGIN
            IF NEW.tair > 66 THEN RAISE EXCEPTION 'tair 66.6 refused by a test trigger'; END IF;
            RETURN NEW;
        END $$;
        CREATE TRIGGER refuse_666 BEFORE INSERT ON calibrated
            FOR EACH ROW EXECUTE FUNCTION refuse_666();
    """)
    conn.commit()
    t0 = now_slot(10)
    topic = f"{mqtt_settings.topic_prefix}/A1/readings"
    bodies = [{"time": iso(t0 - timedelta(minutes=5 * i)), "tair": 66.6 if i == 2 else 10.0}
              for i in range(5)]
    for body in bodies:
        assert publisher.publish(topic, json.dumps(body).encode())
    wait_for(lambda: count(conn, "SELECT count(*) FROM calibrated") == 4, what="4 good rows")
    wait_for(lambda: count(conn, "SELECT count(*) FROM quarantine WHERE reason = 'db_rejected'"),
             what="db_rejected row")
    detail = conn.execute("SELECT detail FROM quarantine").fetchone()[0]
    assert "refused by a test trigger" in detail
    wait_for(lambda: ingester.metric("sds_ingest_messages_acked_total") == 5, what="5 acks")
    # Still ingesting afterwards.
    assert publisher.publish(topic, json.dumps(
        {"time": iso(t0 - timedelta(hours=1)), "tair": 1.0}).encode())
    wait_for(lambda: count(conn, "SELECT count(*) FROM calibrated") == 5, what="next row")


def test_lost_broker_session_raises_the_alarm(
    conn: psycopg.Connection, site: Site, mqtt_settings: Settings, tmp_path: Path,
) -> None:
    """R11: a broker restarted without persistence forgets the session: session_present=0 on
    the reconnect is counted as an alarm; with persistence the session comes back."""
    broker = MosquittoBroker().start(tmp_path / "mqtt", durable=False)
    run = RunningIngester(mqtt_settings.replace(mqtt_port=broker.port)).start()
    try:
        assert run.metric("sds_ingest_session_unexpectedly_absent_total") == 0
        broker.restart()
        wait_for(lambda: run.metric("sds_ingest_connects_total") >= 2, 30, what="reconnect")
        assert run.metric("sds_ingest_session_unexpectedly_absent_total") == 1
        assert run.metric("sds_ingest_session_present") == 0
    finally:
        run.stop()
        broker.cleanup()
    durable = MosquittoBroker().start(tmp_path / "mqtt2", durable=True)
    run = RunningIngester(mqtt_settings.replace(mqtt_port=durable.port)).start()
    try:
        durable.restart()
        wait_for(lambda: run.metric("sds_ingest_connects_total") >= 2, 30, what="reconnect")
        assert run.metric("sds_ingest_session_unexpectedly_absent_total") == 0
        assert run.metric("sds_ingest_session_present") == 1
    finally:
        run.stop()
        durable.cleanup()


def test_metrics_endpoint_serves_counters(mqtt_settings: Settings) -> None:
    port = free_port()
    run = RunningIngester(mqtt_settings.replace(metrics_port=port))
    server = run.ingester.metrics.serve(port, "127.0.0.1")
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as resp:
            text = resp.read().decode()
        for name in ("sds_ingest_messages_received_total", "sds_ingest_duplicates_total",
                     "sds_ingest_batch_seconds_bucket", "sds_ingest_session_present"):
            assert name in text
    finally:
        assert server is not None
        server.shutdown()
        server.server_close()


def test_move_while_ingesting_labels_readings_with_the_new_location(
    conn: psycopg.Connection, site: Site, mqtt_settings: Settings, ingester: RunningIngester,
    publisher: Ledger,
) -> None:
    """Deployments are read in the batch's transaction: after a move, readings of the new range
    carry the new location at once (no cache to expire)."""
    topic = f"{mqtt_settings.topic_prefix}/A1/readings"
    t0 = now_slot(30)
    assert publisher.publish(topic, json.dumps({"time": iso(t0), "tair": 1.0}).encode())
    wait_for(lambda: count(conn, "SELECT count(*) FROM calibrated"), what="first row")
    new_loc = places.create_location(conn, org=site.org, loc=places.LocationInput(
        name="moved", tz_name="Asia/Kolkata", lat=28.6, lon=77.2, elev=216.0))
    places.deploy_device(conn, device="A1", location=new_loc, start=t0 + timedelta(minutes=5))
    conn.commit()
    assert publisher.publish(topic, json.dumps(
        {"time": iso(t0 + timedelta(minutes=10)), "tair": 2.0}).encode())
    wait_for(lambda: count(conn, "SELECT count(*) FROM calibrated") == 2, what="second row")
    rows = dict(conn.execute("SELECT tair, location FROM calibrated").fetchall())
    assert rows == {1.0: site.location, 2.0: new_loc}
    # The local buckets of the new reading follow the new zone (+05:30: half-hour boundaries).
    buckets = {r[0] for r in conn.execute(
        "SELECT bucket FROM rollup_dirty WHERE rollup = 'local_hourly'")}
    assert any(b.minute == 30 for b in buckets)


@pytest.mark.parametrize("second_org", [True])
def test_unknown_extra_fields_counted_not_fatal(
    conn: psycopg.Connection, site: Site, mqtt_settings: Settings, ingester: RunningIngester,
    publisher: Ledger, second_org: bool,
) -> None:
    make_site(conn, device="B7", org_name="Other Org")
    body = {"time": iso(now_slot(10)), "tair": 3.0, "colour": "red", "tdew": 1.0}
    assert publisher.publish(f"{mqtt_settings.topic_prefix}/B7/readings",
                             json.dumps(body).encode())
    wait_for(lambda: count(conn, "SELECT count(*) FROM calibrated WHERE device = 'B7'"),
             what="row")
    assert ingester.metric("sds_ingest_unknown_fields_total") == 2
    assert count(conn, "SELECT count(*) FROM quarantine") == 0


@pytest.mark.parametrize(("error", "later"), [
    (psycopg.errors.InsufficientPrivilege, True),  # a revoked grant: the setup, not the rows
    (psycopg.errors.UndefinedTable, True),
    (psycopg.errors.DiskFull, True),
    (psycopg.errors.AdminShutdown, True),
    (psycopg.errors.InternalError_, True),
    (psycopg.errors.NumericValueOutOfRange, False),  # the rows themselves
    (psycopg.errors.CheckViolation, False),
    (psycopg.errors.RaiseException, False),  # a trigger refusing a row
    (psycopg.errors.UntranslatableCharacter, False),
])
def test_errors_blaming_the_setup_are_retried_not_quarantined(error: type, later: bool) -> None:
    assert retry_later(error("probe")) is later


def test_revoked_insert_privilege_stalls_without_quarantining_good_readings(
    conn: psycopg.Connection, site: Site, mqtt_settings: Settings, ingester: RunningIngester,
    publisher: Ledger,
) -> None:
    """An operator's mistake (the ingester role lost INSERT on calibrated) must not send good
    readings to quarantine or ack them: the batch waits, and is stored once the grant is back."""
    assert mqtt_settings.db_roles, "the ingester must run as its least-privilege role here"
    conn.execute("REVOKE INSERT ON calibrated FROM sds_ingest")
    conn.commit()
    t0 = now_slot(10)
    topic = f"{mqtt_settings.topic_prefix}/A1/readings"
    for i in range(3):
        assert publisher.publish(topic, json.dumps(
            {"time": iso(t0 - timedelta(minutes=5 * i)), "tair": 10.0 + i}).encode())
    wait_for(lambda: ingester.metric("sds_ingest_db_errors_total") >= 2, 30,
             what="the refused batch retried")
    assert count(conn, "SELECT count(*) FROM quarantine") == 0
    assert count(conn, "SELECT count(*) FROM calibrated") == 0
    assert ingester.metric("sds_ingest_messages_acked_total") == 0
    conn.execute("GRANT INSERT ON calibrated TO sds_ingest")
    conn.commit()
    wait_for(lambda: count(conn, "SELECT count(*) FROM calibrated") == 3, 60,
             what="the held readings stored after the grant came back")
    wait_for(lambda: ingester.metric("sds_ingest_messages_acked_total") == 3, what="3 acks")
    assert count(conn, "SELECT count(*) FROM quarantine") == 0
