-- The deliverer (python -m alerts.delivery) works as the alerts role sds_alerts (0101), with
-- what delivery needs on top of the evaluator's grants: it serves every organisation, so its
-- policies are USING (true); the grants are what limit it (docs/security.md "Database roles").
GRANT SELECT, INSERT ON alert_event_fanout TO sds_alerts;
GRANT SELECT, INSERT, UPDATE ON alert_deliveries TO sds_alerts;
GRANT SELECT ON alert_channels TO sds_alerts;
-- Only the failure bookkeeping of a channel, never its target or secret.
GRANT UPDATE (consecutive_failures, disabled_at, disabled_reason, updated_at)
    ON alert_channels TO sds_alerts;
-- channel_disabled events go to the organisation's administrators by email.
GRANT SELECT (org_id, email, is_admin, active) ON users TO sds_alerts;

CREATE POLICY deliver_all ON alert_channels TO sds_alerts USING (true) WITH CHECK (true);
CREATE POLICY deliver_all ON alert_deliveries TO sds_alerts USING (true) WITH CHECK (true);
CREATE POLICY deliver_read ON users FOR SELECT TO sds_alerts USING (true);
