"""The deliverer's SQL: fan events out into deliveries, claim one due delivery, record its end.

Fan-out is idempotent (unique event x channel; ON CONFLICT DO NOTHING), so deliverers may run
it concurrently or be killed half-way. A claim is `SELECT ... FOR UPDATE OF d SKIP LOCKED` held
for the whole attempt: two deliverers never send one row at once, and a deliverer killed
mid-attempt leaves the row pending (its lock ends with its session) to be sent again, with the
same event id (at least once). Failures count on the channel; the Nth in a row disables it and
writes a `channel_disabled` event for the organisation's administrators. What a receiver said
is stored through `stored_reason` only (escaped, bounded): a NUL from a hostile status line must
not make the record itself fail.
"""

from __future__ import annotations

import re
from datetime import timedelta
from typing import Any

import psycopg
from psycopg import sql
from psycopg.rows import dict_row
from psycopg.types.json import Jsonb

FANOUT_BATCH = 1000
REASON_MAX = 500  # characters of a stored error or disabled reason
# What PostgreSQL text cannot hold (NUL) or a reader should not get raw: C0 and C1 controls,
# DEL, lone surrogates (undecodable bytes kept by surrogateescape, which UTF-8 cannot encode),
# and the backslash (so an escape in the stored text always means an escape).
_UNSAFE = re.compile(r"[\x00-\x1f\x7f-\x9f\\\ud800-\udfff]")

_FANOUT_SQL = """
WITH todo AS (
    SELECT e.id, e.org_id, e.kind, e.channels, e.admins_only, s.id AS silence
    FROM alert_events e
    -- The notification policy: a silence or mute matching the event when it was created
    -- (docs/alerts.md "Silences and quiet hours"); the event goes to no channel.
    LEFT JOIN LATERAL (
        SELECT s.id FROM alert_silences s
        WHERE s.org_id = e.org_id AND e.kind IN ('firing', 'resolved')
          AND (s.rule_id IS NULL OR s.rule_id = e.rule_id)
          AND (s.device IS NULL OR s.device = e.device)
          AND CASE WHEN s.kind = 'silence'
                   THEN e.created_at >= s.starts_at AND e.created_at < s.ends_at
                   ELSE sds_in_weekly_window(e.created_at, s.weekdays, s.start_minute,
                                             s.end_minute, s.time_zone) END
        ORDER BY s.created_at LIMIT 1) s ON true
    WHERE NOT EXISTS (SELECT 1 FROM alert_event_fanout f WHERE f.event_id = e.id)
    ORDER BY e.created_at LIMIT %(batch)s
), marked AS (
    INSERT INTO alert_event_fanout (event_id, silence_id) SELECT id, silence FROM todo
    ON CONFLICT DO NOTHING RETURNING event_id
), to_channels AS (
    INSERT INTO alert_deliveries (event_id, org_id, channel_id)
    SELECT t.id, t.org_id, c.id FROM todo t JOIN alert_channels c ON c.org_id = t.org_id
    WHERE NOT t.admins_only AND t.silence IS NULL
      AND (t.channels IS NULL OR c.id = ANY (t.channels))
      -- a disabled or paused channel receives nothing, tests included (issue 33)
      AND c.active AND c.disabled_at IS NULL
    ON CONFLICT DO NOTHING RETURNING 1
), to_admins AS (
    INSERT INTO alert_deliveries (event_id, org_id, channel_id)
    SELECT t.id, t.org_id, NULL FROM todo t WHERE t.admins_only
      AND (%(email)s OR EXISTS (SELECT 1 FROM org_smtp_settings s WHERE s.org_id = t.org_id))
    ON CONFLICT DO NOTHING RETURNING 1
)
SELECT (SELECT count(*) FROM marked) AS events,
       (SELECT count(*) FROM to_channels) + (SELECT count(*) FROM to_admins) AS deliveries
"""

# The deliveries a worker may claim: due, pending, to an active channel (or the admins; a
# test waits like any event while its channel is disabled). One condition for the claim and
# the backlog gauges.
_CLAIMABLE = """
WHERE d.state = 'pending' AND d.next_attempt_at <= now()
  AND (d.channel_id IS NULL OR (c.active AND c.disabled_at IS NULL))
"""

_CLAIM_SQL = sql.SQL("""
SELECT d.id AS delivery_id, d.attempts, d.channel_id, c.kind AS channel_kind,
       c.name AS channel_name, c.url, c.secret_sealed, c.recipients,
       c.format AS channel_format, c.options AS channel_options,
       e.id, e.org_id, e.kind, e.rule_id, e.device, e.location_id, e.column_name, e.value,
       e.unit, e.at, e.title, e.body, e.created_at
FROM alert_deliveries d
JOIN alert_events e ON e.id = d.event_id
LEFT JOIN alert_channels c ON c.id = d.channel_id
{claimable}
  AND NOT d.org_id = ANY (%(busy)s)
ORDER BY d.next_attempt_at
LIMIT 1
FOR UPDATE OF d SKIP LOCKED
""").format(claimable=sql.SQL(_CLAIMABLE))

_BACKLOG_SQL = sql.SQL("""
SELECT count(*) AS due,
       coalesce(extract(epoch FROM now() - min(d.next_attempt_at)), 0)::float8 AS oldest
FROM alert_deliveries d
JOIN alert_events e ON e.id = d.event_id
LEFT JOIN alert_channels c ON c.id = d.channel_id
{claimable}""").format(claimable=sql.SQL(_CLAIMABLE))


