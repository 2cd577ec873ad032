-- Bounded quarantine (issue 30 section 4; docs/ingest.md "Bounded quarantine"). One device
-- published 604 junk messages of 2 MiB in 17 s and the quarantine kept every byte (1.3 GB, plus
-- as much again in WAL and archive). Now:
--
-- 1. A row keeps at most SDS_INGEST_QUARANTINE_PAYLOAD_MAX bytes of its payload (a prefix), with
--    the size and SHA-256 of the payload as received: payload_bytes and payload_sha256 (NULL on
--    rows written before this migration, whose payload is whole).
-- 2. Each device has a quarantine budget per clock hour and over the retention window, counted
--    in quarantine_budget (registered devices by name, everything else as '(unregistered)').
--    Past it the ingester keeps no more rows of that device: it counts them, by reason, in
--    quarantine_unkept, and raises sds_ingest_quarantine_unkept_total{device}.
ALTER TABLE quarantine ADD COLUMN payload_bytes integer;
ALTER TABLE quarantine ADD COLUMN payload_sha256 bytea;

CREATE TABLE quarantine_budget (
    device     text NOT NULL,              -- registered device name, or '(unregistered)'
    hour       timestamptz NOT NULL,       -- the UTC clock hour
    kept_rows  bigint NOT NULL DEFAULT 0,  -- quarantine rows written
    kept_bytes bigint NOT NULL DEFAULT 0,  -- their cost in the budget (ingest/quarantine.py)
    PRIMARY KEY (device, hour)
);

CREATE TABLE quarantine_unkept (
    device     text NOT NULL,
    hour       timestamptz NOT NULL,
    reason     text NOT NULL,
    rejections bigint NOT NULL DEFAULT 0,  -- rejected messages and readings not kept
    bytes      bigint NOT NULL DEFAULT 0,  -- size as received of the payloads not kept
    PRIMARY KEY (device, hour, reason)
);

-- The ingester reads and updates its own bookkeeping; it still cannot read quarantine itself.
GRANT SELECT, INSERT, UPDATE ON quarantine_budget, quarantine_unkept TO sds_ingest;

-- Retention of the bookkeeping with the rows it accounts for: like sds_quarantine_purge (0063),
-- by age only and never younger than a day, so the ingester cannot wipe recent counts.
CREATE FUNCTION sds_quarantine_ledger_purge(keep_days integer)
RETURNS bigint
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, public
AS $fn$
DECLARE
    n bigint;
    m bigint;
BEGIN
    IF keep_days IS NULL OR keep_days < 1 THEN
        RAISE EXCEPTION 'quarantine retention must keep at least 1 day, not %', keep_days;
    END IF;
    DELETE FROM quarantine_budget WHERE hour < now() - make_interval(days => keep_days);
    GET DIAGNOSTICS n = ROW_COUNT;
    DELETE FROM quarantine_unkept WHERE hour < now() - make_interval(days => keep_days);
    GET DIAGNOSTICS m = ROW_COUNT;
    RETURN n + m;
END
$fn$;
REVOKE ALL ON FUNCTION sds_quarantine_ledger_purge(integer) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION sds_quarantine_ledger_purge(integer) TO sds_ingest;

-- The dashboard's view (0155's, same filter) with the size as received, the digest and whether
-- the payload was cut. New columns go last (CREATE OR REPLACE VIEW keeps the old ones).
CREATE OR REPLACE VIEW org_quarantine WITH (security_barrier) AS
SELECT q.id, q.received_at, q.topic, q.device, q.reason, q.detail, q.reading_index,
       coalesce(q.payload_bytes, octet_length(q.payload)) AS payload_bytes, q.payload,
       q.payload_sha256,
       coalesce(q.payload_bytes > octet_length(q.payload), false) AS truncated,
       octet_length(q.payload) AS kept_bytes
FROM quarantine q
JOIN devices d ON d.name = q.device
WHERE d.org_id = sds_request_org()
  AND (NOT sds_request_teams_only() OR d.id IN (SELECT sds_request_team_device_ids()));
