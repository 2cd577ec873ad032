"""What the dashboard pages read: devices with health badges, one device, and bad data.

Device records come from the API's own code (`serve.api.devices`); bad data from the view
`org_quarantine` (migration 0070), which shows only the rows of the caller's organisation's
devices. Every query runs on a pooled connection scoped to the signed-in caller's
organisation (the API role under row-level security), and also names the organisation
itself, as the API's queries do. Functions take `conn` first and never commit.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any
from uuid import UUID

import psycopg
from psycopg import sql
from psycopg.rows import dict_row

from serve.args import MAX_LIMIT
from serve.readmodels import device_record, fetch_devices, fetch_devices_by_id
from shared.config import Settings

QUARANTINE_PAGE = 50  # rows per page of a bad-data listing
RECENT = timedelta(days=1)  # "quarantine in the last day" badge


@dataclass(frozen=True, slots=True)
class Badge:
    """One health flag of a device: a short label, its level (ok, warn, bad) and why."""

    label: str
    level: str
    why: str


def badges(record: dict[str, Any], quarantined: int, settings: Settings,
           now: datetime) -> list[Badge]:
    """Health badges of a device record: silent for more than N reporting intervals (or never
    heard from), low battery, quarantine in the last day; a single `ok` when none applies."""
    found: list[Badge] = []
    interval = record.get("sync_interval") or 300
    last = record.get("last_seen")
    seen = datetime.fromisoformat(last) if isinstance(last, str) else None
    if seen is None:
        found.append(Badge("never seen", "warn", "no message from this device yet"))
    else:
        silent = now - seen
        if silent > timedelta(seconds=interval * settings.dashboard_silent_intervals):
            found.append(Badge(f"silent {_span(silent)}", "bad",
                               f"no message for more than {settings.dashboard_silent_intervals}"
                               f" reporting intervals of {interval} s"))
    battery = record.get("batt_pct")
    if battery is not None and battery < settings.dashboard_low_battery_pct:
        found.append(Badge(f"battery {battery:.0f}%", "warn",
                           f"below {settings.dashboard_low_battery_pct:g}%"))
    if quarantined:
        found.append(Badge(f"{quarantined} quarantined", "warn",
                           "readings or messages rejected in the last 24 hours"))
    return found or [Badge("ok", "ok", "reporting, battery fine, no bad data in 24 hours")]


def _span(delta: timedelta) -> str:
    """'3 d', '5 h', '12 min': the largest whole unit."""
    seconds = int(delta.total_seconds())
    if seconds >= 86400:
        return f"{seconds // 86400} d"
    if seconds >= 3600:
        return f"{seconds // 3600} h"
    return f"{max(seconds // 60, 1)} min"


def device_list(conn: psycopg.Connection, *, org: UUID, settings: Settings,
                limit: int = MAX_LIMIT) -> list[dict[str, Any]]:
    """The organisation's devices (API records, by name), each with `badges` and
    `quarantined` (rows in the last day)."""
    rows = fetch_devices(conn, org=org, limit=limit, offset=0)
    counts: dict[str, int] = dict(conn.execute(
        "SELECT device, count(*) FROM org_quarantine WHERE received_at > now() - %s"
        " GROUP BY device", (RECENT,)).fetchall())
    now = datetime.now(UTC)
    out = []
    for row in rows:
        record = device_record(row)
        record["quarantined"] = counts.get(row["name"], 0)
        record["badges"] = badges(record, record["quarantined"], settings, now)
        out.append(record)
    return out


def visible_teams(conn: psycopg.Connection, *, org: UUID) -> int:
    """How many of the organisation's teams the caller sees: for a teams-only member (the
    database policies of migration 0155) the teams they are in."""
    row = conn.execute("SELECT count(*) FROM teams WHERE org_id = %s", (org,)).fetchone()
    return int(row[0]) if row else 0


def device(conn: psycopg.Connection, *, org: UUID, name: str) -> dict[str, Any] | None:
    """The API record of the organisation's device called `name`, or None."""
    row = conn.execute("SELECT id FROM devices WHERE name = %s AND org_id = %s",
                       (name, org)).fetchone()
    if row is None:
        return None
    found = fetch_devices_by_id(conn, org=org, ids=[row[0]])
    return device_record(found[row[0]]) if row[0] in found else None