def fanout(conn: psycopg.Connection, *, email: bool) -> tuple[int, int]:
    """Fan out up to FANOUT_BATCH new events; (events marked, deliveries made). `email`: the
    service can send email (admins_only events get a delivery to the administrators)."""
    with conn.transaction(), conn.cursor(row_factory=dict_row) as cur:
        row = cur.execute(_FANOUT_SQL, {"batch": FANOUT_BATCH, "email": email}).fetchone()
    assert row is not None
    return int(row["events"]), int(row["deliveries"])


def stored_reason(text: str) -> str:
    """`text` as it may be stored and shown: controls, DEL, lone surrogates and the backslash
    written as `\\xHH` / `\\uHHHH`, at most REASON_MAX characters (cut with `...`)."""
    safe = _UNSAFE.sub(lambda m: f"\\x{ord(m.group()):02x}" if ord(m.group()) < 0x100
                       else f"\\u{ord(m.group()):04x}", text)
    return safe if len(safe) <= REASON_MAX else safe[:REASON_MAX - 3] + "..."


def claim(conn: psycopg.Connection, *, busy: list[Any] | None = None) -> dict[str, Any] | None:
    """The next due delivery with its event and channel, locked until the caller's
    transaction ends; None when nothing is due. `busy`: organisations not to claim for (their
    share of the workers is taken). Call inside a transaction."""
    with conn.cursor(row_factory=dict_row) as cur:
        return cur.execute(_CLAIM_SQL, {"busy": list(busy or [])}).fetchone()


def backlog(conn: psycopg.Connection) -> tuple[int, float]:
    """(deliveries due now that a worker may claim, seconds the oldest of them has been due)."""
    row = conn.execute(_BACKLOG_SQL).fetchone()
    assert row is not None
    return int(row[0]), float(row[1])


def admin_emails(conn: psycopg.Connection, org: Any) -> list[str]:
    """Addresses of the organisation's active owners and administrators."""
    rows = conn.execute("SELECT u.email FROM users u JOIN memberships m ON m.user_id = u.id"
                        " WHERE m.org_id = %s AND m.role IN ('owner', 'admin') AND u.active"
                        " ORDER BY u.email", (org,)).fetchall()
    return [r[0] for r in rows]


def delivered(conn: psycopg.Connection, job: dict[str, Any], status: int | None,
              answer: str | None = None) -> None:
    """Record a successful attempt (and what the receiver answered); the channel's failure
    streak ends."""
    conn.execute("UPDATE alert_deliveries SET state = 'delivered', attempts = attempts + 1,"
                 " last_attempt_at = now(), last_status = %s, last_error = NULL,"
                 " last_answer = %s, delivered_at = now() WHERE id = %s",
                 (status, stored_reason(answer) if answer else None, job["delivery_id"]))
    if job["channel_id"] is not None:
        conn.execute("UPDATE alert_channels SET consecutive_failures = 0"
                     " WHERE id = %s AND consecutive_failures <> 0", (job["channel_id"],))


def failed(conn: psycopg.Connection, job: dict[str, Any], status: int | None, error: str,
           *, retry_in: float, max_attempts: int, max_failures: int,
           answer: str | None = None) -> bool:
    """Record a failed attempt: retried after `retry_in` seconds, or given up after
    `max_attempts`. True when this failure disabled the channel. `error` is stored through
    `stored_reason`."""
    attempts = job["attempts"] + 1
    conn.execute(
        "UPDATE alert_deliveries SET attempts = %s, last_attempt_at = now(), last_status = %s,"
        " last_error = %s, last_answer = %s, state = CASE WHEN %s THEN 'failed' ELSE state END,"
        " next_attempt_at = now() + %s WHERE id = %s",
        (attempts, status, stored_reason(error), stored_reason(answer) if answer else None,
         attempts >= max_attempts,
         timedelta(seconds=retry_in), job["delivery_id"]))
    if job["channel_id"] is None:
        return False
    with conn.cursor(row_factory=dict_row) as cur:
        row = cur.execute(
            "UPDATE alert_channels SET consecutive_failures = consecutive_failures + 1"
            " WHERE id = %s RETURNING org_id, name, consecutive_failures, disabled_at",
            (job["channel_id"],)).fetchone()
        if row is None or row["disabled_at"] is not None or (
                row["consecutive_failures"] < max_failures):
            return False
        reason = stored_reason(f"{row['consecutive_failures']} failed deliveries in a row; "
                               f"last: {error}")
        cur.execute("UPDATE alert_channels SET disabled_at = now(), disabled_reason = %s,"
                    " updated_at = now() WHERE id = %s", (reason, job["channel_id"]))
        cur.execute(
            "INSERT INTO alert_events (org_id, kind, at, title, body, admins_only)"
            " VALUES (%s, 'channel_disabled', now(), %s, %s, true)",
            (row["org_id"], f"Channel {row['name']} disabled: {row['consecutive_failures']} "
             "failed deliveries in a row",
             Jsonb({"channel": {"id": str(job["channel_id"]), "name": row["name"],
                                "kind": job["channel_kind"]}, "reason": reason})))
    return True
