"""What one device (or one broker account) can make the service store (issue 30 section 4).

The issue: one device published 604 junk messages of 2 MiB on `sensors/<dev>/junk` at QoS 1, all
acknowledged in 17 s, and the quarantine kept every byte (1.31 GB, 77 MB/s). On the shipped
broker config (the template, the ACL, durable.conf and the plugin of this tree) and real
PostgreSQL:

- a publish above the broker's limit (the largest legitimate message plus 4 KiB) is refused by
  the broker: the publisher gets no PUBACK and is disconnected (MQTT 5: reason 0x95);
- an allowed but large junk payload is kept as a bounded prefix, its size and SHA-256;
- a flood of junk from one device grows the quarantine by at most its budget, while another
  device's QoS 1 ledger published at the same time is stored whole, and the rejections past the
  budget are counted by device and reason, with the metric naming the device;
- an organisation's alert-reader account cannot publish at all.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import threading
import time
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import paho.mqtt.client as mqtt
import psycopg
import pytest
from click.testing import CliRunner
from paho.mqtt.properties import Properties

from admin.cli import main as sds_cli
from ingest import quarantine, writer
from ingest.handler import handle
from ingest.payload import fields_of
from ingest.quarantine import Budget
from ingest.topics import READINGS
from shared.config import Settings
from testbed.mosquitto import MosquittoBroker, conf_settings, shipped_durable_conf
from tests.support.figures import Figures
from tests.support.ingesting import (
    Ledger,
    RunningIngester,
    build_plugin,
    iso,
    make_site,
    now_slot,
    wait_for,
)
from tests.support.rabbit import NODE_TEMPLATE, RabbitCluster, log_has

JUNK, GOOD = "J000001", "G000001"
READER = f"alerts-{uuid.uuid4()}"
USERS = {"ingester": "ingester-pw", JUNK: "pw-junk", GOOD: "pw-good", READER: "pw-reader"}
MIB = 1024 * 1024
WEEK = 2016  # 5-minute readings in a week: the largest backlog one message carries (docs/ingest.md)
DEFAULTS = Settings()
# The broker's packet limit this file holds the shipped config to: 1.5 MiB of payload (the
# largest legitimate message, 1,393,056 bytes, with room for indentation) plus 4 KiB.
PACKET_LIMIT = 1536 * 1024 + 4096
# Page granularity: the last page of each of the table's relations (heap, TOAST heap and index,
# five indexes, the bookkeeping tables and their keys) may be new, plus the free-space maps.
PAGE_SLACK = 256 * 1024


def largest_message() -> bytes:
    """The largest legitimate message: a week of readings, every field of the registry in the
    longest form a JSON encoder writes a double (shortest round trip, 24 characters), the
    optional device field at its 64-character maximum, a time with microseconds and an offset,
    Python's default separators."""
    reading: dict[str, object] = {"time": "2024-07-01T12:05:00.000000+00:00", "device": "A" * 64}
    reading |= {name: -1.2345678901234567e-300 for name in fields_of(READINGS)}
    return json.dumps([reading] * WEEK).encode()


def test_max_payload_is_the_largest_legitimate_message() -> None:
    """SDS_INGEST_MAX_PAYLOAD is the largest legitimate message with a margin under 15 % (room
    for a pretty-printer's indentation), and the shipped broker's max_packet_size is that plus
    4 KiB (topic and properties). Before: 2 MiB, 51 % above anything a device needs to send."""
    message = largest_message()
    size = len(message)
    assert size == 1_393_056  # the figure in docs/ingest.md and durable.conf
    assert size <= DEFAULTS.ingest_max_payload <= size * 1.15
    assert len(json.dumps(json.loads(message), indent=2)) <= DEFAULTS.ingest_max_payload
    assert Budget().payload_max == DEFAULTS.ingest_quarantine_payload_max
    durable = conf_settings(shipped_durable_conf())
    assert int(durable["max_packet_size"]) == DEFAULTS.ingest_max_payload + 4096 == PACKET_LIMIT


def _hour_ago(now: datetime, *, days: int) -> datetime:
    return (now - timedelta(days=days)).replace(minute=0, second=0, microsecond=0)