def quarantine_rows(conn: psycopg.Connection, *, device: str | None, before: int | None,
                    with_payload: bool, limit: int = QUARANTINE_PAGE) -> list[dict[str, Any]]:
    """Newest first, `limit` rows of the organisation's quarantine (of one device when given)
    with id below `before`. `payload` (bytes) only `with_payload` (administrators)."""
    columns = "id, received_at, topic, device, reason, detail, reading_index, payload_bytes"
    where: list[sql.Composable] = [sql.SQL("true")]
    params: list[Any] = []
    if device is not None:
        where.append(sql.SQL("device = %s"))
        params.append(device)
    if before is not None:
        where.append(sql.SQL("id < %s"))
        params.append(before)
    params.append(limit)
    stmt = sql.SQL("SELECT {}{} FROM org_quarantine WHERE {} ORDER BY id DESC LIMIT %s").format(
        sql.SQL(columns), sql.SQL(", payload" if with_payload else ""),
        sql.SQL(" AND ").join(where))
    with conn.cursor(row_factory=dict_row) as cur:
        return cur.execute(stmt, params).fetchall()


def quarantine_counts(conn: psycopg.Connection, *, device: str | None, days: int
                      ) -> tuple[list[str], list[str], dict[str, list[int]]]:
    """Rows per UTC day and reason over the last `days` days: (days as YYYY-MM-DD, reasons
    by total descending, counts per reason aligned with the days)."""
    today = datetime.now(UTC).date()
    first = today - timedelta(days=days - 1)
    params: list[Any] = [datetime(first.year, first.month, first.day, tzinfo=UTC)]
    device_filter = sql.SQL("")
    if device is not None:
        device_filter = sql.SQL(" AND device = %s")
        params.append(device)
    rows = conn.execute(sql.SQL(
        "SELECT (received_at AT TIME ZONE 'UTC')::date AS day, reason, count(*)"
        " FROM org_quarantine WHERE received_at >= %s{} GROUP BY 1, 2").format(device_filter),
        params).fetchall()
    day_list = [(first + timedelta(days=i)).isoformat() for i in range(days)]
    index = {d: i for i, d in enumerate(day_list)}
    series: dict[str, list[int]] = {}
    for day, reason, count in rows:
        series.setdefault(reason, [0] * days)[index[day.isoformat()]] = count
    ordered = sorted(series, key=lambda r: (-sum(series[r]), r))
    return day_list, ordered, {r: series[r] for r in ordered}


def quarantine_payload(conn: psycopg.Connection, *, row_id: int) -> dict[str, Any] | None:
    """One quarantine row of the organisation with its raw payload (a prefix when `truncated`:
    `payload_bytes` and `payload_sha256` are then those of the payload as received), or None."""
    with conn.cursor(row_factory=dict_row) as cur:
        return cur.execute(
            "SELECT id, received_at, topic, device, reason, detail, reading_index,"
            " payload_bytes, payload, payload_sha256, truncated, kept_bytes"
            " FROM org_quarantine WHERE id = %s", (row_id,)).fetchone()


def quarantine_total(conn: psycopg.Connection, *, device: str | None) -> int:
    """All quarantine rows of the organisation (of one device when given)."""
    if device is None:
        row = conn.execute("SELECT count(*) FROM org_quarantine").fetchone()
    else:
        row = conn.execute("SELECT count(*) FROM org_quarantine WHERE device = %s",
                           (device,)).fetchone()
    return int(row[0]) if row else 0
