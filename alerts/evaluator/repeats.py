"""Reminders of rules that stay firing (docs/alerts.md "Repeat interval").

A rule with `repeat_interval` announces a firing state again each interval it stays firing:
the sweep copies the state's firing event as a new `firing` event ("Still firing: ...", the
body with `repeat: true` and the first event's id), which the deliverer fans out like any
event (silences and quiet hours apply). The state's `notified_at` is set in the same
transaction, so a restarted evaluator neither loses nor doubles a reminder. Measured from the
newer of the firing event's creation and the last reminder.
"""

from __future__ import annotations

import psycopg

_REMIND = """
WITH due AS (
    SELECT s.rule_id, s.device, s.event_id FROM alert_states s
    JOIN alert_rules r ON r.id = s.rule_id
    JOIN alert_events e ON e.id = s.event_id
    WHERE s.status = 'firing' AND r.active AND r.repeat_interval_s IS NOT NULL
      AND e.kind = 'firing'
      AND greatest(coalesce(s.notified_at, e.created_at), e.created_at)
          <= now() - make_interval(secs => r.repeat_interval_s)
    FOR UPDATE OF s
), marked AS (
    UPDATE alert_states s SET notified_at = now() FROM due
    WHERE s.rule_id = due.rule_id AND s.device = due.device RETURNING s.rule_id
)
INSERT INTO alert_events (org_id, kind, rule_id, device, location_id, column_name, value, unit,
                          at, title, body, channels)
SELECT e.org_id, 'firing', e.rule_id, e.device, e.location_id, e.column_name, e.value, e.unit,
       e.at, 'Still firing: ' || e.title,
       coalesce(e.body, '{}'::jsonb) || jsonb_build_object('repeat', true,
                                                          'first_event', e.id::text),
       e.channels
FROM due JOIN alert_events e ON e.id = due.event_id
"""  # `marked` runs whether or not it is read (a data-modifying WITH always does)


def remind(conn: psycopg.Connection) -> int:
    """Write the reminders now due (in the caller's transaction); how many."""
    return conn.execute(_REMIND).rowcount
