-- Alert rules and their evaluation state (docs/alerts.md). The evaluator (`python -m
-- alerts.evaluate`) works as its own NOLOGIN role sds_alerts: it reads readings, rollups,
-- health reports, quarantine times and rules of every organisation, and writes the states,
-- its cursors and the events; it reads no accounts.

DO $$
DECLARE
    may_create boolean;
BEGIN
    SELECT rolsuper OR rolcreaterole INTO may_create FROM pg_roles WHERE rolname = current_user;
    IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'sds_alerts') THEN
        IF NOT may_create THEN
            RAISE EXCEPTION 'role sds_alerts does not exist and % may not create roles',
                current_user
                USING HINT = format('run deploy/services.sh start, or as a superuser: '
                                    'CREATE ROLE sds_alerts NOLOGIN; GRANT sds_alerts TO %I;',
                                    current_user);
        END IF;
        BEGIN
            CREATE ROLE sds_alerts NOLOGIN;
        EXCEPTION WHEN duplicate_object OR unique_violation THEN
            NULL;  -- a migration of another database on this cluster made it just now
        END;
    END IF;
END
$$;
GRANT USAGE ON SCHEMA public TO sds_alerts;

-- A rule: `source` is the table its values come from (calibrated, hourly, daily for kind
-- threshold; health for battery; devices for silent; quarantine for quarantine). Thresholds
-- are in the stored (canonical) unit; `units` keeps the unit parameters they were written
-- in, to show them back. Scope: device_id, or location_id, or neither (every device of org).
CREATE TABLE alert_rules (
    id                uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    org_id            uuid NOT NULL REFERENCES organisations (id) ON DELETE CASCADE,
    name              text NOT NULL CHECK (length(name) BETWEEN 1 AND 120),
    kind              text NOT NULL CHECK (kind IN ('threshold', 'silent', 'battery', 'quarantine')),
    source            text NOT NULL
                      CHECK (source IN ('calibrated', 'hourly', 'daily', 'health', 'devices',
                                        'quarantine')),
    column_name       text NOT NULL,
    device_id         uuid REFERENCES devices (id) ON DELETE CASCADE,
    location_id       uuid REFERENCES locations (id) ON DELETE CASCADE,
    op                text NOT NULL CHECK (op IN ('<', '<=', '>', '>=')),
    threshold         double precision NOT NULL,
    for_seconds       integer NOT NULL DEFAULT 0 CHECK (for_seconds BETWEEN 0 AND 31622400),
    clear_op          text NOT NULL CHECK (clear_op IN ('<', '<=', '>', '>=')),
    clear_threshold   double precision NOT NULL,
    clear_for_seconds integer NOT NULL DEFAULT 0
                      CHECK (clear_for_seconds BETWEEN 0 AND 31622400),
    units             jsonb NOT NULL DEFAULT '{}',
    channels          uuid[],
    active            boolean NOT NULL DEFAULT true,
    created_at        timestamptz NOT NULL DEFAULT now(),
    updated_at        timestamptz NOT NULL DEFAULT now(),
    CHECK (device_id IS NULL OR location_id IS NULL)
);
CREATE INDEX alert_rules_org_idx ON alert_rules (org_id, created_at, id);

-- Events keep their history when a rule is deleted (the body still names the rule).
ALTER TABLE alert_events ADD CONSTRAINT alert_events_rule_fk
    FOREIGN KEY (rule_id) REFERENCES alert_rules (id) ON DELETE SET NULL;
CREATE INDEX alert_events_rule_idx ON alert_events (rule_id, created_at DESC);
CREATE INDEX alert_events_device_idx ON alert_events (org_id, device, created_at DESC);

