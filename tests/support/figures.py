"""Reliability figures measured by the test run, written to docs/reliability.md.

Tests record what they measured through the `figures` fixture (`figures.record(...)`); at the
end of the session the values are merged into docs/reliability.json (so a partial run updates
only what it measured, and each value carries the time of the run that measured it) and
docs/reliability.md is regenerated from that file. Nothing in these files is written by hand.
Under pytest-xdist each worker exports its figures to the controller, which absorbs them and
writes once (tests/conftest.py).
"""

from __future__ import annotations

import json
import platform
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

DOCS = Path(__file__).resolve().parents[2] / "docs"
JSON_PATH = DOCS / "reliability.json"
MD_PATH = DOCS / "reliability.md"

# Display order and grouping of the figures (reliability plan, section 6).
SECTIONS: tuple[tuple[str, str], ...] = (
    ("delivery", "Delivery and ingestion"),
    ("rollup", "Late data and rollups"),
    ("time", "Time zones and DST"),
    ("scheduler", "Scheduler"),
    ("security", "Security"),
    ("recovery", "Backups and restore (RPO, RTO)"),
    ("failover", "Failover: RPO and RTO of the database profiles"),
    ("alerts", "Alerts"),
)

PROMISES = """\
## What the service promises

- **Delivery.** At least once from the broker, exactly once in the database: the ingester
  acknowledges a message only after the transaction that stored (or quarantined) it has
  committed, and stores each `(device, time)` once (`ON CONFLICT DO NOTHING`: the first write
  wins). A reading the broker acknowledged to the device is stored exactly once through ingester
  crashes, database outages and restarts, and broker restarts with SIGTERM; the ledger figures
  below are measured with missing = 0 and extra = 0.
- **Broker crash.** With the shipped settings (`persistence true`, `autosave_interval 1`), a
  broker killed with SIGKILL loses at most what was queued since its last save: about 1-2 s of
  messages for an offline ingester session. A clean stop (SIGTERM) loses nothing. Setting
  `autosave_on_changes true` only narrows that window to the last change (mosquitto sends the
  PUBACK before it saves) and divides publish throughput by 4-70 as the queue grows (measured
  below), so it is not shipped.
- **Replicated broker profile.** With `SDS_BROKER=rabbitmq-cluster` (three RabbitMQ nodes, the
  ingester's session in a quorum queue), a device's PUBACK comes after a majority of nodes stored
  the message, so a SIGKILL of any one node, the queue leader's included, loses no acknowledged
  reading (measured below, missing 0 and extra 0). With two of three nodes down nothing is
  acknowledged, so devices keep those readings and resend them once a second node is back
  (measured: 0 PUBACKs without a majority, 0 missing afterwards; the cluster took about two
  minutes to resume after the node came back).
- **Automatic failover profile.** With `SDS_DB=patroni` (three etcd members, two PostgreSQL
  nodes under Patroni, one replica synchronous), a commit returns after the replica flushed it,
  so a SIGKILL of the leader node loses no acknowledged reading; the replica leads after the
  leader key's 15 s TTL and the old leader rejoins as a replica (pg_rewind). The standby
  profile keeps the same promise through a crash, but waits for an operator to promote
  (measured below, section "Failover").
- **Stuck peers.** A database path that stops answering is cut by the ingester's write
  watchdog after `SDS_INGEST_DB_WATCHDOG` (default 30 s) and the batch retried, with no ack sent
  while stuck; a frozen broker is detected by MQTT keepalive and reconnected to after it resumes.
- **One active ingester per session.** The leader holds a PostgreSQL lock as a lease
  (`SDS_INGEST_LOCK_TIMEOUT`, default 30 s); a standby takes over when the leader dies or
  freezes, and a leader that lost its lease sends no further acks and exits. With
  `SDS_INGEST_SHARDS` > 1 each shard is such a session with its own lock and standby: 20
  SIGKILLs of shard leaders in a 20,000-message run lose nothing (missing 0, extra 0). mosquitto
  keeps a dead or offline shard's share in its session until it is resumed (measured below), so
  a removed shard's session is drained and ended with `python -m ingest --retire`.
- **Queue capacity.** `max_queued_messages` is raised from mosquitto's silent default of 1000 to
  1,000,000, so an ingester outage of a day at 500 devices (144k messages) loses nothing.
- **Bad input.** Each malformed or implausible message or reading is quarantined with its reason
  and acknowledged; good readings beside it are stored; bad input never stalls the pipeline.
  Whatever one element of an array holds, only that element is quarantined (the hostile-element
  property below: 0 `internal_error`). One message writes at most 100 quarantine rows plus a
  summary row (`SDS_INGEST_QUARANTINE_ROWS_PER_MESSAGE`), and three of the largest `[1,1,...]`
  messages keep the ingester under 200 MB of memory; quarantine rows are deleted after
  `SDS_QUARANTINE_RETENTION_DAYS` (30).
- **What one device can make the service store.** The broker refuses a message above the
  largest legitimate one (a week's backlog with every field: 1,393,056 bytes;
  `SDS_INGEST_MAX_PAYLOAD` 1.5 MiB, `max_packet_size` that plus 4 KiB): the publisher gets no
  PUBACK and is disconnected (MQTT 5 reason 0x95). A quarantine row keeps at most 4096 bytes of
  its payload with the size and SHA-256 of the whole. Each device may fill the quarantine with
  at most 1 MiB per clock hour and 32 MiB within the retention (on-disk cost of its rows);
  past that its rejections are counted by device, hour and reason (`quarantine_unkept`,
  `sds_ingest_quarantine_unkept_total{device}`, alarm `SdsQuarantineBudgetExceeded`), not
  kept, and other devices' readings are stored as ever (the junk flood figure below: the
  quarantine's growth against the 1 MiB budget, the other device's ledger whole).
- **Broker identity.** On the shipped broker a client's id is its user name: a device cannot
  take the ingester's session or knock another device off (0 acknowledged readings missing while
  a device connects with the ingester's client id). Whatever a device publishes under its own
  topic is stored or quarantined once; the broker keeps no retained message from a client (the
  flag is stripped), so a retained flood costs it no memory or store (measured below).
- **Broker stays up.** The shipped mosquitto (2.0.21 with the project's session-expiry patch)
  survives the rotation recipe that crashed 2.0.11 (a password rotated while a persistent
  session is offline, then a clean start), and the same with a shard's session and
  `python -m ingest --retire`: new connections stay up (measured below).
- **Lateness horizon.** Readings up to `SDS_INGEST_HORIZON_DAYS` (default 400) days old are
  accepted and their hourly, local-hourly and daily buckets recomputed; older ones are
  quarantined with reason `too_old`.
- **Slow clients** cannot exhaust the API: the nginx edge reads whole requests (header within
  10 s) before gunicorn sees them; `/api/v2/health` stays under 100 ms at p99 through 50
  slow-header connections, while the same attack on gunicorn alone stops it (figures below).
- **Rollups** are recomputed from raw rows (never incremented), so repeats and races cannot
  double count; a late reading recomputes about one bucket per rollup table.
"""


