"""The daily digest (docs/alerts.md "Daily digest"): once a day per organisation that turned
it on, at its hour in its time zone, one `digest` event summarising the firing and resolved
events of the last 24 hours, written by the deliverer's fan-out loop. The event is
`admins_only`, so the fan-out (alerts/delivery/outbox.py) gives it one delivery to the
organisation's owners and administrators by email, retried like any delivery. `last_day` is
set in the same statement, so two deliverers (or a restart) write one digest a day.
"""

from __future__ import annotations

import psycopg

LISTED = 50  # events named one by one in a digest; the counts cover all

_WRITE = """
WITH due AS (
    SELECT d.org_id, sds_local_time(now(), d.time_zone)::date AS today FROM alert_digests d
    WHERE d.active AND extract(hour FROM sds_local_time(now(), d.time_zone)) >= d.hour
      AND (d.last_day IS NULL OR d.last_day < sds_local_time(now(), d.time_zone)::date)
    FOR UPDATE SKIP LOCKED
), marked AS (
    UPDATE alert_digests d SET last_day = due.today FROM due WHERE d.org_id = due.org_id
    RETURNING d.org_id
), summary AS (
    SELECT due.org_id, due.today,
           count(e.id) FILTER (WHERE e.kind = 'firing') AS firing,
           count(e.id) FILTER (WHERE e.kind = 'resolved') AS resolved,
           count(e.id) FILTER (WHERE e.kind = 'firing' AND e.acknowledged_at IS NULL) AS open
    FROM due LEFT JOIN alert_events e ON e.org_id = due.org_id
        AND e.kind IN ('firing', 'resolved') AND e.created_at > now() - interval '24 hours'
    GROUP BY due.org_id, due.today
)
INSERT INTO alert_events (org_id, kind, at, title, body, admins_only, acknowledged_at)
SELECT s.org_id, 'digest', now(),
       format('Daily digest %%s: %%s firing, %%s resolved, %%s not acknowledged', s.today,
              s.firing, s.resolved, s.open),
       jsonb_build_object('day', s.today::text, 'firing', s.firing, 'resolved', s.resolved,
                          'unacknowledged', s.open, 'events', coalesce((
           SELECT jsonb_agg(jsonb_build_object('id', x.id::text, 'kind', x.kind,
                                               'title', x.title, 'device', x.device,
                                               'at', x.at) ORDER BY x.created_at DESC)
           FROM (SELECT * FROM alert_events e WHERE e.org_id = s.org_id
                 AND e.kind IN ('firing', 'resolved')
                 AND e.created_at > now() - interval '24 hours'
                 ORDER BY e.created_at DESC LIMIT %(listed)s) x), '[]'::jsonb)),
       true, now()
FROM summary s
"""


def write_due(conn: psycopg.Connection) -> int:
    """Write the digests now due (one transaction); how many."""
    with conn.transaction():
        return conn.execute(_WRITE, {"listed": LISTED}).rowcount
