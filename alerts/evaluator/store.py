"""The evaluator's SQL: the values rules read (readings, rollup buckets, health reports, last
contact, quarantine counts), and the states, cursors and events it writes.

Every write of one evaluation pass happens in the caller's one transaction
(alerts/evaluator/passes.py), so an event, the state change it records and the cursor past its
sample commit together.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from datetime import datetime
from typing import Any
from uuid import UUID

import psycopg
from psycopg import sql
from psycopg.rows import class_row
from psycopg.types.json import Jsonb

from alerts.evaluator.machine import State
from alerts.evaluator.rows import Cursor, NewEvent, StateChange, StoredState
from shared.alertrules import QUARANTINE_WINDOW_S

# Rows of the readings-like sources newer than each device's cursor, in (device, time) order.
# LATERAL with OFFSET 0 (which keeps the planner from flattening it into a join): one index
# range scan per device (PRIMARY KEY (device, time)), whatever the chunk holds. A plain join
# was planned as a merge join over the whole chunk's index, every row since the chunk began
# (12,000 rows read to return 6,000 an hour into a chunk; a week in, 2 million per pass).
# The per-device arrays go as binary parameters (%b): psycopg's text array dumper runs two
# regular expressions per element to quote it (a tenth of the evaluator's CPU in a profile of
# bench.alerts, 1,000 devices a pass).
_SAMPLES = """
SELECT k.device, s.time, s.location{cols}
FROM unnest(%(devices)b::text[], %(since)b::timestamptz[]) AS k(device, since)
CROSS JOIN LATERAL (
    SELECT * FROM {table} c WHERE c.device = k.device AND c.time > k.since OFFSET 0) AS s
ORDER BY k.device, s.time
"""
# Rollup buckets rewritten since the watermark, not older than each device's newest bucket
# applied (>=: the current bucket is recomputed as its readings arrive, and re-evaluated).
_BUCKETS = """
SELECT k.device, s.time, s.location{cols}
FROM unnest(%(devices)b::text[], %(since)b::timestamptz[]) AS k(device, since)
CROSS JOIN LATERAL (
    SELECT * FROM {table} c WHERE c.device = k.device AND c.time >= k.since
    AND c.update_time > %(watermark)s OFFSET 0) AS s
ORDER BY k.device, s.time
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
        " AND received_at > now() - make_interval(secs => %s) GROUP BY device",
        (devices, QUARANTINE_WINDOW_S))
    found = dict.fromkeys(devices, 0.0)
    found.update({device: float(n) for device, n in rows})
    return found


def load_states(conn: psycopg.Connection) -> dict[tuple[UUID, str], State]:
    """Every stored (rule, device) state."""
    with conn.cursor(row_factory=class_row(StoredState)) as cur:
        rows = cur.execute("SELECT rule_id, device, status, since, clearing_since, at, value"
                           " FROM alert_states").fetchall()
    return {(r.rule_id, r.device): r.state() for r in rows}


def load_cursors(conn: psycopg.Connection) -> dict[tuple[str, str], datetime]:
    """Every cursor: (source, device) -> time ('' device: a rollup table's watermark)."""
    with conn.cursor(row_factory=class_row(Cursor)) as cur:
        rows = cur.execute("SELECT source, device, at FROM alert_cursors").fetchall()
    return {(c.source, c.device): c.at for c in rows}


def save_states(conn: psycopg.Connection, rows: Iterable[StateChange]) -> None:
    """Upsert changed states (with their firing event ids), in one statement."""
    found = list(rows)
    if not found:
        return
    columns = list(zip(*[(c.rule_id, c.device, c.org_id, c.state.status, c.state.since,
                          c.state.clearing_since, c.state.value, c.state.at, c.event_id)
                         for c in found], strict=True))
    conn.execute(
        "INSERT INTO alert_states (rule_id, device, org_id, status, since, clearing_since,"
        " value, at, event_id) SELECT * FROM unnest(%s::uuid[], %s::text[], %s::uuid[],"
        " %s::text[], %s::timestamptz[], %s::timestamptz[], %s::float8[], %s::timestamptz[],"
        " %s::uuid[])"
        " ON CONFLICT (rule_id, device) DO UPDATE SET status = EXCLUDED.status,"
        " since = EXCLUDED.since, clearing_since = EXCLUDED.clearing_since,"
        " value = EXCLUDED.value, at = EXCLUDED.at,"
        " event_id = coalesce(EXCLUDED.event_id, alert_states.event_id), updated_at = now()",
        [list(c) for c in columns])


def save_cursors(conn: psycopg.Connection, cursors: dict[tuple[str, str], datetime]) -> None:
    """Upsert cursors (one statement, whatever their number)."""
    if not cursors:
        return
    keys = list(cursors)
    conn.execute(
        "INSERT INTO alert_cursors (source, device, at)"
        " SELECT * FROM unnest(%b::text[], %b::text[], %b::timestamptz[])"
        " ON CONFLICT (source, device) DO UPDATE SET at = EXCLUDED.at",
        ([k[0] for k in keys], [k[1] for k in keys], [cursors[k] for k in keys]))


def insert_events(conn: psycopg.Connection, events: list[NewEvent]) -> None:
    """Insert event rows (each with its id already chosen), in one statement: the rows go as
    one JSON array (COPY is refused on a table with row-level security). An id already there
    is the same event written again (alerts/passes.event_id_of): kept once."""
    if not events:
        return
    rows = [e.json() for e in events]
    conn.execute(
        "INSERT INTO alert_events (id, org_id, kind, rule_id, device, location_id, column_name,"
        " value, unit, at, title, body, channels)"
        " SELECT id, org_id, kind, rule_id, device, location_id, column_name, value, unit, at,"
        " title, body, channels FROM jsonb_to_recordset(%s) AS e(id uuid, org_id uuid,"
        " kind text, rule_id uuid, device text, location_id uuid, column_name text,"
        " value float8, unit text, at timestamptz, title text, body jsonb, channels uuid[])"
        " ON CONFLICT (id) DO NOTHING", (Jsonb(rows),))


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
