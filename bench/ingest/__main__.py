"""Ingest benchmark (issue 3, item 7): `.venv/bin/python -m bench.ingest [--quick]`.

Starts its own PostgreSQL (TimescaleDB, durable defaults: fsync and synchronous_commit on) and
its own mosquitto with the shipped durable settings, on free loopback ports, and measures in
the same run:

  a. backlog drain: N single-reading messages queued for persistent sessions, then drained by
     the ingester (`python -m ingest`, committed readings per second) and by a bare paho
     subscriber that only runs json.loads (the baseline). Goal: ratio >= 0.8.
  b. batched: messages of 288 readings drained by the ingester, against COPY into a staging
     table plus INSERT ... ON CONFLICT of the same rows straight from Python. Goal: >= 0.5.
  c. a naive ingester (one INSERT and one commit per reading) on a single-reading backlog, for
     contrast with (a). Goal: ours >= 3x faster.

Both sides of (a) drain the same messages, queued in turn for each side's own persistent
session. Ratios print at the end; see docs/benchmarks.md.

`--shards N` (default: the machine's cores) runs (a) and (b) with N ingester shards
(ingest/shards.py: N processes sharing `$share/sds-ingest/...`, each with its own persistent
session, created before the backlog is queued so each holds its share); the baselines stay one
bare paho consumer and one COPY client. `--curve 1,2,4` repeats (a) and (b) for each shard count
(the scaling curve in docs/benchmarks.md).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path

import paho.mqtt.client as mqtt
from paho.mqtt.packettypes import PacketTypes
from paho.mqtt.properties import Properties
from psycopg import sql

from admin import simulate
from bench.common import durable_servers
from bench.ingest.naive import NaiveIngester
from ingest import writer
from ingest.derive import derive
from ingest.shards import shard_settings, subscriptions
from people import accounts
from shared import db, places
from shared.columns import READING_INPUTS, TABLES
from shared.config import PREFIX, Settings
from shared.timeutil import parse_instant
from testbed.process import free_port

ROOT = Path(__file__).resolve().parents[2]
GOALS = {"a": 0.8, "b": 0.5, "c": 3.0}


def log(msg: str) -> None:
    print(f"[{datetime.now():%H:%M:%S}] {msg}", flush=True)


def wait_until(cond: Callable[[], bool], timeout: float, every: float = 0.05,
               what: str = "") -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out waiting for {what}")
        time.sleep(every)


class Bench:
    """Servers, database and helpers shared by the scenarios."""

    def __init__(self, base: Path, devices: int) -> None:
        self.base = base
        log("starting PostgreSQL (durable) and mosquitto (shipped durable.conf)")
        self.pg, self.url, self.broker = durable_servers(base)
        self.devices = [f"B{i:05d}" for i in range(devices)]
        self.sites = [simulate.Site(d, 30.0 + i, -90.0 + i, 100.0 + 10 * i)
                      for i, d in enumerate(self.devices)]
        with db.connect(self.url) as c:
            org = accounts.create_org(c, name="Bench")
            start = datetime.now(UTC) - timedelta(days=399)
            for site in self.sites:
                loc = places.create_location(c, org=org, loc=places.LocationInput(
                    name=site.device, tz_name="America/Chicago", lat=site.lat, lon=site.lon,
                    elev=site.elev))
                places.register_device(c, org=org, name=site.device)
                places.deploy_device(c, device=site.device, location=loc, start=start)

    def close(self) -> None:
        self.broker.cleanup()
        self.pg.cleanup()

    def settings(self, prefix: str, client_id: str) -> Settings:
        return Settings(database_url=self.url, mqtt_host="127.0.0.1",
                        mqtt_port=self.broker.port, mqtt_username=None,
                        mqtt_client_id=client_id, topic_prefix=prefix, metrics_port=free_port(),
                        log_level="WARNING", ingest_share_group=f"bench-group-{client_id}")

    def truncate(self) -> None:
        with db.connect(self.url, autocommit=True) as c:
            c.execute("TRUNCATE calibrated, rollup_dirty, quarantine")

    def count(self) -> int:
        with db.connect(self.url) as c:
            return int(c.execute("SELECT count(*) FROM calibrated").fetchone()[0])

    # -- sessions and backlog -----------------------------------------------------------------

    def ingester_sessions(self, prefix: str, client_id: str, shards: int) -> None:
        """Create the persistent sessions the ingester (or each of its shards) will resume,
        with its own subscriptions, then leave them offline."""
        for k in range(1, shards + 1) if shards > 1 else [0]:
            s = shard_settings(self.settings(prefix, client_id).replace(
                ingest_shards=shards, ingest_shard=k))
            for topic in subscriptions(s):
                self.subscribe_session(s.mqtt_client_id, topic)

    def subscribe_session(self, client_id: str, topic: str) -> None:
        """Create a persistent session subscribed to `topic`, then leave it offline."""
        c = mqtt_client(client_id)
        c.on_connect = lambda cl, *_: cl.subscribe(topic, qos=1)
        done: list[int] = []
        c.on_subscribe = lambda *_: done.append(1)
        connect(c, self.broker.port)
        c.loop_start()
        wait_until(lambda: bool(done), 10, what="subscription")
        c.disconnect()
        c.loop_stop()

    def publish_backlog(self, prefix: str, lines_by_device: dict[str, list[bytes]]) -> float:
        """Publish each device's lines with mosquitto_pub -l at QoS 1; returns seconds."""
        start = time.monotonic()
        procs = []
        for device, lines in lines_by_device.items():
            path = self.base / f"{prefix}-{device}.jsonl"
            path.write_bytes(b"\n".join(lines) + b"\n")
            procs.append(subprocess.Popen(
                ["mosquitto_pub", "-h", "127.0.0.1", "-p", str(self.broker.port), "-q", "1",
                 "-t", f"{prefix}/{device}/readings", "-l", "-i", f"pub-{prefix}-{device}"],
                stdin=open(path, "rb")))
            if len(procs) >= 4:
                for p in procs:
                    if p.wait(600) != 0:
                        raise RuntimeError("mosquitto_pub failed")
                procs = []
        for p in procs:
            if p.wait(600) != 0:
                raise RuntimeError("mosquitto_pub failed")
        return time.monotonic() - start

    def ingester_drain(self, prefix: str, client_id: str, expected: int,
                       shards: int = 1) -> tuple[float, int]:
        """Run `python -m ingest` (one process per shard) on the queued backlog until
        `expected` rows are stored; returns (seconds, rows). Timed from the last metrics
        endpoint coming up (every process imported and about to connect) to the last row
        committed."""
        base = self.settings(prefix, client_id)
        procs, urls, logs = [], [], []
        for k in range(1, shards + 1) if shards > 1 else [0]:
            s = base.replace(ingest_shards=shards, ingest_shard=k,
                             metrics_port=free_port() - 100 - max(k, 1) + 1 if shards > 1
                             else base.metrics_port)
            env = {k2: v for k2, v in os.environ.items() if not k2.startswith(PREFIX)}
            for name in ("database_url", "mqtt_host", "mqtt_port", "mqtt_client_id",
                         "topic_prefix", "metrics_port", "log_level", "ingest_shards",
                         "ingest_shard"):
                env[PREFIX + name.upper()] = str(getattr(s, name))
            if s.ingest_share_group:  # shards need the (secret) group name: ingest/shards.py
                env[PREFIX + "INGEST_SHARE_GROUP"] = s.ingest_share_group
            env[PREFIX + "MQTT_USERNAME"] = ""
            errlog = open(self.base / f"ingest-{prefix}-{k}.log", "ab")
            logs.append(errlog)
            procs.append(subprocess.Popen([sys.executable, "-m", "ingest"], cwd=ROOT, env=env,
                                          stdout=errlog, stderr=errlog))
            urls.append(f"http://127.0.0.1:{shard_settings(s).metrics_port}/metrics")

        def stored() -> float:
            return sum(scrape(u) or 0 for u in urls)

        try:
            wait_until(lambda: all(scrape(u) is not None for u in urls), 60, 0.02,
                       "ingester metrics endpoints")
            start = time.monotonic()
            wait_until(lambda: stored() >= expected, 1800, 0.1,
                       f"ingester storing {expected} rows")
            elapsed = time.monotonic() - start
        finally:
            for proc in procs:
                proc.terminate()
            for proc in procs:
                proc.wait(60)
            for errlog in logs:
                errlog.close()
        return elapsed, self.count()


