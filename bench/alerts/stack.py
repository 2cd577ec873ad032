"""The servers and processes of the alerts benchmark: a throwaway PostgreSQL (durable
defaults) and mosquitto (shipped durable settings) on free loopback ports, one organisation
with N deployed devices, and `python -m ingest` / `python -m alerts.evaluator` started as
subprocesses. Each part of bench.alerts (bench/alerts/evaluation.py, and the delivery latency
part) builds on one `Stack`."""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from uuid import UUID

import paho.mqtt.client as mqtt
import psycopg
from paho.mqtt.packettypes import PacketTypes
from paho.mqtt.properties import Properties

from admin import simulate
from bench.common import durable_servers
from ingest.shards import subscriptions
from people import accounts
from shared import alertrules, alertstore, db, places
from shared.config import PREFIX, Settings
from testbed.process import free_port

ROOT = Path(__file__).resolve().parents[2]


def log(msg: str) -> None:
    """A timestamped progress line."""
    print(f"[{datetime.now():%H:%M:%S}] {msg}", flush=True)


def wait_until(cond: Callable[[], Any], timeout: float, every: float = 0.05,
               what: str = "") -> Any:
    """Poll `cond` until truthy (returned); TimeoutError after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while not (found := cond()):
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out waiting for {what}")
        time.sleep(every)
    return found


def scrape(port: int) -> dict[str, float]:
    """Every sample of a process's metrics endpoint ({} when it does not answer)."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=2) as resp:
            text = resp.read().decode()
    except OSError:
        return {}
    found = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            name, _, value = line.rpartition(" ")
            found[name] = float(value)
    return found


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of process `pid` so far (Linux /proc)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


# Every port setting a service process listens on (its metrics endpoints): the benchmark's
# processes get a free port for the one they are scraped on and 0 (off) for the others, never
# a default, which a running deploy/run.sh stack on the same host already holds.
LISTEN_PORTS = tuple(f.name for f in dataclasses.fields(Settings)
                     if f.name.endswith("metrics_port"))
SCRAPED = {"ingest": "metrics_port", "alerts.evaluator": "alerts_metrics_port",
           "alerts.delivery": "delivery_metrics_port"}


def process_env(module: str, settings: Settings) -> tuple[dict[str, str], int]:
    """The environment of `python -m <module>` on `settings` (none of the caller's SDS_
    variables), and the port its metrics are scraped on (free, from `settings`)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(PREFIX)}
    for name in ("database_url", "mqtt_host", "mqtt_port", "mqtt_client_id", "topic_prefix",
                 "log_level", "alert_sweep_interval", "ingest_share_group"):
        env[PREFIX + name.upper()] = str(getattr(settings, name))
    env[PREFIX + "MQTT_USERNAME"] = ""
    scraped = SCRAPED[module]
    for name in LISTEN_PORTS:
        env[PREFIX + name.upper()] = str(getattr(settings, name)) if name == scraped else "0"
    return env, int(getattr(settings, scraped))


class Process:
    """A service process (`python -m <module>`) on the stack's settings."""

    def __init__(self, module: str, settings: Settings, log_path: Path) -> None:
        env, self.port = process_env(module, settings)
        self.url = settings.database_url
        # Its database sessions' application_name starts with this (shared.db.connect name=).
        self.sessions = "sds-alerts" if module.startswith("alerts") else "sds-ingest"
        argv = [sys.executable, "-m", module]
        profile = os.environ.get("BENCH_ALERTS_PROFILE")  # a directory: cProfile each process
        if profile:
            argv[1:1] = ["-m", "cProfile", "-o", str(Path(profile) / f"{log_path.stem}.prof")]
        with open(log_path, "ab") as out:
            self.proc = subprocess.Popen(argv, cwd=ROOT, env=env, stdout=out, stderr=out)
        wait_until(lambda: scrape(self.port) or self.proc.poll() is not None, 60,
                   what=f"{module} metrics endpoint")
        if self.proc.poll() is not None:
            raise RuntimeError(f"{module} exited: see {log_path}")

    def metrics(self) -> dict[str, float]:
        """The process's metrics now."""
        return scrape(self.port)

    def cpu(self) -> float:
        """The process's CPU seconds so far."""
        return cpu_seconds(self.proc.pid)

    def db_cpu(self) -> float:
        """CPU seconds so far of the database server processes serving its sessions (the
        queries it runs cost there, not in its own process)."""
        with db.connect(self.url, autocommit=True) as c:
            pids = [r[0] for r in c.execute(
                "SELECT pid FROM pg_stat_activity WHERE application_name LIKE %s",
                (self.sessions + "%",))]
        total = 0.0
        for pid in pids:
            try:
                total += cpu_seconds(pid)
            except OSError:
                pass  # the session ended just now
        return total

    def total_cpu(self) -> float:
        """Its own CPU seconds plus its database sessions'."""
        return self.cpu() + self.db_cpu()

    def stop(self) -> None:
        """SIGTERM and wait."""
        if self.proc.poll() is None:
            self.proc.terminate()
        self.proc.wait(60)