-- The state of one rule for one device: ok, pending (the condition holds since `since`,
-- not yet for `for_seconds`) or firing (since `since`; `clearing_since`: the clear condition
-- holds since then). `at` is the time of the newest sample applied. Written in the same
-- transaction as the event of a transition, so a restart neither loses nor repeats one.
CREATE TABLE alert_states (
    rule_id        uuid NOT NULL REFERENCES alert_rules (id) ON DELETE CASCADE,
    device         text NOT NULL,
    org_id         uuid NOT NULL REFERENCES organisations (id) ON DELETE CASCADE,
    status         text NOT NULL CHECK (status IN ('ok', 'pending', 'firing')),
    since          timestamptz,
    clearing_since timestamptz,
    value          double precision,
    at             timestamptz,
    event_id       uuid,
    updated_at     timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (rule_id, device)
);

-- How far the evaluator has read: per source table and device, the newest reading or bucket
-- time applied (`at`); for the rollups also the update_time watermark (device '').
-- Written in the transaction of the states and events it led to.
CREATE TABLE alert_cursors (
    source text NOT NULL,
    device text NOT NULL,
    at     timestamptz NOT NULL,
    PRIMARY KEY (source, device)
);

-- Row-level security like the other tenant tables (0050).
DO $$
DECLARE
    t text;
BEGIN
    FOREACH t IN ARRAY ARRAY['alert_rules', 'alert_states'] LOOP
        EXECUTE format('ALTER TABLE %I ENABLE ROW LEVEL SECURITY', t);
        EXECUTE format('ALTER TABLE %I FORCE ROW LEVEL SECURITY', t);
        EXECUTE format('CREATE POLICY owner_all ON %I TO CURRENT_USER USING (true) '
                       'WITH CHECK (true)', t);
        EXECUTE format('CREATE POLICY api_tenant ON %I TO sds_api '
                       'USING (org_id = sds_request_org()) '
                       'WITH CHECK (org_id = sds_request_org())', t);
        -- The evaluator serves every organisation; its grants are what limit it.
        EXECUTE format('CREATE POLICY alerts_all ON %I TO sds_alerts USING (true) '
                       'WITH CHECK (true)', t);
    END LOOP;
END
$$;
CREATE POLICY alerts_insert ON alert_events FOR INSERT TO sds_alerts WITH CHECK (true);
CREATE POLICY alerts_read ON alert_events FOR SELECT TO sds_alerts USING (true);

-- ---- sds_api: rules CRUD; states read (and reset when a rule's condition changes) ----------
GRANT SELECT, INSERT, UPDATE, DELETE ON alert_rules TO sds_api;
GRANT SELECT, DELETE ON alert_states TO sds_api;

-- ---- sds_alerts: the evaluator ---------------------------------------------------------------
GRANT SELECT ON alert_rules TO sds_alerts;
GRANT SELECT, INSERT, UPDATE, DELETE ON alert_states, alert_cursors TO sds_alerts;
GRANT SELECT, INSERT ON alert_events TO sds_alerts;
GRANT DELETE ON alert_events TO sds_alerts;  -- the history's retention
CREATE POLICY alerts_retention ON alert_events FOR DELETE TO sds_alerts USING (true);
GRANT SELECT (id, name, org_id, last_post, last_seen) ON devices TO sds_alerts;
GRANT SELECT ON deployments TO sds_alerts;
GRANT SELECT (id, org_id, name) ON locations TO sds_alerts;
GRANT SELECT ON calibrated, hourly, daily, health TO sds_alerts;
GRANT SELECT (device, received_at) ON quarantine TO sds_alerts;
GRANT EXECUTE ON FUNCTION sds_sync_watermark() TO sds_alerts;
CREATE POLICY alerts_read ON devices FOR SELECT TO sds_alerts USING (true);
CREATE POLICY alerts_read ON deployments FOR SELECT TO sds_alerts USING (true);
CREATE POLICY alerts_read ON locations FOR SELECT TO sds_alerts USING (true);
DO $$
DECLARE
    t text;
BEGIN
    FOREACH t IN ARRAY ARRAY['calibrated', 'hourly', 'daily', 'health'] LOOP
        EXECUTE format('CREATE POLICY alerts_read ON %I FOR SELECT TO sds_alerts USING (true)', t);
    END LOOP;
END
$$;
