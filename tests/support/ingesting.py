"""Ingest test support: a registered, deployed device; MQTT settings isolated per test; an
in-process ingester; a subprocess ingester for kill tests; a QoS 1 publisher that records the
PUBACKed set; a paced ledger publisher (`Run`) and the ledger check; a device's topic and a
polled count; this tree's broker plugin built as deploy/setup.sh builds it. Used by tests/ingest,
tests/chaos and bench; tests/ingest/conftest.py registers the fixtures."""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import paho.mqtt.client as mqtt
import psycopg
import pytest
from paho.mqtt.packettypes import PacketTypes
from paho.mqtt.properties import Properties

from ingest.client import Ingester
from people import accounts
from shared import places
from shared.config import PREFIX, Settings
from testbed.process import kill_process, poll, stop_process
from tests.support.figures import Figures
from tests.support.warmfork import start_main

ROOT = Path(__file__).resolve().parents[2]
DEVICE = "A1"
ELEV = 300.0


def build_plugin(directory: Path) -> Path:
    """deploy/mosquitto/sds_plugin.c compiled as deploy/setup.sh compiles it, into `directory`
    (for MosquittoBroker's `plugin`: a test then checks the source it sits beside, not
    whatever plugin is installed)."""
    out = directory / "mosquitto_sds.so"
    subprocess.run(["gcc", "-Wall", "-Wextra", "-Werror", "-O2", "-fPIC", "-shared", "-o",
                    str(out), str(ROOT / "deploy/mosquitto/sds_plugin.c")], check=True,
                   timeout=120)
    return out


def wait_for(cond: Callable[[], Any], timeout: float = 15.0, every: float = 0.05,
             what: str = "condition") -> Any:
    """Poll `cond` until truthy (returned) or fail after `timeout` seconds."""
    value = poll(cond, timeout, every)
    if not value:
        raise AssertionError(f"timed out after {timeout}s waiting for {what} (last: {cond()!r})")
    return value


def now_slot(minutes_ago: int = 0) -> datetime:
    """A 5-minute grid instant `minutes_ago` (rounded down) before now."""
    t = datetime.now(UTC) - timedelta(minutes=minutes_ago)
    return t.replace(minute=t.minute - t.minute % 5, second=0, microsecond=0)


def iso(t: datetime) -> str:
    return t.strftime("%Y-%m-%dT%H:%M:%SZ")


def topic(s: Settings, device: str = DEVICE, kind: str = "readings") -> str:
    """The topic `device` publishes its `kind` messages on, under the test's topic prefix."""
    return f"{s.topic_prefix}/{device}/{kind}"


def count(conn: psycopg.Connection, query: str, *args: object) -> int:
    """A scalar query's value as an int (0 for no row or NULL), read in a fresh snapshot so
    that a poll sees what the ingester committed since the last one."""
    conn.rollback()
    row = conn.execute(query, args).fetchone()
    return int(row[0]) if row and row[0] is not None else 0


@dataclasses.dataclass
class Site:
    org: uuid.UUID
    location: uuid.UUID
    device: str
    tz: str


def make_site(conn: psycopg.Connection, *, device: str = DEVICE, deploy: bool = True,
              tz: str = "America/Chicago", org_name: str = "Ingest Org") -> Site:
    """An organisation with one location (elevation 300 m) and a device deployed 30 days ago."""
    row = conn.execute("SELECT id FROM organisations WHERE name = %s", (org_name,)).fetchone()
    org = row[0] if row else accounts.create_org(conn, name=org_name)
    loc = places.create_location(conn, org=org, loc=places.LocationInput(
        name=f"field-{device}", tz_name=tz, lat=41.0, lon=-93.0, elev=ELEV))
    places.register_device(conn, org=org, name=device)
    if deploy:
        places.deploy_device(conn, device=device, location=loc,
                               start=now_slot() - timedelta(days=30))
    conn.commit()
    return Site(org, loc, device, tz)


@pytest.fixture
def site(conn: psycopg.Connection) -> Site:
    return make_site(conn)