def test_budget_keeps_what_fits_and_counts_the_rest(
    conn: psycopg.Connection, database_url: str,
) -> None:
    """The write path alone: a device's rows are kept while their cost fits its hourly budget,
    the rest counted by reason in quarantine_unkept (and in the batch's result by device);
    another device's budget is its own; the total over the window bounds too; `sds quarantine
    stats` shows what was not kept, purging the device gives its budget back, and the retention
    deletes the bookkeeping of hours past SDS_QUARANTINE_RETENTION_DAYS."""
    make_site(conn, device=JUNK)
    make_site(conn, device=GOOD)
    now = datetime.now(UTC)
    junk = [handle(f"sensors/{JUNK}/junk", os.urandom(1000), received=now) for _ in range(10)]
    bad_json = handle(f"sensors/{JUNK}/readings", b"{" * 500, received=now)
    other = handle(f"sensors/{GOOD}/junk", b"y" * 1000, received=now)
    one = quarantine.cost(100, junk[0].decoded.rejections[0].detail, junk[0].topic)
    budget = Budget(payload_max=100, hourly=4 * one + one // 2, total=0)
    result = writer.write_batch(conn, [*junk, bad_json, other], budget)
    conn.commit()
    assert result.quarantine_rows == {JUNK: 4, GOOD: 1}
    assert result.quarantine_unkept == {JUNK: 7}
    assert conn.execute("SELECT reason, rejections, bytes FROM quarantine_unkept WHERE device"
                        " = %s ORDER BY reason", (JUNK,)).fetchall() == [
        ("bad_json", 1, 500), ("bad_topic", 6, 6000)]
    assert conn.execute("SELECT kept_rows, kept_bytes FROM quarantine_budget WHERE device = %s",
                        (JUNK,)).fetchone() == (4, 4 * one)
    assert conn.execute("SELECT max(octet_length(payload)) FROM quarantine").fetchone() == (100,)
    # Over the window: a total of two rows' cost keeps nothing more of a device that spent it.
    again = writer.write_batch(conn, [handle(f"sensors/{GOOD}/junk", b"z" * 1000,
                                             received=now) for _ in range(3)],
                               Budget(payload_max=100, hourly=10 * one, total=2 * one + 10))
    conn.commit()
    assert again.quarantine_rows == {GOOD: 1} and again.quarantine_unkept == {GOOD: 2}

    # The hourly retention takes the bookkeeping with the rows it accounts for.
    old_hour = _hour_ago(now, days=40)
    conn.execute("INSERT INTO quarantine_budget (device, hour, kept_rows, kept_bytes)"
                 " VALUES (%s, %s, 1, 1)", (JUNK, old_hour))
    conn.execute("INSERT INTO quarantine_unkept (device, hour, reason, rejections, bytes)"
                 " VALUES (%s, %s, 'bad_json', 1, 1)", (JUNK, old_hour))
    conn.commit()
    conn.autocommit = True
    quarantine.retention_pass(conn, 30)
    conn.autocommit = False
    assert conn.execute("SELECT count(*) FROM quarantine_budget WHERE hour = %s",
                        (old_hour,)).fetchone() == (0,)
    assert conn.execute("SELECT count(*) FROM quarantine_unkept WHERE hour = %s",
                        (old_hour,)).fetchone() == (0,)

    env = {"SDS_DATABASE_URL": database_url}
    out = CliRunner().invoke(sds_cli, ["quarantine", "stats"], env=env, catch_exceptions=False)
    assert out.exit_code == 0 and "Not kept" in out.output
    assert any(line.split()[:3] == [JUNK, "bad_topic", "6"] for line in out.output.splitlines())
    CliRunner().invoke(sds_cli, ["quarantine", "purge", "--older-than-days", "0", "--device",
                                 JUNK], env=env, catch_exceptions=False)
    conn.rollback()
    assert conn.execute("SELECT count(*) FROM quarantine_budget WHERE device = %s",
                        (JUNK,)).fetchone() == (0,)  # given back ...
    assert conn.execute("SELECT count(*) FROM quarantine_unkept WHERE device = %s",
                        (JUNK,)).fetchone() == (2,)  # ... and the counts stay


# ---- on the shipped broker -------------------------------------------------------------------


@pytest.fixture
def shipped(tmp_path: Path) -> Iterator[MosquittoBroker]:
    """The shipped template, ACL and durable.conf, with this tree's plugin."""
    broker = MosquittoBroker().start(tmp_path / "mq", users=USERS, shipped_template=True,
                                     durable=True, plugin=build_plugin(tmp_path))
    try:
        yield broker
    finally:
        broker.cleanup()


def _settings(settings: Settings, broker: MosquittoBroker) -> Settings:
    return settings.replace(mqtt_host="127.0.0.1", mqtt_port=broker.port,
                            mqtt_username="ingester", mqtt_password=USERS["ingester"],
                            mqtt_client_id="ingester", topic_prefix="sensors",
                            ingest_flush_interval=0.1)


class Device:
    """A device's MQTT 5 connection that records what the broker told it."""

    def __init__(self, broker: MosquittoBroker, user: str) -> None:
        self.disconnects: list[int] = []
        self.connack: dict[str, object] = {}
        self.client = mqtt.Client(mqtt.CallbackAPIVersion.VERSION2, client_id=user,
                                  protocol=mqtt.MQTTv5)
        self.client.username_pw_set(user, USERS[user])
        self.client.reconnect_delay_set(3600, 3600)  # a refused publish is not resent here
        self.client.on_connect = self._on_connect
        self.client.on_disconnect = self._on_disconnect
        self.client.connect("127.0.0.1", broker.port, clean_start=True)
        self.client.loop_start()
        wait_for(self.client.is_connected, 10, what=f"{user} connect")

    def _on_connect(self, _c: object, _u: object, _f: object, _rc: object,
                    props: Properties | None = None) -> None:
        self.connack = props.json() if props is not None else {}

    def _on_disconnect(self, _c: object, _u: object, _f: object, rc: mqtt.ReasonCode,
                       _p: object = None) -> None:
        self.disconnects.append(rc.value)

    def publish(self, topic: str, body: bytes, timeout: float = 30.0) -> mqtt.MQTTMessageInfo:
        info = self.client.publish(topic, body, qos=1)
        try:
            info.wait_for_publish(timeout)
        except (RuntimeError, ValueError):
            pass
        return info

    def close(self) -> None:
        self.client.disconnect()
        self.client.loop_stop()


def _scalar(conn: psycopg.Connection, query: str, *args: object) -> int:
    conn.rollback()
    row = conn.execute(query, args).fetchone()
    return int(row[0]) if row and row[0] is not None else 0


def _size(conn: psycopg.Connection) -> int:
    """Bytes of the quarantine and its bookkeeping on disk: tables, TOAST, indexes."""
    return _scalar(conn, "SELECT pg_total_relation_size('quarantine')"
                   " + pg_total_relation_size('quarantine_budget')"
                   " + pg_total_relation_size('quarantine_unkept')")


def test_oversized_publish_is_refused_by_the_broker(
    conn: psycopg.Connection, settings: Settings, shipped: MosquittoBroker, figures: Figures,
) -> None:
    """A publish above max_packet_size gets no PUBACK and costs its device the connection (MQTT
    5: DISCONNECT 0x95 Packet too large, the limit announced in the CONNACK); nothing reaches
    the ingester. A publish of exactly SDS_INGEST_MAX_PAYLOAD is acknowledged and quarantined."""
    make_site(conn, device=JUNK)
    run = RunningIngester(_settings(settings, shipped)).start()
    try:
        limit = PACKET_LIMIT
        dev = Device(shipped, JUNK)
        try:
            announced = dev.connack.get("MaximumPacketSize")
            refused = dev.publish(f"sensors/{JUNK}/junk", os.urandom(limit), timeout=10)
            wait_for(lambda: dev.disconnects, 10, what="the broker disconnecting the device")
        finally:
            dev.close()
        reason = dev.disconnects[0]
        assert not refused.is_published()  # no PUBACK: the device knows it was not taken
        # Packet too large (0x95); or, when the broker closes the socket while the client is
        # still writing the 1.5 MiB, the client sees the connection drop before it reads the
        # DISCONNECT (paho's 0x80; seen once on a loaded machine). Refused either way.
        assert reason in (0x95, 0x80)
        assert announced == limit
        assert f"as {JUNK}" in shipped.log_text()

        dev = Device(shipped, JUNK)
        try:
            allowed = dev.publish(f"sensors/{JUNK}/junk", os.urandom(settings.ingest_max_payload))
        finally:
            dev.close()
        assert allowed.is_published()
        wait_for(lambda: _scalar(conn, "SELECT count(*) FROM quarantine WHERE device = %s",
                                 JUNK) == 1, 30, what="the allowed message quarantined")
        assert _scalar(conn, "SELECT max(payload_bytes) FROM quarantine WHERE device = %s",
                       JUNK) == settings.ingest_max_payload  # only the allowed one arrived
    finally:
        run.stop()
    figures.record("security.broker_size_limit", {
        "largest legitimate message bytes": len(largest_message()),
        "SDS_INGEST_MAX_PAYLOAD": settings.ingest_max_payload, "max_packet_size": limit,
        "oversized acked": int(refused.is_published()),
        "publisher's disconnect reason": hex(reason),
        "allowed acked": int(allowed.is_published())},
        section="security",
        title="Broker message size limit: a publish of max_packet_size bytes, then one of "
              "SDS_INGEST_MAX_PAYLOAD, on the shipped broker",
        target="oversized: no PUBACK, DISCONNECT 0x95; allowed: acked and quarantined",
        source="tests/ingest/test_quarantine_budget.py")


def test_large_junk_is_kept_as_a_bounded_prefix(
    conn: psycopg.Connection, settings: Settings, shipped: MosquittoBroker,
) -> None:
    """A 1 MiB junk payload on `sensors/<dev>/junk` is one quarantine row keeping the first
    SDS_INGEST_QUARANTINE_PAYLOAD_MAX bytes, the size as received and the SHA-256 of the whole;
    a small one is kept whole."""
    make_site(conn, device=JUNK)
    big, small = os.urandom(MIB), b"not json"
    run = RunningIngester(_settings(settings, shipped)).start()
    try:
        dev = Device(shipped, JUNK)
        try:
            assert dev.publish(f"sensors/{JUNK}/junk", big).is_published()
            assert dev.publish(f"sensors/{JUNK}/readings", small).is_published()
        finally:
            dev.close()
        wait_for(lambda: _scalar(conn, "SELECT count(*) FROM quarantine WHERE device = %s",
                                 JUNK) == 2, 30, what="two quarantine rows")
    finally:
        run.stop()
    conn.rollback()
    rows = conn.execute(
        "SELECT reason, payload, payload_bytes, payload_sha256 FROM quarantine"
        " WHERE device = %s ORDER BY payload_bytes DESC", (JUNK,)).fetchall()
    (reason, payload, size, digest), (reason2, payload2, size2, digest2) = rows
    keep = settings.ingest_quarantine_payload_max
    assert (reason, bytes(payload), size, bytes(digest)) == (
        "bad_topic", big[:keep], MIB, hashlib.sha256(big).digest())
    assert (reason2, bytes(payload2), size2, bytes(digest2)) == (
        "bad_json", small, len(small), hashlib.sha256(small).digest())


def test_junk_flood_is_bounded_and_other_ledgers_stay_whole(
    conn: psycopg.Connection, settings: Settings, shipped: MosquittoBroker, figures: Figures,
) -> None:
    """The issue's flood at the shipped limits: 400 junk messages of SDS_INGEST_MAX_PAYLOAD
    (incompressible) at QoS 1 from one device, while another device publishes a 300-reading QoS
    1 ledger. The quarantine grows by at most the device's hourly budget (per clock hour the
    flood touched) plus page slack; the rest is counted in quarantine_unkept by reason and in
    sds_ingest_quarantine_unkept_total{device}; every acknowledged reading of the other device
    is stored."""
    make_site(conn, device=GOOD)
    make_site(conn, device=JUNK)
    s = _settings(settings, shipped)
    budget = Budget.from_settings(s)
    flood_n, ledger_n = 400, 300
    junk = os.urandom(PACKET_LIMIT - 4096)  # SDS_INGEST_MAX_PAYLOAD
    size_before = _size(conn)
    wal_before = conn.execute("SELECT pg_current_wal_lsn()").fetchone()[0]  # type: ignore[index]
    run = RunningIngester(s).start()
    t0 = now_slot(60 * 24 * 3)
    times = [t0 - timedelta(minutes=5 * i) for i in range(ledger_n)]
    acked_readings: list[datetime] = []
    acked_junk = 0
    hours = {datetime.now(UTC).replace(minute=0, second=0, microsecond=0)}

    def ledger() -> None:
        pub = Ledger("127.0.0.1", shipped.port, client_id=GOOD, username=GOOD,
                     password=USERS[GOOD])
        try:
            for i, t in enumerate(times):
                body = json.dumps({"time": iso(t), "tair": 10.0 + i % 7}).encode()
                if pub.publish(f"sensors/{GOOD}/readings", body, timeout=30):
                    acked_readings.append(t)
                time.sleep(0.01)
        finally:
            pub.close()

    try:
        good = threading.Thread(target=ledger)
        started = time.monotonic()
        good.start()
        dev = Device(shipped, JUNK)
        try:
            # 20 in flight (mosquitto's window), not all 400 built in this process at once.
            pending: list[mqtt.MQTTMessageInfo] = []
            for i in range(flood_n + 20):
                if i < flood_n:
                    pending.append(dev.client.publish(f"sensors/{JUNK}/junk", junk, qos=1))
                if len(pending) >= 20 or (i >= flood_n and pending):
                    info = pending.pop(0)
                    deadline = time.monotonic() + 120
                    while not info.is_published() and time.monotonic() < deadline:
                        # A broker that drops the device fails the test here, not in a hang.
                        assert not dev.disconnects, f"junk device disconnected: {dev.disconnects}"
                        info.wait_for_publish(0.5)
                    acked_junk += info.is_published()
        finally:
            dev.close()
        flood_s = time.monotonic() - started
        good.join(120)
        wait_for(lambda: run.metric("sds_ingest_messages_acked_total")
                 >= flood_n + len(acked_readings), 120, every=0.2,
                 what="every message committed and acked")
        hours.add(datetime.now(UTC).replace(minute=0, second=0, microsecond=0))
        conn.rollback()
        stored = {r[0] for r in conn.execute(
            "SELECT time FROM calibrated WHERE device = %s", (GOOD,))}
        unkept_metric = run.metric("sds_ingest_quarantine_unkept_total", {"device": JUNK})
    finally:
        run.stop()
    growth = _size(conn) - size_before
    wal = _scalar(conn, "SELECT pg_current_wal_lsn() - %s::pg_lsn", str(wal_before))
    bound = budget.hourly * len(hours) + PAGE_SLACK
    assert acked_junk == flood_n  # junk is acknowledged (counted), never left for redelivery
    assert len(acked_readings) == ledger_n and set(acked_readings) <= stored  # ledger whole
    assert growth <= bound, f"quarantine grew {growth} bytes, bound {bound}"
    kept = _scalar(conn, "SELECT count(*) FROM quarantine WHERE device = %s", JUNK)
    kept_cost = _scalar(conn, "SELECT sum(kept_bytes) FROM quarantine_budget WHERE device = %s",
                        JUNK)
    unkept = _scalar(conn, "SELECT sum(rejections) FROM quarantine_unkept WHERE device = %s"
                     " AND reason = 'bad_topic'", JUNK)
    unkept_bytes = _scalar(conn, "SELECT sum(bytes) FROM quarantine_unkept WHERE device = %s",
                           JUNK)
    figures.record("security.junk_flood", {
        "messages": flood_n, "MiB published": round(flood_n * len(junk) / MIB),
        "acked": acked_junk, "seconds": round(flood_s, 1), "rows kept": kept,
        "rows counted, not kept": unkept, "MiB counted, not kept": round(unkept_bytes / MIB),
        "quarantine growth KiB": round(growth / 1024), "budget KiB": budget.hourly // 1024,
        "budget spent KiB": round(kept_cost / 1024), "WAL MiB": round(wal / MIB, 1),
        "ledger acked": len(acked_readings),
        "ledger missing": len(set(acked_readings) - stored)},
        section="security",
        title="Junk flood (issue 30: 604 x 2 MiB on sensors/<dev>/junk added 1.31 GB to the "
              "quarantine in 17 s): one device, SDS_INGEST_MAX_PAYLOAD each, incompressible, "
              "beside a 300-reading QoS 1 ledger of another device",
        target="quarantine growth <= hourly budget (per clock hour touched) + 256 KiB of pages; "
               "the rest counted by device and reason; ledger missing 0",
        source="tests/ingest/test_quarantine_budget.py")
    assert kept + unkept == flood_n  # every junk message kept or counted: none silently lost
    assert unkept > 0 and unkept_metric == unkept  # the alarm's counter names the device
    assert kept_cost <= budget.hourly * len(hours)
    # What the budget charges a row covers what the row really takes on disk.
    assert growth <= kept_cost + PAGE_SLACK


def test_alert_reader_cannot_publish(
    conn: psycopg.Connection, settings: Settings, shipped: MosquittoBroker,
) -> None:
    """An organisation's alert-reader account (alerts-<uuid>) may only read its alerts: its
    publish under sensors/alerts-<uuid>/ is refused by the broker plugin (MQTT 5 PUBACK 0x87)
    and never reaches the quarantine. Before, the acl_file's `pattern write sensors/%u/#` let it
    fill the quarantine like a device."""
    make_site(conn, device=GOOD)
    run = RunningIngester(_settings(settings, shipped)).start()
    refused: list[int] = []
    try:
        reader = Device(shipped, READER)
        reader.client.on_publish = lambda _c, _u, _mid, rc, _p: refused.append(rc.value)
        try:
            info = reader.publish(f"sensors/{READER}/junk", b"x" * 1000)
            assert info.is_published()  # the broker answered the publish ...
            wait_for(lambda: refused, 10, what="the PUBACK")
        finally:
            reader.close()
        assert refused == [0x87]  # ... with Not authorized
        # A device's message after it is quarantined; the reader's never is.
        dev = Device(shipped, GOOD)
        try:
            assert dev.publish(f"sensors/{GOOD}/junk", b"marker").is_published()
        finally:
            dev.close()
        wait_for(lambda: _scalar(conn, "SELECT count(*) FROM quarantine WHERE device = %s",
                                 GOOD) == 1, 30, what="the device's marker quarantined")
        assert _scalar(conn, "SELECT count(*) FROM quarantine WHERE topic LIKE %s",
                       "sensors/alerts-%") == 0
        assert "alert readers may not publish" in shipped.log_text()
    finally:
        run.stop()


@pytest.mark.usefixtures("processes")
def test_rabbitmq_refuses_what_mosquitto_refuses() -> None:
    """The RabbitMQ cluster profile's limit (max_message_size) is mosquitto's, and a one-node
    broker of that profile refuses an MQTT 3.1.1 publish above it: no PUBACK, the refusal in
    its log (RabbitMQ 3.10 closes the connection's channel, not the connection: nothing more of
    that connection is acknowledged until the device reconnects, docs/security.md). A publish
    of SDS_INGEST_MAX_PAYLOAD on a new connection is acknowledged."""
    found = re.search(r"^max_message_size\s*=\s*(\d+)$", NODE_TEMPLATE.read_text(), re.M)
    assert found
    limit = int(found.group(1))
    assert limit == int(conf_settings(shipped_durable_conf())["max_packet_size"])
    cluster = RabbitCluster(size=1).start()

    def device() -> mqtt.Client:
        c = mqtt.Client(mqtt.CallbackAPIVersion.VERSION2, client_id=JUNK,
                        protocol=mqtt.MQTTv311)
        c.username_pw_set(JUNK, USERS[JUNK])
        c.connect("127.0.0.1", cluster.mqtt_ports[0])
        c.loop_start()
        wait_for(c.is_connected, 30, what="device connect")
        return c

    try:
        cluster.provision(ingester=("ingester", "ing-pw"), devices={JUNK: USERS[JUNK]})
        c = device()
        try:
            big = c.publish(f"sensors/{JUNK}/junk", os.urandom(limit + 1), qos=1)
            wait_for(lambda: log_has(cluster, f"message size {limit + 1} is larger than"
                                     f" configured max size {limit}"), 60,
                     what="the broker's refusal")
            assert not big.is_published()
        finally:
            c.disconnect()
            c.loop_stop()
        c = device()
        try:
            ok = c.publish(f"sensors/{JUNK}/junk", os.urandom(DEFAULTS.ingest_max_payload), qos=1)
            ok.wait_for_publish(60)
            assert ok.is_published()
        finally:
            c.disconnect()
            c.loop_stop()
    finally:
        cluster.cleanup()