class Stack:
    """PostgreSQL, mosquitto, one organisation with `devices` deployed devices."""

    def __init__(self, base: Path, devices: int) -> None:
        self.base = base
        log("starting PostgreSQL (durable) and mosquitto (shipped durable.conf)")
        self.pg, self.url, self.broker = durable_servers(base)
        self.devices = [f"E{i:05d}" for i in range(devices)]
        self.sites = [simulate.Site(d, 30.0 + (i % 25), -90.0 + (i % 40), 100.0)
                      for i, d in enumerate(self.devices)]
        log(f"registering {devices} devices")
        with db.connect(self.url) as c:
            self.org = accounts.create_org(c, name="Bench")
            start = datetime.now(UTC) - timedelta(days=30)
            loc = places.create_location(c, org=self.org, loc=places.LocationInput(
                name="field", tz_name="America/Chicago", lat=41.0, lon=-93.0, elev=300.0))
            for site in self.sites:
                places.register_device(c, org=self.org, name=site.device)
                places.deploy_device(c, device=site.device, location=loc, start=start)
        self.prefix = "bench"
        self.client_id = "bench-ingest"
        self._poll: psycopg.Connection | None = None

    def close(self) -> None:
        """Stop the servers and remove their files."""
        db.close_quietly(self._poll)
        self.broker.cleanup()
        self.pg.cleanup()

    def settings(self, **changes: Any) -> Settings:
        """Settings of the stack's processes (fresh metrics ports)."""
        return Settings(database_url=self.url, mqtt_host="127.0.0.1", mqtt_port=self.broker.port,
                        mqtt_username=None, mqtt_client_id=self.client_id,
                        topic_prefix=self.prefix, metrics_port=free_port(),
                        alerts_metrics_port=free_port(), delivery_metrics_port=free_port(),
                        log_level="WARNING",
                        ingest_share_group="bench-share-group-0000").replace(**changes)

    def add_rules(self, bodies: list[dict[str, Any]]) -> list[UUID]:
        """Create rules in the organisation."""
        with db.connect(self.url) as c:
            return [alertstore.create(c, self.org, alertrules.parse(b)) for b in bodies]

    def count(self) -> int:
        """Readings stored (on one kept connection: polling costs little)."""
        if self._poll is None or self._poll.closed:
            self._poll = db.connect(self.url, autocommit=True)
        row = self._poll.execute("SELECT count(*) FROM calibrated").fetchone()
        return int(row[0]) if row else 0

    def evaluated(self, until: datetime) -> int:
        """Devices whose `calibrated` cursor of the evaluator has reached `until`."""
        if self._poll is None or self._poll.closed:
            self._poll = db.connect(self.url, autocommit=True)
        row = self._poll.execute("SELECT count(*) FROM alert_cursors WHERE source ="
                                 " 'calibrated' AND at >= %s", (until,)).fetchone()
        return int(row[0]) if row else 0

    def ingester_session(self) -> None:
        """Create the ingester's persistent session with its subscriptions, then leave it
        offline: what is published next is queued for the ingester."""
        topics = subscriptions(self.settings())
        c = mqtt.Client(mqtt.CallbackAPIVersion.VERSION2, client_id=self.client_id,
                        protocol=mqtt.MQTTv5)
        done: list[int] = []
        c.on_connect = lambda cl, *_: [cl.subscribe(t, qos=1) for t in topics]
        c.on_subscribe = lambda *_: done.append(1)
        props = Properties(PacketTypes.CONNECT)
        props.SessionExpiryInterval = 3600
        c.connect("127.0.0.1", self.broker.port, clean_start=False, properties=props)
        c.loop_start()
        try:
            wait_until(lambda: len(done) >= len(topics), 10, what="the session's subscriptions")
        finally:
            c.disconnect()
            c.loop_stop()

    def ingester(self, name: str) -> Process:
        """`python -m ingest` (one process, the session `client_id`)."""
        return Process("ingest", self.settings(), self.base / f"{name}.log")

    def evaluator(self, name: str, **changes: Any) -> Process:
        """`python -m alerts.evaluator`."""
        return Process("alerts.evaluator", self.settings(**changes), self.base / f"{name}.log")

    def publish(self, messages: list[tuple[str, bytes]]) -> float:
        """Publish (topic, payload) pairs at QoS 1 with one client; seconds until every
        PUBACK arrived."""
        c = mqtt.Client(mqtt.CallbackAPIVersion.VERSION2, client_id="bench-pub",
                        protocol=mqtt.MQTTv5)
        c.max_inflight_messages_set(200)
        c.max_queued_messages_set(0)
        acked = threading.Semaphore(0)
        c.on_publish = lambda *_args: acked.release()
        props = Properties(PacketTypes.CONNECT)
        props.SessionExpiryInterval = 0
        c.connect("127.0.0.1", self.broker.port, clean_start=True, properties=props)
        c.loop_start()
        start = time.monotonic()
        try:
            for topic, payload in messages:
                c.publish(topic, payload, qos=1)
            for _ in messages:
                if not acked.acquire(timeout=120):
                    raise TimeoutError("PUBACKs missing")
        finally:
            c.disconnect()
            c.loop_stop()
        return time.monotonic() - start

    def readings(self, end: datetime, per_device: int) -> list[tuple[str, bytes]]:
        """`per_device` consecutive 5-minute readings of every device, ending at `end`,
        in time order (one message each)."""
        times = [end - timedelta(minutes=5 * i) for i in range(per_device - 1, -1, -1)]
        return [(f"{self.prefix}/{site.device}/readings",
                 json.dumps(simulate.reading_body(site, t)).encode())
                for t in times for site in self.sites]