@dataclass
class Figure:
    """One measured value."""

    key: str
    section: str
    title: str
    value: Any
    target: str
    source: str
    measured_at: str = ""


class Figures:
    """Collects figures during a test session and writes the documents at its end."""

    def __init__(self) -> None:
        self._new: dict[str, Figure] = {}

    def record(self, key: str, value: Any, *, section: str, title: str, target: str,
               source: str) -> None:
        """Record `value` for figure `key` (later records in the same run replace earlier)."""
        if section not in dict(SECTIONS):
            raise ValueError(f"unknown section {section!r}")
        self._new[key] = Figure(key, section, title, value, target, source,
                                datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"))

    @property
    def recorded(self) -> dict[str, Figure]:
        """Figures recorded in this session."""
        return dict(self._new)

    def export(self) -> list[dict[str, Any]]:
        """This session's figures as plain data (what an xdist worker sends its controller)."""
        return [asdict(fig) for fig in self._new.values()]

    def absorb(self, exported: list[dict[str, Any]]) -> None:
        """Take in figures another session (an xdist worker) exported; of two records of one
        key the later measurement wins, as within one session."""
        for row in exported:
            fig = Figure(**row)
            mine = self._new.get(fig.key)
            if mine is None or mine.measured_at <= fig.measured_at:
                self._new[fig.key] = fig

    def write(self) -> None:
        """Merge this session's figures into the JSON file and regenerate the Markdown."""
        if not self._new:
            return
        DOCS.mkdir(exist_ok=True)
        merged: dict[str, dict[str, Any]] = {}
        if JSON_PATH.exists():
            try:
                merged = json.loads(JSON_PATH.read_text()).get("figures", {})
            except (ValueError, AttributeError):
                merged = {}
        for key, fig in self._new.items():
            merged[key] = asdict(fig)
        doc = {"generated_by": "the test suite (tests/support/figures.py)",
               "machine": f"{platform.python_implementation()} {platform.python_version()} "
                          f"on {platform.machine()}",
               "figures": dict(sorted(merged.items()))}
        JSON_PATH.write_text(json.dumps(doc, indent=2, default=str) + "\n")
        MD_PATH.write_text(render(doc))


def _fmt(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.3g}" if abs(value) < 1000 else f"{value:,.0f}"
    if isinstance(value, dict):
        return ", ".join(f"{k} {_fmt(v)}" for k, v in value.items())
    return str(value)


def render(doc: dict[str, Any]) -> str:
    """The Markdown page for a figures document."""
    figures = doc["figures"]
    out = [
        "# Reliability figures",
        "",
        "Generated by the test run (`deploy/test.sh`) from docs/reliability.json; do not edit by",
        "hand. Each value carries the time of the run that measured it. The scenarios behind",
        "them are the reliability plan's R- and S-tests (see `tests/`).",
        "",
        PROMISES,
    ]
    for section, heading in SECTIONS:
        rows = [f for f in figures.values() if f["section"] == section]
        if not rows:
            continue
        out += [f"## {heading}", "", "| Figure | Value | Target | Source test | Measured |",
                "|---|---|---|---|---|"]
        for f in rows:
            out.append(f"| {f['title']} | {_fmt(f['value'])} | {f['target']} | "
                       f"`{f['source']}` | {f['measured_at']} |")
        out.append("")
    return "\n".join(out)
