-- The audit log (issue 23): who changed what in an organisation, when and from which address.
-- Append-only for the API role (no UPDATE or DELETE grant: a compromised request cannot erase
-- its trace); the scheduler deletes rows past SDS_AUDIT_RETENTION_DAYS. The actor's label is
-- copied at the time (an email, or "operator" for `sds` commands) so a later rename or a
-- removed user still reads right.

CREATE TABLE audit_log (
    id           bigserial PRIMARY KEY,
    org_id       uuid NOT NULL REFERENCES organisations (id) ON DELETE CASCADE,
    at           timestamptz NOT NULL DEFAULT now(),
    actor_user   uuid REFERENCES users (id) ON DELETE SET NULL,
    actor_key    uuid,              -- the API key the change was made with, if any
    actor        text NOT NULL CHECK (length(actor) BETWEEN 1 AND 320),
    via          text NOT NULL CHECK (via IN ('basic', 'bearer', 'apikey', 'session', 'cli')),
    address      text CHECK (length(address) <= 64),
    action       text NOT NULL CHECK (action ~ '^[a-z_]+\.[a-z_]+$'),
    target_type  text NOT NULL CHECK (target_type ~ '^[a-z_]+$'),
    target_id    text CHECK (length(target_id) <= 200),
    details      jsonb NOT NULL DEFAULT '{}' CHECK (length(details::text) <= 20000)
);
CREATE INDEX audit_log_org_at_idx ON audit_log (org_id, at DESC, id DESC);
CREATE INDEX audit_log_at_idx ON audit_log (at);

ALTER TABLE audit_log ENABLE ROW LEVEL SECURITY;
ALTER TABLE audit_log FORCE ROW LEVEL SECURITY;
CREATE POLICY owner_all ON audit_log TO CURRENT_USER USING (true) WITH CHECK (true);
CREATE POLICY api_tenant ON audit_log TO sds_api
    USING (org_id = sds_request_org()) WITH CHECK (org_id = sds_request_org());
CREATE POLICY service_all ON audit_log TO sds_aggregate USING (true);

GRANT SELECT, INSERT ON audit_log TO sds_api;
GRANT USAGE ON SEQUENCE audit_log_id_seq TO sds_api;
GRANT SELECT, DELETE ON audit_log TO sds_aggregate;