@pytest.fixture
def mqtt_settings(settings: Settings, broker: Any) -> Iterator[Settings]:
    """Settings for one test: its own client id and topic prefix on the session broker."""
    tag = uuid.uuid4().hex[:8]
    s = settings.replace(mqtt_host="127.0.0.1", mqtt_port=broker.port, mqtt_username=None,
                         mqtt_password=None, mqtt_client_id=f"ing-{tag}",
                         topic_prefix=f"t{tag}", ingest_flush_interval=0.1,
                         ingest_share_group=f"test-group-{tag}")
    yield s
    drop_session(s)


def drop_session(s: Settings) -> None:
    """Remove the test's persistent session from the shared broker (clean start, expiry 0)."""
    c = mqtt.Client(mqtt.CallbackAPIVersion.VERSION2, client_id=s.mqtt_client_id,
                    protocol=mqtt.MQTTv5)
    try:
        c.connect(s.mqtt_host, s.mqtt_port, clean_start=True)
        c.loop_start()
        wait_for(c.is_connected, 5, what="cleanup connect")
        c.disconnect()
        c.loop_stop()
    except (OSError, AssertionError):
        pass


class RunningIngester:
    """An Ingester running in a background thread of the test process."""

    def __init__(self, settings: Settings, *, retire: bool = False) -> None:
        self.ingester = Ingester(settings, retire=retire)
        self.thread = threading.Thread(target=self.ingester.run, daemon=True)

    def start(self) -> RunningIngester:
        self.thread.start()
        assert self.ingester.ready.wait(15), "ingester did not subscribe"
        return self

    def stop(self) -> None:
        self.ingester.stop()
        self.thread.join(30)
        assert not self.thread.is_alive(), "ingester did not stop"

    def metric(self, name: str, labels: dict[str, str] | None = None) -> float:
        value = self.ingester.metrics.registry.get_sample_value(name, labels or {})
        return value or 0.0


@pytest.fixture
def ingester(mqtt_settings: Settings) -> Iterator[RunningIngester]:
    run = RunningIngester(mqtt_settings).start()
    yield run
    run.stop()


