-- The dashboard's bad-data pages (docs/dashboard.md): the API role reads the quarantine rows of
-- its organisation's devices through the view `org_quarantine`, never the table itself.
-- Not row-level security on `quarantine`: the ingester writes it with COPY FROM, which
-- PostgreSQL refuses on a table whose policies apply to the writer. The view runs with its
-- owner's rights (the migrating role, like every table's) and filters by the request's
-- organisation itself: sds_request_org() is NULL without app.org_id, so nothing matches then.
-- security_barrier: a caller's own predicates cannot run before the organisation filter.
-- Rows of unregistered devices (unknown_device, bad_topic) belong to no organisation: operators
-- read them with `psql` as the owner.

CREATE VIEW org_quarantine WITH (security_barrier) AS
SELECT q.id, q.received_at, q.topic, q.device, q.reason, q.detail, q.reading_index,
       octet_length(q.payload) AS payload_bytes, q.payload
FROM quarantine q
JOIN devices d ON d.name = q.device
WHERE d.org_id = sds_request_org();

GRANT SELECT ON org_quarantine TO sds_api;

-- A device's bad data by time (the per-device page, and the health badge's last day).
CREATE INDEX quarantine_device_idx ON quarantine (device, received_at);