def mqtt_client(client_id: str) -> mqtt.Client:
    return mqtt.Client(mqtt.CallbackAPIVersion.VERSION2, client_id=client_id,
                       protocol=mqtt.MQTTv5)


def connect(c: mqtt.Client, port: int, receive_maximum: int = 1000) -> None:
    props = Properties(PacketTypes.CONNECT)
    props.SessionExpiryInterval = 3600
    props.ReceiveMaximum = receive_maximum
    c.connect("127.0.0.1", port, clean_start=False, properties=props)


def scrape(url: str) -> float | None:
    """sds_ingest_readings_stored_total{table="calibrated"} from the metrics endpoint."""
    try:
        with urllib.request.urlopen(url, timeout=2) as resp:
            text = resp.read().decode()
    except OSError:
        return None
    for line in text.splitlines():
        if line.startswith('sds_ingest_readings_stored_total{table="calibrated"}'):
            return float(line.split()[-1])
    return 0.0


def bare_drain(port: int, client_id: str, topic: str, expected: int) -> float:
    """The baseline subscriber: paho + json.loads per message, auto-ack; returns seconds."""
    c = mqtt_client(client_id)
    got = [0]

    def on_message(_c: mqtt.Client, _u: object, msg: mqtt.MQTTMessage) -> None:
        json.loads(msg.payload)
        got[0] += 1
        if got[0] >= expected:
            c.disconnect()

    c.on_message = on_message
    c.on_connect = lambda cl, *_: cl.subscribe(topic, qos=1)
    start = time.monotonic()
    connect(c, port)
    c.loop_forever()
    elapsed = time.monotonic() - start
    if got[0] < expected:
        raise RuntimeError(f"bare subscriber got {got[0]} of {expected}")
    return elapsed


