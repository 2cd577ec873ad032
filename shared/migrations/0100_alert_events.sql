-- Alert events (docs/alerts.md): the outbox of notifications. The evaluator (alerts.evaluate)
-- inserts `firing` and `resolved`; the deliverer (alerts.delivery) inserts `channel_disabled`
-- and `test` and delivers every row at least once. The row's id is the webhook-id of every
-- delivery of it, so a duplicate delivery carries the same id.

CREATE TABLE alert_events (
    id           uuid PRIMARY KEY DEFAULT gen_random_uuid(),  -- the webhook-id of every delivery of it
    org_id       uuid NOT NULL REFERENCES organisations (id) ON DELETE CASCADE,
    kind         text NOT NULL CHECK (kind IN ('firing', 'resolved', 'channel_disabled', 'test')),
    rule_id      uuid,            -- NULL for channel_disabled/test; FK to alert_rules added by 0101
    device       text,            -- device name, when the event is about one device
    location_id  uuid,            -- when the rule's scope is a location
    column_name  text,            -- registry column (or the built-in kind: 'silent', 'battery', 'quarantine')
    value        double precision,-- triggering value, canonical unit
    unit         text,            -- canonical unit of value
    at           timestamptz NOT NULL,  -- time of the reading/bucket that triggered it
    title        text NOT NULL,   -- one line for humans ("Frost: tair < 0 °C for 15 min at dev-1")
    body         jsonb NOT NULL DEFAULT '{}',  -- the full event as delivered (rule name, condition, threshold, ...)
    channels     uuid[],          -- NULL = every active channel of the org; else only these
    admins_only  boolean NOT NULL DEFAULT false,  -- channel_disabled: email only the org's admins
    created_at   timestamptz NOT NULL DEFAULT now(),
    acknowledged_at timestamptz,
    acknowledged_by uuid
);

-- The notifications listing: newest first, keyset-paged on (created_at, id).
CREATE INDEX alert_events_org_created_idx ON alert_events (org_id, created_at DESC, id);

-- The deliverer LISTENs on this channel and wakes at once; the payload is the event's id.
-- NOTIFY is sent at commit, so a listener never sees an id whose row is not yet visible.
CREATE FUNCTION sds_alert_event_notify() RETURNS trigger
LANGUAGE plpgsql SET search_path = pg_catalog, public
AS $fn$
BEGIN
    PERFORM pg_notify('sds_alert_events', NEW.id::text);
    RETURN NULL;
END
$fn$;

CREATE TRIGGER alert_events_notify AFTER INSERT ON alert_events
    FOR EACH ROW EXECUTE FUNCTION sds_alert_event_notify();

-- Row-level security like the other tenant tables (0050): the API role sees and changes its
-- organisation's rows only; the owner's access is the visible `owner_all` policy.
ALTER TABLE alert_events ENABLE ROW LEVEL SECURITY;
ALTER TABLE alert_events FORCE ROW LEVEL SECURITY;
CREATE POLICY owner_all ON alert_events TO CURRENT_USER USING (true) WITH CHECK (true);
CREATE POLICY api_tenant ON alert_events TO sds_api
    USING (org_id = sds_request_org()) WITH CHECK (org_id = sds_request_org());

-- The API lists events, acknowledges them, and inserts the `test` event of "send test".
GRANT SELECT, INSERT ON alert_events TO sds_api;
GRANT UPDATE (acknowledged_at, acknowledged_by) ON alert_events TO sds_api;
