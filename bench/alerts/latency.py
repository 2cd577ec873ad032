"""Alert latency, a part of bench.alerts (issue 24): from a reading's MQTT publish to its
signed webhook's receipt.

The demo's shape: the five demo devices (admin/demo.py) each with a frost rule (`tair < 0`,
clear `>= 1`, no pending time) and one webhook channel; the real processes on loopback: a
mosquitto with the shipped durable settings, the ingester (`python -m ingest`), the evaluator
(`python -m alerts.evaluator`), the deliverer (`python -m alerts.delivery`) and a webhook
receiver (testbed.webhook_receiver), each its own process. Probes go round-robin over the
devices at PROBE_RATE a second, each reading flipping its device's rule (fire, clear, fire...),
so each is one event and one webhook: the demo's five devices publish one reading per 5 minutes,
the probes are 60 times that, and every one of them is an alert (a worst case at demo scale).

Latency of a probe: the receiver's arrival time minus the publish time (both this machine's
clock). Baseline in the same run: a bare MQTT subscriber's arrival time of the same publishes
(what the broker alone takes). Goal: p99 <= 10 s. It runs on the stack's PostgreSQL server (a
database of its own) and broker (topics and client ids of its own), with its own processes.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import paho.mqtt.client as mqtt

from bench.alerts.stack import LISTEN_PORTS
from people import accounts
from shared import alertrules, alertstore, db, places, sealing
from shared.config import PREFIX
from testbed.mosquitto import MosquittoBroker
from testbed.receivers import webhook_receiver

ROOT = Path(__file__).resolve().parents[2]
DEVICES = ("A000101", "A000102", "A000103", "A000104", "A000105")
WARMUP = "W000100"  # no rule: its reading shows the ingester is subscribed
PROBE_RATE = 1.0  # probes a second, over all devices
SECRET = "whsec_" + "YmVuY2gtYWxlcnRzLWxhdGVuY3ktc2VjcmV0LWtleQ=="


def _pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, int(round(q * len(ordered) + 0.5)) - 1))]


def _summary(values: list[float]) -> dict[str, float]:
    return {"n": len(values), "p50": round(statistics.median(values), 4),
            "p99": round(_pct(values, 0.99), 4), "max": round(max(values), 4)}


def _env(url: str, port: int, seal: str, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(PREFIX)}
    env.update({"SDS_DATABASE_URL": url, "SDS_MQTT_HOST": "127.0.0.1",
                "SDS_MQTT_PORT": str(port), "SDS_MQTT_USERNAME": "", "SDS_MQTT_PASSWORD": "",
                "SDS_MQTT_CLIENT_ID": "bench-alerts-ingester",
                # No metrics endpoint (none is scraped here): the defaults are a running
                # stack's ports on this host.
                **{PREFIX + name.upper(): "0" for name in LISTEN_PORTS},
                "SDS_APIKEY_SEAL_KEYS": seal, "SDS_WEBHOOK_ALLOW_PRIVATE": "true",
                "SDS_LOG_LEVEL": "WARNING", **extra})
    return env


def _world(url: str, hook_url: str, seal: str) -> None:
    """The demo organisation's devices, one frost rule each, one webhook channel."""
    start = datetime.now(UTC) - timedelta(days=30)
    with db.connect(url) as conn:
        org = accounts.create_org(conn, name="bench-alerts")
        for dev in (*DEVICES, WARMUP):
            loc = places.create_location(conn, org=org, loc=places.LocationInput(
                name=f"site-{dev}", tz_name="UTC", lat=42.0, lon=-93.6, elev=300.0))
            places.register_device(conn, org=org, name=dev)
            places.deploy_device(conn, device=dev, location=loc, start=start)
            if dev == WARMUP:
                continue
            rule = alertrules.parse({
                "name": f"Frost {dev}", "kind": "threshold", "table": "calibrated",
                "column": "tair", "scope": {"device": dev},
                "condition": {"op": "<", "threshold": 0}, "clear": {"op": ">=", "threshold": 1},
                "for": 0})
            alertstore.create(conn, org, rule)
        conn.execute("INSERT INTO alert_channels (org_id, name, kind, url, secret_sealed,"
                     " secret_last4) VALUES (%s, 'bench', 'webhook', %s, %s, %s)",
                     (org, hook_url, sealing.Sealer([seal]).seal(SECRET), SECRET[-4:]))
        conn.commit()


def _wait_ready(url: str, pub: mqtt.Client, timeout: float = 60.0) -> None:
    """Until the evaluator holds its lock, the deliverer listens and the ingester stores."""
    deadline = time.monotonic() + timeout
    body = json.dumps({"time": _slot(datetime.now(UTC)).strftime("%Y-%m-%dT%H:%M:%SZ"),
                       "tair": 10.0})
    with db.connect(url, autocommit=True) as conn:
        while time.monotonic() < deadline:
            pub.publish(f"sensors/{WARMUP}/readings", body, qos=1).wait_for_publish(10)
            names = {r[0] for r in conn.execute("SELECT application_name FROM pg_stat_activity")}
            stored = conn.execute("SELECT count(*) FROM calibrated WHERE device = %s",
                                  (WARMUP,)).fetchone()
            if {"sds-alerts-lock", "sds-deliverer-listen"} <= names and stored and stored[0]:
                return
            time.sleep(0.5)
    raise RuntimeError("the ingester, evaluator or deliverer did not start within "
                       f"{timeout:g} s")