def settings_env(s: Settings) -> dict[str, str]:
    """The SDS_* environment that makes `Settings.from_env` return `s`."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(PREFIX)}
    for f in dataclasses.fields(s):
        value = getattr(s, f.name)
        env[PREFIX + f.name.upper()] = "" if value is None else str(value)
    return env


class IngesterProcess:
    """`python -m ingest` as a subprocess, so SIGKILL is real. `warm`: forked from an
    interpreter that has imported the ingester already (tests/support/warmfork.py), for a test
    that restarts it after every one of many kills; a process of its own all the same."""

    def __init__(self, settings: Settings, log_path: Path, *, warm: bool = False) -> None:
        self.settings = settings
        self.log_path = log_path
        self.warm = warm
        self.proc: subprocess.Popen[bytes] | None = None
        self.starts = 0

    def start(self, **changes: Any) -> IngesterProcess:
        s = self.settings.replace(**changes)
        if self.warm:
            # Popen's interface as far as stop_process and kill_process use it.
            self.proc = start_main("ingest", settings_env(s), ROOT,  # type: ignore[assignment]
                                   self.log_path)
        else:
            log = open(self.log_path, "ab")
            self.proc = subprocess.Popen([sys.executable, "-m", "ingest"], cwd=ROOT,
                                         env=settings_env(s), stdout=log, stderr=log)
            log.close()
        self.starts += 1
        return self

    def wait_subscribed(self, count: int, timeout: float = 20.0) -> None:
        wait_for(lambda: self.log().count("connected;") >= count, timeout,
                 what=f"ingester connect #{count}")

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def wait_exit(self, timeout: float = 60.0) -> int:
        assert self.proc is not None
        return self.proc.wait(timeout)

    def terminate(self) -> int:
        """SIGTERM and wait (SIGKILL after 30 s); the exit status."""
        assert self.proc is not None
        return stop_process(self.proc)

    def kill(self) -> None:
        """SIGKILL: no cleanup."""
        if self.proc is not None:
            kill_process(self.proc)

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""


class Ledger:
    """A QoS 1 publisher that records which messages the broker acknowledged (PUBACK)."""

    def __init__(self, host: str, port: int, client_id: str | None = None, *,
                 username: str | None = None, password: str | None = None) -> None:
        self.client = mqtt.Client(mqtt.CallbackAPIVersion.VERSION2,
                                  client_id=client_id or f"pub-{uuid.uuid4().hex[:8]}",
                                  protocol=mqtt.MQTTv5)
        if username is not None:
            self.client.username_pw_set(username, password)
        self.client.reconnect_delay_set(0.1, 1)
        self.acked: set[tuple[str, datetime]] = set()
        self.host, self.port = host, port
        props = Properties(PacketTypes.CONNECT)
        props.SessionExpiryInterval = 600
        self.client.connect(host, port, clean_start=False, properties=props)
        self.client.loop_start()
        wait_for(self.client.is_connected, 10, what="publisher connect")

    def publish(self, topic: str, body: bytes, qos: int = 1, timeout: float = 5.0) -> bool:
        """Publish and wait for the PUBACK; True when the broker acknowledged it."""
        info = self.client.publish(topic, body, qos=qos)
        try:
            info.wait_for_publish(timeout)
        except (RuntimeError, ValueError):
            return False
        return info.is_published()

    def close(self) -> None:
        self.client.disconnect()
        self.client.loop_stop()


@pytest.fixture
def publisher(mqtt_settings: Settings) -> Iterator[Ledger]:
    pub = Ledger(mqtt_settings.mqtt_host, mqtt_settings.mqtt_port)
    yield pub
    pub.close()


# ---- the ledger check (reliability plan section 6) ------------------------------------------


class Run:
    """Publishes `n` readings of device A1 at `rate` per second from a background thread."""

    def __init__(self, ledger: Ledger, topic: str, n: int, rate: float) -> None:
        self.ledger, self.topic, self.n, self.rate = ledger, topic, n, rate
        t0 = now_slot(10)
        self.times = [t0 - timedelta(minutes=5 * i) for i in range(n)]
        self.acked: set[datetime] = set()
        self.thread = threading.Thread(target=self._publish, daemon=True)

    def _publish(self) -> None:
        start = time.monotonic()
        for i, t in enumerate(self.times):
            body = json.dumps({"time": iso(t), "tair": 10.0 + i % 7, "device": "A1"}).encode()
            # Keep trying each message until the broker acknowledges it (a restarting broker
            # refuses for a moment); the ledger holds only what was PUBACKed.
            give_up = time.monotonic() + 60
            while time.monotonic() < give_up:
                if self.ledger.publish(self.topic, body, timeout=2.0):
                    self.acked.add(t)
                    break
                time.sleep(0.1)  # not connected: paho fails at once; wait for its reconnect
            pause = start + (i + 1) / self.rate - time.monotonic()
            if pause > 0:
                time.sleep(pause)

    def start(self) -> Run:
        self.thread.start()
        return self

    def done(self) -> bool:
        return not self.thread.is_alive()


def stored_times(url: str) -> list[datetime]:
    with psycopg.connect(url) as c:
        return [r[0] for r in c.execute("SELECT time FROM calibrated WHERE device = 'A1'")]


def ledger_check(url: str, run: Run, timeout: float = 60.0) -> None:
    """Every PUBACKed reading stored, once; nothing stored that was not published."""
    try:
        wait_for(lambda: run.acked <= set(stored_times(url)), timeout, every=0.2,
                 what="every PUBACKed reading stored")
    except AssertionError:
        missing = sorted(run.acked - set(stored_times(url)))
        raise AssertionError(
            f"{len(missing)} PUBACKed readings missing, e.g. {missing[:5]}") from None
    rows = stored_times(url)
    assert len(rows) == len(set(rows))  # exactly once
    assert set(rows) <= set(run.times)  # nothing invented
    assert len(run.acked) == run.n  # the publisher got every message acknowledged


def record_ledger(figures: Figures, key: str, title: str, url: str, run: Run, *,
                  source: str = "tests/ingest/test_delivery.py", **extra: object) -> None:
    """Record a scenario's ledger figure (reliability plan section 6): PUBACKed vs stored."""
    rows = stored_times(url)
    figures.record(f"delivery.ledger.{key}",
                   {"acked": len(run.acked), "missing": len(run.acked - set(rows)),
                    "extra": len(rows) - len(set(rows) & run.acked), **extra},
                   section="delivery", title=title, target="missing 0, extra 0",
                   source=source)
