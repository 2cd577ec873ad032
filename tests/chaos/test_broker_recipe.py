"""The broker crash of issue 20 (items 6 and 7), replayed on the shipped broker.

The recipe: a device opens an MQTT 5 persistent session and disconnects; another device
publishes; the operator rotates the first device's password (`sds device rotate-password`, which
reloads the broker with SIGHUP while that session is offline); the first device connects with the
new password, clean start, and disconnects. On mosquitto 2.0.11 and on unpatched 2.0.21 every new
connection was then dropped about a second after CONNACK ("Expiring client ... due to timeout")
and the broker soon crashed: the reload's password check "disconnects" the offline session a
second time, which puts it in the session-expiry list twice, and the takeover frees it while one
entry still points at it (deploy/mosquitto/patches/session-expiry-once.patch, docs/decisions.md).

Whether the dangling entry hits a live client depends on the allocator handing the freed memory
to the next connection, which a busy broker does sooner or later. The broker under test runs
with glibc's per-thread cache off (GLIBC_TUNABLES=glibc.malloc.tcache_count=0) so that it does so
at once: on an unpatched broker the first new connection is then dropped within 2 s, every time
(measured on 2.0.11 and 2.0.21). Set SDS_UNPATCHED_MOSQUITTO to such a binary to run that
negative control here.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import paho.mqtt.client as mqtt
import psycopg
import pytest
from click.testing import CliRunner, Result
from paho.mqtt.packettypes import PacketTypes
from paho.mqtt.properties import Properties

from admin.cli import main
from ingest import shards
from shared.config import Settings
from testbed.mosquitto import MosquittoBroker
from tests.support.figures import Figures
from tests.support.ingesting import DEVICE as LEDGER_DEVICE
from tests.support.ingesting import (
    ROOT,
    Ledger,
    Run,
    RunningIngester,
    make_site,
    settings_env,
    stored_times,
    wait_for,
)

pytestmark = pytest.mark.chaos

# The freed session's memory goes to the next connection at once (see the module docstring).
REUSE_AT_ONCE = {"GLIBC_TUNABLES": "glibc.malloc.tcache_count=0"}
INGESTER_PW = "ingester-pw"
STAY = 3.0  # seconds each new connection must stay up (the drop came about 1-2 s after CONNACK)
PROBES = 6  # new connections after the recipe (the crash came "within a few connections")


class Probe:
    """One new client connection: when it got its CONNACK, whether the broker dropped it, and
    whether a QoS 1 publish sent during the second after CONNACK was acknowledged."""

    def __init__(self, port: int, user: str, password: str, *, v5: bool, clean: bool) -> None:
        self.connected = threading.Event()
        self.dropped_after: float | None = None
        self._t0 = 0.0
        self.client = mqtt.Client(mqtt.CallbackAPIVersion.VERSION2, client_id=user,
                                  protocol=mqtt.MQTTv5 if v5 else mqtt.MQTTv311,
                                  clean_session=None if v5 else clean)
        self.client.username_pw_set(user, password)
        self.client.on_connect = self._on_connect
        self.client.on_disconnect = self._on_disconnect
        self._closing = False
        if v5:
            props = Properties(PacketTypes.CONNECT)
            props.SessionExpiryInterval = 0 if clean else 900
            self.client.connect("127.0.0.1", port, clean_start=clean, properties=props)
        else:
            self.client.connect("127.0.0.1", port)
        self.client.loop_start()

    def _on_connect(self, _c: mqtt.Client, _u: object, _f: object, rc: object, _p: object) -> None:
        self._t0 = time.monotonic()
        self.connected.set()

    def _on_disconnect(self, *_args: object) -> None:
        if not self._closing and self.dropped_after is None:
            self.dropped_after = time.monotonic() - self._t0

    def publish_acked(self, topic: str) -> bool:
        info = self.client.publish(topic, b'{"probe": 1}', qos=1)
        try:
            info.wait_for_publish(3)
        except (RuntimeError, ValueError):
            return False
        return info.is_published()

    def close(self) -> None:
        self._closing = True
        self.client.disconnect()
        self.client.loop_stop()


def _probe(port: int, user: str, password: str, *, v5: bool, clean: bool) -> dict[str, object]:
    """Connect, publish once in the first second, stay STAY seconds; what happened."""
    p = Probe(port, user, password, v5=v5, clean=clean)
    try:
        if not p.connected.wait(5):
            return {"connected": False, "dropped_after": None, "acked": False}
        time.sleep(0.5)
        acked = p.publish_acked(f"sensors/{user}/health")
        time.sleep(STAY - 0.5)
        return {"connected": True, "dropped_after": p.dropped_after, "acked": acked}
    finally:
        p.close()


def _probes(broker: MosquittoBroker, logins: list[tuple[str, str]]) -> list[dict[str, object]]:
    """PROBES new connections, MQTT 5 and 3.1.1, clean and persistent, from these logins."""
    out = []
    for i in range(PROBES):
        user, password = logins[i % len(logins)]
        out.append(_probe(broker.port, user, password, v5=i % 2 == 0, clean=i % 3 != 2))
        if not broker.is_running():
            break
    return out


def _persistent_session(port: int, user: str, password: str, sub: str) -> None:
    """(a) an MQTT 5 persistent session (clean start off, expiry 900 s) that subscribed to
    `sub`, then disconnected. Whether the SUBSCRIBE is granted does not matter here."""
    c = mqtt.Client(mqtt.CallbackAPIVersion.VERSION2, client_id=user, protocol=mqtt.MQTTv5)
    c.username_pw_set(user, password)
    subscribed = threading.Event()
    c.on_subscribe = lambda *_a: subscribed.set()
    props = Properties(PacketTypes.CONNECT)
    props.SessionExpiryInterval = 900
    c.connect("127.0.0.1", port, clean_start=False, properties=props)
    c.loop_start()
    wait_for(c.is_connected, 5, what=f"{user} connect")
    c.subscribe(sub, qos=1)
    assert subscribed.wait(5), "no SUBACK"
    c.disconnect()
    c.loop_stop()


def _clean_start(port: int, user: str, password: str) -> None:
    """(d) connect with clean start (the old session is taken over and freed), disconnect."""
    c = mqtt.Client(mqtt.CallbackAPIVersion.VERSION2, client_id=user, protocol=mqtt.MQTTv5)
    c.username_pw_set(user, password)
    c.connect("127.0.0.1", port, clean_start=True)
    c.loop_start()
    wait_for(c.is_connected, 5, what=f"{user} clean-start connect")
    c.disconnect()
    c.loop_stop()


def _verdict(broker: MosquittoBroker, probes: list[dict[str, object]]) -> dict[str, object]:
    dropped = [p["dropped_after"] for p in probes if p["dropped_after"] is not None]
    return {
        "new connections": len(probes),
        "connected": sum(1 for p in probes if p["connected"]),
        "dropped within 3 s": len(dropped),
        "publishes acked in the first second": sum(1 for p in probes if p["acked"]),
        "'Expiring client' lines": broker.log_text().count("Expiring client"),
        "broker running": broker.is_running(),
    }


def _assert_held(v: dict[str, object]) -> None:
    assert v["broker running"] is True
    assert v["connected"] == v["new connections"] == PROBES
    assert v["dropped within 3 s"] == 0
    assert v["publishes acked in the first second"] == PROBES
    assert v["'Expiring client' lines"] == 0


# ---- the device recipe (item 7) -----------------------------------------------------------------

@pytest.fixture
def device_world(database_url: str, tmp_path: Path) -> Iterator[tuple[MosquittoBroker, Path]]:
    """The shipped broker (template, ACL, durable settings) with the ingester account and its
    pid file where `sds device` looks for it."""
    broker = MosquittoBroker().start(tmp_path / "mq", users={"ingester": INGESTER_PW},
                                     shipped_template=True, env=REUSE_AT_ONCE)
    (tmp_path / "mq" / "mosquitto.pid").write_text(f"{broker.pid}\n")
    try:
        yield broker, tmp_path / "mq" / "passwd"
    finally:
        broker.stop()


def _sds(database_url: str, broker: MosquittoBroker, *args: str) -> Result:
    # rotate-password logs in as the device to end its old session (shared/brokersession.py).
    env = {"SDS_DATABASE_URL": database_url, "SDS_MQTT_HOST": "127.0.0.1",
           "SDS_MQTT_PORT": str(broker.port)}
    return CliRunner().invoke(main, list(args), env=env, catch_exceptions=False)


def _new_password(r: Result) -> str:
    assert r.exit_code == 0, r.output
    assert "broker reloaded" in r.output, r.output
    words = next(x for x in r.output.splitlines() if x.startswith("mqtt username")).split()
    return words[words.index("password") + 1]


def test_rotation_recipe_keeps_the_broker_up(
    database_url: str, device_world: tuple[MosquittoBroker, Path], figures: Figures,
) -> None:
    broker, passwd = device_world
    assert _sds(database_url, broker, "org", "create", "Acme").exit_code == 0
    assert _sds(database_url, broker, "location", "create", "--org", "Acme", "--name", "North",
                "--tz", "UTC").exit_code == 0
    pw = {}
    for dev in ("R000001", "R000002"):
        pw[dev] = _new_password(_sds(
            database_url, broker, "device", "add", dev, "--org", "Acme", "--location", "North",
            "--from", "2024-01-01T00:00:00Z", "--mqtt-passwd-file", str(passwd)))

    # (a) the first device's persistent session, subscribed to the ingesters' group.
    _persistent_session(broker.port, "R000001", pw["R000001"],
                        f"$share/{shards.LEGACY_GROUP}/sensors/#")
    # (b) another device publishes a few readings.
    other = Ledger("127.0.0.1", broker.port, client_id="R000002", username="R000002",
                   password=pw["R000002"])
    try:
        assert all(other.publish("sensors/R000002/health", b'{"n": %d}' % i) for i in range(5))
    finally:
        other.close()
    # (c) the operator rotates the first device's password: SIGHUP while its session is offline.
    # Since issue 20 item 1 the command itself then logs in as the device with clean start to
    # end that session, i.e. it walks (d) too: on an unpatched broker the rotation alone crashes.
    pw["R000001"] = _new_password(_sds(database_url, broker, "device", "rotate-password",
                                       "R000001", "--mqtt-passwd-file", str(passwd)))
    time.sleep(0.5)
    # (d) the first device with its new password, clean start.
    _clean_start(broker.port, "R000001", pw["R000001"])

    v = _verdict(broker, _probes(broker, [("R000002", pw["R000002"]),
                                          ("R000001", pw["R000001"])]))
    figures.record("broker.rotation_recipe", v, section="delivery",
                   title="Broker after the rotation recipe of issue 20 item 7 (persistent "
                         "session, rotate-password reload while offline, clean start); "
                         "unpatched 2.0.11 and 2.0.21: first new connection dropped ~1.8 s "
                         "after CONNACK, then the broker hung",
                   target="0 dropped, broker running, 0 'Expiring client' lines",
                   source="tests/chaos/test_broker_recipe.py")
    _assert_held(v)


# ---- the ingesters' own sessions: a credential change and --retire ------------------------------

def test_shard_credential_change_and_retire_keep_the_broker_up(
    conn: psycopg.Connection, settings: Settings, database_url: str, tmp_path: Path,
    figures: Figures,
) -> None:
    device = LEDGER_DEVICE  # the ledger helpers (Run, stored_times) publish and count this one
    # P000001 probes afterwards: its own client id, so no probe takes over the publisher's.
    users = {"ingester": INGESTER_PW, "ingester-1": INGESTER_PW, "ingester-2": INGESTER_PW,
             device: "dev-pw", "P000001": "probe-pw"}
    broker = MosquittoBroker().start(tmp_path / "mq", users=users, shipped_template=True,
                                     env=REUSE_AT_ONCE)
    make_site(conn, device=device)
    s = settings.replace(mqtt_host="127.0.0.1", mqtt_port=broker.port,
                         mqtt_username="ingester", mqtt_password=INGESTER_PW,
                         mqtt_client_id="ingester", topic_prefix="sensors",
                         ingest_flush_interval=0.1, ingest_shards=2,
                         ingest_share_group="recipe-" + "g" * 24)
    one = RunningIngester(s.replace(ingest_shard=1)).start()
    two = RunningIngester(s.replace(ingest_shard=2)).start()
    pub = Ledger("127.0.0.1", broker.port, client_id=device, username=device,
                 password="dev-pw")
    run = Run(pub, f"sensors/{device}/readings", 60, 200).start()
    try:
        wait_for(run.done, 30, what="first readings published")
        # Shard 2 goes away; its persistent shared session stays on the broker, offline.
        two.stop()
        more = Run(pub, f"sensors/{device}/readings", 40, 200)
        more.times = [run.times[-1] - (run.times[0] - run.times[1]) * (i + 1) for i in range(40)]
        more.start()
        wait_for(more.done, 30, what="readings while shard 2 is away")
        # A credential change: shard 2's password is replaced and the broker reloaded.
        subprocess.run(["mosquitto_passwd", "-b", str(tmp_path / "mq" / "passwd"),
                        "ingester-2", "new-ingester-pw"], check=True, timeout=30)
        broker.signal(signal.SIGHUP)
        time.sleep(0.5)
        # `python -m ingest --retire` for shard 2 with the new password: it takes the offline
        # session over, drains what it queued and ends it.
        retire_log = tmp_path / "retire.log"
        env = settings_env(s.replace(ingest_shard=2, mqtt_password="new-ingester-pw"))
        with open(retire_log, "wb") as log:
            rc = subprocess.run([sys.executable, "-m", "ingest", "--retire"], cwd=ROOT, env=env,
                                stdout=log, stderr=log, timeout=120).returncode
        assert rc == 0, retire_log.read_text()
        assert "retired: session ingester-2 drained and ended" in retire_log.read_text()

        v = _verdict(broker, _probes(broker, [("P000001", "probe-pw"),
                                              ("ingester-2", "new-ingester-pw")]))
        acked = run.acked | more.acked
        wait_for(lambda: acked <= set(stored_times(database_url)), 30,
                 what="every acked reading stored")
        missing = len(acked - set(stored_times(database_url)))
    finally:
        pub.close()
        one.stop()
        if two.thread.is_alive():
            two.stop()
        broker.stop()
    v = {**v, "readings acked": len(acked), "missing": missing}
    figures.record("broker.shard_retire_recipe", v, section="delivery",
                   title="Broker after a shard's persistent shared session, a credential "
                         "change (SIGHUP while offline) and `python -m ingest --retire`",
                   target="0 dropped, broker running, 0 missing",
                   source="tests/chaos/test_broker_recipe.py")
    _assert_held(v)
    assert missing == 0


# ---- negative control: an unpatched broker -------------------------------------------------------

UNPATCHED = os.environ.get("SDS_UNPATCHED_MOSQUITTO", "")


@pytest.mark.skipif(not UNPATCHED, reason="SDS_UNPATCHED_MOSQUITTO (an unpatched mosquitto "
                    "binary, e.g. bookworm's 2.0.11) not set")
def test_unpatched_broker_drops_new_connections_after_the_recipe(tmp_path: Path) -> None:
    """The same recipe on an unpatched mosquitto: the first new connection is dropped ("Expiring
    client ... due to timeout"), which is what the patched broker above must not do."""
    users = {"ingester": INGESTER_PW, "R000001": "old", "R000002": "pw2"}
    broker = MosquittoBroker().start(tmp_path / "mq", users=users, shipped_template=True,
                                     env=REUSE_AT_ONCE, binary=UNPATCHED)
    try:
        _persistent_session(broker.port, "R000001", "old",
                            f"$share/{shards.LEGACY_GROUP}/sensors/#")
        subprocess.run(["mosquitto_passwd", "-b", str(tmp_path / "mq" / "passwd"), "R000001",
                        "new"], check=True, timeout=30)
        broker.signal(signal.SIGHUP)
        time.sleep(0.5)
        _clean_start(broker.port, "R000001", "new")
        first = _probe(broker.port, "R000002", "pw2", v5=True, clean=True)
        assert first["dropped_after"] is not None
        assert "Expiring client R000002 due to timeout" in broker.log_text()
    finally:
        broker.kill()


def test_broker_on_path_is_the_patched_build() -> None:
    """What services.sh and these tests run is setup.sh's build: 2.0.21 with our patch (the
    Debian version carries the +sds suffix), and mosquitto_passwd comes from the same build."""
    banner = subprocess.run(["mosquitto", "-h"], capture_output=True, text=True, timeout=10)
    assert banner.stdout.splitlines()[0] == "mosquitto version 2.0.21"
    setup = (ROOT / "deploy" / "setup.sh").read_text()
    suffix = next(line.split("=", 1)[1] for line in setup.splitlines()
                  if line.startswith("MQ_LOCAL_SUFFIX="))
    for package in ("mosquitto", "mosquitto-clients", "libmosquitto1"):
        version = subprocess.run(["dpkg-query", "-W", "-f=${Version}", package],
                                 capture_output=True, text=True, timeout=10).stdout
        assert version.startswith("2.0.21-") and version.endswith(suffix), (package, version)
    assert (ROOT / "deploy" / "mosquitto" / "patches" / "session-expiry-once.patch").exists()


def test_reuse_tunable_reaches_the_broker(tmp_path: Path) -> None:
    """The tests above rely on the broker process getting REUSE_AT_ONCE."""
    broker = MosquittoBroker().start(tmp_path / "mq", users={"ingester": INGESTER_PW},
                                     shipped_template=True, env=REUSE_AT_ONCE)
    try:
        environ = Path(f"/proc/{broker.pid}/environ").read_bytes().split(b"\0")
        assert b"GLIBC_TUNABLES=glibc.malloc.tcache_count=0" in environ
    finally:
        broker.stop()