def single_lines(bench: Bench, per_device: int) -> dict[str, list[bytes]]:
    """One reading per line (message), `per_device` consecutive slots per device."""
    end = datetime.now(UTC).replace(second=0, microsecond=0) - timedelta(minutes=10)
    end = end.replace(minute=end.minute - end.minute % 5)
    out = {}
    for site in bench.sites:
        times = [end - timedelta(minutes=5 * i) for i in range(per_device)]
        out[site.device] = [json.dumps(simulate.reading_body(site, t)).encode() for t in times]
    return out


def scenario_a(bench: Bench, messages: int, results: dict[str, float], shards: int = 1,
               bare: float | None = None) -> float:
    per_device = messages // len(bench.devices)
    n = per_device * len(bench.devices)
    lines = single_lines(bench, per_device)
    # The same messages are queued for each side in turn, so each drains a broker holding
    # exactly its own backlog (the broker's periodic save costs grow with what it holds).
    if bare is None:
        bench.subscribe_session("bench-bare-a", "ba1/+/readings")
        took = bench.publish_backlog("ba1", lines)
        log(f"(a) {n} single-reading messages queued in {took:.1f} s ({n / took:.0f} msg/s)")
        bare = bare_drain(bench.broker.port, "bench-bare-a", "ba1/+/readings", n)
        log(f"(a) bare paho + json.loads drained {n} in {bare:.1f} s: {n / bare:.0f} msg/s")
    prefix, cid = f"ba2s{shards}", f"bench-ingester-a{shards}"
    bench.ingester_sessions(prefix, cid, shards)
    bench.publish_backlog(prefix, lines)
    ours, rows = bench.ingester_drain(prefix, cid, n, shards)
    log(f"(a) ingester, {shards} shard(s), committed {rows} readings in {ours:.1f} s: "
        f"{n / ours:.0f} readings/s")
    results.update(a_bare=n / bare, a_ours=n / ours, a_ratio=bare / ours, a_n=n,
                   a_shards=shards)
    results[f"a_ratio_{shards}_shards"] = bare / ours
    bench.truncate()
    return bare


