"""The evaluator's SQL: the values rules read (readings, rollup buckets, health reports, last
contact, quarantine counts), and the states, cursors and events it writes.

Every write of one evaluation pass happens in the caller's one transaction
(alerts/evaluate_pass.py), so an event, the state change it records and the cursor past its
sample commit together.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from datetime import datetime
from typing import Any
from uuid import UUID

import psycopg
from psycopg import sql
from psycopg.types.json import Jsonb

from alerts.machine import State

# Rows of the readings-like sources newer than each device's cursor, in (device, time) order.
_SAMPLES = """
SELECT s.device, s.time, s.location{cols}
FROM {table} s
JOIN unnest(%(devices)s::text[], %(since)s::timestamptz[]) AS k(device, since)
  ON s.device = k.device AND s.time > k.since
ORDER BY s.device, s.time
"""
# Rollup buckets rewritten since the watermark, not older than each device's newest bucket
# applied (>=: the current bucket is recomputed as its readings arrive, and re-evaluated).
_BUCKETS = """
SELECT s.device, s.time, s.location{cols}
FROM {table} s
JOIN unnest(%(devices)s::text[], %(since)s::timestamptz[]) AS k(device, since)
  ON s.device = k.device AND s.time >= k.since
WHERE s.update_time > %(watermark)s
ORDER BY s.device, s.time
"""


def samples(conn: psycopg.Connection, table: str, cols: list[str], since: dict[str, datetime],
            *, watermark: datetime | None = None
            ) -> Iterator[tuple[str, datetime, UUID | None, dict[str, float | None]]]:
    """(device, time, location, {column: value}) of `table` after each device's cursor; for a
    rollup table (`watermark` given), the buckets rewritten after the watermark."""
    if not since or not cols:
        return
    query = sql.SQL(_BUCKETS if watermark is not None else _SAMPLES).format(
        table=sql.Identifier(table),
        cols=sql.SQL("").join(sql.SQL(", s.{}").format(sql.Identifier(c)) for c in cols))
    devices = list(since)
    params: dict[str, Any] = {"devices": devices, "since": [since[d] for d in devices],
                              "watermark": watermark}
    with conn.cursor() as cur:
        for row in cur.execute(query, params):
            yield row[0], row[1], row[2], dict(zip(cols, row[3:], strict=True))


def minutes_silent(conn: psycopg.Connection, devices: list[str]) -> dict[str, float]:
    """Minutes since each device's newest readings message arrived (devices that never sent
    one are left out: nothing to be silent about yet)."""
    rows = conn.execute(
        "SELECT name, extract(epoch FROM now() - last_post) / 60 FROM devices"
        " WHERE name = ANY(%s) AND last_post IS NOT NULL", (devices,))
    return {name: float(minutes) for name, minutes in rows}


def quarantined_last_hour(conn: psycopg.Connection, devices: list[str]) -> dict[str, float]:
    """Quarantined messages of each device received in the last hour (0 when none)."""
    rows = conn.execute(
        "SELECT device, count(*) FROM quarantine WHERE device = ANY(%s)"
        " AND received_at > now() - interval '1 hour' GROUP BY device", (devices,))
    found = dict.fromkeys(devices, 0.0)
    found.update({device: float(n) for device, n in rows})
    return found


def load_states(conn: psycopg.Connection) -> dict[tuple[UUID, str], State]:
    """Every stored (rule, device) state."""
    rows = conn.execute("SELECT rule_id, device, status, since, clearing_since, at, value"
                        " FROM alert_states")
    return {(r[0], r[1]): State(r[2], r[3], r[4], r[5], r[6]) for r in rows}


def load_cursors(conn: psycopg.Connection) -> dict[tuple[str, str], datetime]:
    """Every cursor: (source, device) -> time ('' device: a rollup table's watermark)."""
    return {(s, d): at for s, d, at in conn.execute("SELECT source, device, at FROM alert_cursors")}


def save_states(conn: psycopg.Connection,
                rows: Iterable[tuple[UUID, str, UUID, State, UUID | None]]) -> None:
    """Upsert (rule, device, org, state, firing event id) rows."""
    params = [(rule, device, org, s.status, s.since, s.clearing_since, s.value, s.at, event)
              for rule, device, org, s, event in rows]
    if not params:
        return
    with conn.cursor() as cur:
        cur.executemany(
            "INSERT INTO alert_states (rule_id, device, org_id, status, since, clearing_since,"
            " value, at, event_id) VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s)"
            " ON CONFLICT (rule_id, device) DO UPDATE SET status = EXCLUDED.status,"
            " since = EXCLUDED.since, clearing_since = EXCLUDED.clearing_since,"
            " value = EXCLUDED.value, at = EXCLUDED.at,"
            " event_id = coalesce(EXCLUDED.event_id, alert_states.event_id), updated_at = now()",
            params)


def save_cursors(conn: psycopg.Connection, cursors: dict[tuple[str, str], datetime]) -> None:
    """Upsert cursors (one statement, whatever their number)."""
    if not cursors:
        return
    keys = list(cursors)
    conn.execute(
        "INSERT INTO alert_cursors (source, device, at)"
        " SELECT * FROM unnest(%s::text[], %s::text[], %s::timestamptz[])"
        " ON CONFLICT (source, device) DO UPDATE SET at = EXCLUDED.at",
        ([k[0] for k in keys], [k[1] for k in keys], [cursors[k] for k in keys]))


def insert_events(conn: psycopg.Connection, events: list[dict[str, Any]]) -> None:
    """Insert event rows (each with its id already chosen)."""
    if not events:
        return
    with conn.cursor() as cur:
        cur.executemany(
            "INSERT INTO alert_events (id, org_id, kind, rule_id, device, location_id,"
            " column_name, value, unit, at, title, body, channels) VALUES (%(id)s, %(org_id)s,"
            " %(kind)s, %(rule_id)s, %(device)s, %(location_id)s, %(column_name)s, %(value)s,"
            " %(unit)s, %(at)s, %(title)s, %(body)s, %(channels)s)",
            [{**e, "body": Jsonb(e["body"])} for e in events])


def forget_rules(conn: psycopg.Connection, rule_ids: list[UUID]) -> None:
    """Drop the states of rules whose condition changed (they start again from ok)."""
    if rule_ids:
        conn.execute("DELETE FROM alert_states WHERE rule_id = ANY(%s)", (rule_ids,))


def sync_watermark(conn: psycopg.Connection) -> datetime:
    """The instant before which no rollup row's update_time can still change for a reader
    (migration 0080: the start of the oldest running transaction, less a second)."""
    row = conn.execute("SELECT sds_sync_watermark()").fetchone()
    assert row is not None
    return row[0]


def purge_events(conn: psycopg.Connection, days: int) -> int:
    """Delete events older than `days` days; the number deleted."""
    return conn.execute("DELETE FROM alert_events WHERE created_at < now() - make_interval("
                        "days => %s)", (days,)).rowcount