def _slot(t: datetime) -> datetime:
    return t.replace(minute=t.minute - t.minute % 5, second=0, microsecond=0)


def measure(url: str, workdir: Path, broker: MosquittoBroker, *, probes: int
            ) -> dict[str, Any]:
    """Run the pipeline and `probes` probes; latency summaries (seconds)."""
    workdir.mkdir(parents=True, exist_ok=True)
    hook = webhook_receiver(workdir)
    seal = sealing.new_key()
    procs: list[subprocess.Popen[bytes]] = []
    seen: dict[tuple[str, str], float] = {}
    sub = mqtt.Client(mqtt.CallbackAPIVersion.VERSION2, client_id="bench-alerts-baseline",
                      protocol=mqtt.MQTTv5)
    pub = mqtt.Client(mqtt.CallbackAPIVersion.VERSION2, client_id="bench-alerts-pub",
                      protocol=mqtt.MQTTv5)
    try:
        _world(url, hook.url, seal)
        env = _env(url, broker.port, seal)
        logs = open(workdir / "processes.log", "ab")  # noqa: SIM115 (closed below)
        for module in ("ingest", "alerts.evaluator", "alerts.delivery"):
            procs.append(subprocess.Popen([sys.executable, "-m", module], cwd=ROOT, env=env,
                                          stdout=logs, stderr=subprocess.STDOUT))

        def on_message(_c: Any, _u: Any, msg: mqtt.MQTTMessage) -> None:
            seen[(msg.topic, msg.payload.decode())] = time.time()

        sub.on_message = on_message
        sub.connect("127.0.0.1", broker.port)
        sub.subscribe("sensors/#", qos=1)
        sub.loop_start()
        pub.connect("127.0.0.1", broker.port)
        pub.loop_start()
        _wait_ready(url, pub)

        per_device = -(-probes // len(DEVICES))
        newest = _slot(datetime.now(UTC)) - timedelta(minutes=5)
        sent: dict[tuple[str, str], tuple[float, str, str]] = {}
        began = time.monotonic()
        for i in range(probes):
            dev = DEVICES[i % len(DEVICES)]
            k = i // len(DEVICES)
            at = newest - timedelta(minutes=5 * (per_device - 1 - k))
            stamp = at.strftime("%Y-%m-%dT%H:%M:%SZ")
            body = json.dumps({"time": stamp, "tair": -1.0 if k % 2 == 0 else 2.0})
            t = time.time()
            topic = f"sensors/{dev}/readings"
            pub.publish(topic, body, qos=1).wait_for_publish(10)
            sent[(dev, stamp)] = (t, topic, body)
            pause = began + (i + 1) / PROBE_RATE - time.monotonic()
            if pause > 0:
                time.sleep(pause)

        deadline = time.monotonic() + 120
        alert: list[float] = []
        while time.monotonic() < deadline:
            got = {}
            for x in hook.received():
                data = json.loads(x["body"])["data"]
                key = (data["device"], data["at"])
                got.setdefault(key, x["received"])
            if set(sent) <= set(got):
                alert = [got[k] - sent[k][0] for k in sent]
                break
            time.sleep(0.5)
        if not alert:
            with db.connect(url) as conn:
                stored = conn.execute("SELECT count(*) FROM calibrated").fetchone()
                events = conn.execute("SELECT count(*) FROM alert_events").fetchone()
                log = (workdir / "processes.log").read_text(errors="replace")[-3000:]
            missing = sorted(set(sent) - set(got))[:8]
            raise RuntimeError(f"only {len(got)} of {len(sent)} webhooks arrived in 120 s; "
                               f"stored readings {stored}, events {events}; missing e.g. "
                               f"{missing}\n{log}")
        baseline = [seen[(topic, body)] - t for t, topic, body in sent.values()
                    if (topic, body) in seen]
        return {"probes": probes, "probe_rate_per_s": PROBE_RATE,
                "webhook": _summary(alert), "mqtt_baseline": _summary(baseline),
                "ratio_p50": round(statistics.median(alert) / statistics.median(baseline), 1)}
    finally:
        for c in (sub, pub):
            c.loop_stop()
            c.disconnect()
        for p in procs:
            p.terminate()
        for p in procs:
            try:
                p.wait(20)
            except subprocess.TimeoutExpired:
                p.kill()
        hook.stop()


GOAL_P99 = 10.0


def run(stack: Any, per_device: int) -> dict[str, Any]:
    """The part's entry (bench/alerts/__main__.py): 100 probes (30 with --quick)."""
    from testbed import database as provisioning

    url = provisioning.create(stack.pg.dsn("postgres"), "latency")
    return measure(url, stack.base / "latency", stack.broker,
                   probes=100 if per_device >= 12 else 30)


def report(f: dict[str, Any]) -> list[str]:
    """The result lines."""
    w, b = f["webhook"], f["mqtt_baseline"]
    met = "met" if w["p99"] <= GOAL_P99 else "MISSED"
    return [
        f"latency, publish to webhook, {f['probes']} probes at {f['probe_rate_per_s']:g}/s over "
        f"{len(DEVICES)} demo devices",
        f"  webhook: p50 {w['p50']:.3f} s, p99 {w['p99']:.3f} s, max {w['max']:.3f} s  "
        f"(goal p99 <= {GOAL_P99:g} s: {met})",
        f"  bare MQTT subscriber (baseline): p50 {b['p50'] * 1000:.1f} ms, "
        f"p99 {b['p99'] * 1000:.1f} ms; p50 ratio {f['ratio_p50']:g}",
    ]