# The (b) baseline: rows ready to store (derived values computed, rounded already or not: it
# stores them as they are) staged with a binary COPY into a table like `calibrated` and upserted
# with a plain INSERT ... SELECT, the least a writer that keeps first-write-wins can do.
_BASELINE_STAGE = "CREATE TEMP TABLE baseline_stage (LIKE calibrated) ON COMMIT DELETE ROWS"
_BASELINE_COLUMNS = writer.STAGE_COLUMNS
_BASELINE_TYPES = [{"real": "float4", "double precision": "float8", "text": "text",
                    "uuid": "uuid", "timestamp with time zone": "timestamptz"}[
    TABLES["calibrated"].column(n).dtype] for n in _BASELINE_COLUMNS]
_BASELINE_COPY = sql.SQL("COPY baseline_stage ({}) FROM STDIN (FORMAT BINARY)").format(
    sql.SQL(", ").join(map(sql.Identifier, _BASELINE_COLUMNS)))
_BASELINE_INSERT = sql.SQL(
    "INSERT INTO calibrated ({cols}) SELECT {cols} FROM baseline_stage"
    " ON CONFLICT (device, time) DO NOTHING").format(
    cols=sql.SQL(", ").join(map(sql.Identifier, _BASELINE_COLUMNS)))


def scenario_b(bench: Bench, readings: int, batch_rows: int, results: dict[str, float],
               shards: int = 1, base: float | None = None) -> float:
    per_device_msgs = max(1, readings // 288 // len(bench.devices))
    n = per_device_msgs * 288 * len(bench.devices)
    lines = single_lines(bench, per_device_msgs * 288)
    batched = {d: [b"[" + b",".join(ls[i:i + 288]) + b"]" for i in range(0, len(ls), 288)]
               for d, ls in lines.items()}
    prefix, cid = f"bbs{shards}", f"bench-ingester-b{shards}"
    bench.ingester_sessions(prefix, cid, shards)
    log(f"(b) publishing {n} readings as {n // 288} messages of 288")
    bench.publish_backlog(prefix, batched)
    ours, rows = bench.ingester_drain(prefix, cid, n, shards)
    log(f"(b) ingester, {shards} shard(s), committed {rows} readings in {ours:.1f} s: "
        f"{n / ours:.0f} readings/s")
    bench.truncate()
    if base is not None:
        results.update(b_base=n / base, b_ours=n / ours, b_ratio=base / ours, b_n=n,
                       b_shards=shards)
        results[f"b_ratio_{shards}_shards"] = base / ours
        return base
    # Baseline: the same rows (derived values included, computed outside the timing), staged
    # with the writer's own binary COPY and upserted, committing every `batch_rows` rows.
    rows_ready = []
    with db.connect(bench.url) as c:
        dep = {r[0]: (r[1], r[2]) for r in c.execute(
            "SELECT d.name, l.id, l.elev FROM devices d JOIN deployments x ON x.device_id = d.id"
            " JOIN locations l ON l.id = x.location_id")}
    for device, ls in lines.items():
        loc, elev = dep[device]
        for line in ls:
            r = json.loads(line)
            d = derive(r, elev)
            rows_ready.append((parse_instant(r["time"]), device, loc,
                               *(r.get(c.name) for c in READING_INPUTS),
                               d["tdew"], d["ea"], d["vpd"], d["slp"]))
    with db.connect(bench.url, autocommit=True) as c:
        c.execute(_BASELINE_STAGE)
        start = time.monotonic()
        for i in range(0, len(rows_ready), batch_rows):
            with c.transaction():
                with c.cursor() as cur:
                    with cur.copy(_BASELINE_COPY) as copy:
                        copy.set_types(_BASELINE_TYPES)
                        for row in rows_ready[i:i + batch_rows]:
                            copy.write_row(row)
                    cur.execute(_BASELINE_INSERT)
        base = time.monotonic() - start
    log(f"(b) COPY+upsert straight from Python: {n} rows in {base:.1f} s: {n / base:.0f} rows/s")
    results.update(b_base=n / base, b_ours=n / ours, b_ratio=base / ours, b_n=n,
                   b_shards=shards)
    results[f"b_ratio_{shards}_shards"] = base / ours
    bench.truncate()
    return base


def scenario_c(bench: Bench, messages: int, results: dict[str, float]) -> None:
    per_device = max(1, messages // len(bench.devices))
    n = per_device * len(bench.devices)
    bench.subscribe_session("bench-naive-c", "bc/+/readings")
    bench.publish_backlog("bc", single_lines(bench, per_device))
    naive = NaiveIngester(bench.url, bench.broker.port, "bench-naive-c", "bc/+/readings")
    took = naive.drain(n)
    log(f"(c) naive ingester (INSERT + commit per reading): {n} in {took:.1f} s: "
        f"{n / took:.0f} readings/s")
    results.update(c_naive=n / took, c_n=n)
    if "a_ours" in results:
        results["c_ratio"] = results["a_ours"] / results["c_naive"]
    bench.truncate()


def machine() -> str:
    cpu = next((line.split(":", 1)[1].strip() for line in
                Path("/proc/cpuinfo").read_text().splitlines() if line.startswith("model name")),
               platform.processor())
    load = os.getloadavg()
    pg = subprocess.run(["/usr/lib/postgresql/15/bin/postgres", "--version"],
                        capture_output=True, text=True).stdout.strip()
    mq = subprocess.run(["mosquitto", "-h"], capture_output=True, text=True).stdout
    mq = mq.splitlines()[0] if mq else "mosquitto"
    return (f"{os.cpu_count()} CPUs ({cpu}), load average {load[0]:.1f}/{load[1]:.1f}; "
            f"{pg}; {mq}; Python {platform.python_version()}")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.ingest", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--messages", type=int, default=200_000,
                   help="(a) single-reading messages in the backlog (default 200000)")
    p.add_argument("--batched-readings", type=int, default=201_600,
                   help="(b) readings sent in 288-reading messages (default 201600)")
    p.add_argument("--baseline-batch-rows", type=int, default=288 * 50,
                   help="(b) rows per baseline transaction (default 14400)")
    p.add_argument("--naive-messages", type=int, default=5_000,
                   help="(c) messages for the naive ingester (default 5000)")
    p.add_argument("--devices", type=int, default=10, help="devices (default 10)")
    p.add_argument("--quick", action="store_true", help="a tenth of every size")
    p.add_argument("--only", default="abc", help="scenarios to run, e.g. 'ab'")
    p.add_argument("--shards", type=int, default=os.cpu_count() or 1,
                   help="ingester shards for (a) and (b) (default: the machine's cores)")
    p.add_argument("--curve", default="",
                   help="comma-separated shard counts to run (a) and (b) with, e.g. 1,2,4")
    args = p.parse_args(argv)
    if args.quick:
        args.messages //= 10
        args.batched_readings //= 10
        args.naive_messages //= 10
    results: dict[str, float] = {}
    with tempfile.TemporaryDirectory(prefix="sds-bench-ingest-") as tmp:
        bench = Bench(Path(tmp), args.devices)
        try:
            counts = [int(x) for x in args.curve.split(",") if x] or [args.shards]
            bare = base = None
            for shards in counts:
                if "a" in args.only:
                    bare = scenario_a(bench, args.messages, results, shards, bare)
                if "b" in args.only:
                    base = scenario_b(bench, args.batched_readings, args.baseline_batch_rows,
                                      results, shards, base)
            if "c" in args.only:
                scenario_c(bench, args.naive_messages, results)
        finally:
            bench.close()
    print()
    print("machine:", machine())
    print(json.dumps({k: round(v, 3) for k, v in results.items()}, indent=2))
    for key, goal in GOALS.items():
        ratio = results.get(f"{key}_ratio")
        if ratio is not None:
            verdict = "meets" if ratio >= goal else "MISSES"
            print(f"({key}) ratio {ratio:.2f} {verdict} the goal >= {goal:g}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
