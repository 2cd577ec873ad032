-- Least privilege and row-level security, as defence in depth (docs/security.md "Database
-- roles"). The processes connect with the configured URL and switch to a NOLOGIN group role:
--   sds_api        API views, after authentication: one organisation's rows (app.org_id)
--   sds_auth       API credential checks, before the organisation is known
--   sds_ingest     the MQTT ingester: insert readings, health, quarantine, dirty marks
--   sds_aggregate  the rollup scheduler: read readings, rewrite rollups, claim dirty marks
-- None of them owns anything. Parameterized SQL is the defence against injection; this layer
-- catches query-scoping bugs (a forgotten `org_id = %s`) and limits what a confused process
-- can change. The migrating role (the owner) keeps full access through an explicit policy.

-- Roles are cluster-wide. deploy/services.sh creates them as the superuser before migrating
-- (the deploy role has no CREATEROLE); a superuser or CREATEROLE migrator creates them here.
DO $$
DECLARE
    r text;
    may_create boolean;
BEGIN
    SELECT rolsuper OR rolcreaterole INTO may_create FROM pg_roles WHERE rolname = current_user;
    FOREACH r IN ARRAY ARRAY['sds_api', 'sds_auth', 'sds_ingest', 'sds_aggregate'] LOOP
        IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = r) THEN
            IF NOT may_create THEN
                RAISE EXCEPTION 'role % does not exist and % may not create roles', r, current_user
                    USING HINT = format('run deploy/services.sh start, or as a superuser: '
                                        'CREATE ROLE %I NOLOGIN; GRANT %I TO %I;',
                                        r, r, current_user);
            END IF;
            BEGIN
                EXECUTE format('CREATE ROLE %I NOLOGIN', r);
            EXCEPTION WHEN duplicate_object OR unique_violation THEN
                NULL;  -- a migration of another database on this cluster made it just now
            END;
        END IF;
    END LOOP;
END
$$;

-- The organisation of the current API request: NULL when unset, so every policy below is
-- false and the API role sees nothing until the request's caller is known.
CREATE FUNCTION sds_request_org() RETURNS uuid
LANGUAGE sql STABLE PARALLEL SAFE
RETURN nullif(current_setting('app.org_id', true), '')::uuid;

-- Whether a device of another organisation was ever deployed at a location (serve.queries:
-- such a location's data listings keep to the caller's devices). Row-level security hides
-- other organisations' deployments and devices from the API role, so the API asks this one
-- yes/no question through the owner's rights. SET search_path: no caller-made object can
-- stand in for the tables.
CREATE FUNCTION sds_location_has_foreign_devices(loc uuid) RETURNS boolean
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog, public
AS $fn$
    SELECT EXISTS (SELECT 1 FROM deployments dp JOIN devices d ON d.id = dp.device_id
                   JOIN locations l ON l.id = dp.location_id
                   WHERE dp.location_id = loc AND d.org_id <> l.org_id)
$fn$;
REVOKE EXECUTE ON FUNCTION sds_location_has_foreign_devices(uuid) FROM PUBLIC;

-- Nothing is reachable through PUBLIC; each role gets exactly what its process uses.
REVOKE ALL ON ALL TABLES IN SCHEMA public FROM PUBLIC;
GRANT USAGE ON SCHEMA public TO sds_api, sds_auth, sds_ingest, sds_aggregate;

-- ---- sds_api -----------------------------------------------------------------------------------
GRANT SELECT ON organisations, locations, crop_coefficients, devices, deployments TO sds_api;
GRANT SELECT, UPDATE ON users TO sds_api;
GRANT SELECT, INSERT, UPDATE, DELETE ON api_keys TO sds_api;
GRANT SELECT, INSERT, UPDATE ON auth_tokens TO sds_api;
GRANT SELECT ON calibrated, hourly, local_hourly, daily, health TO sds_api;
GRANT SELECT, INSERT ON service_secrets TO sds_api;
GRANT EXECUTE ON FUNCTION sds_location_has_foreign_devices(uuid) TO sds_api;

-- ---- sds_auth: what a credential check reads and writes, nothing of the data -------------------
GRANT SELECT (id, org_id, email, password_hash, active, password_changed_at) ON users TO sds_auth;
GRANT UPDATE (password_hash) ON users TO sds_auth;  -- re-hash with stronger argon2 parameters
GRANT SELECT (id, user_id, org_id, digest, scopes, exp, active, last_seen) ON api_keys TO sds_auth;
GRANT UPDATE (last_seen) ON api_keys TO sds_auth;
GRANT SELECT, INSERT ON auth_tokens TO sds_auth;  -- POST /auth/token issues one
GRANT SELECT ON service_secrets TO sds_auth;

-- Login throttling is keyed by digests of emails and addresses, not by organisation.
GRANT SELECT, INSERT, UPDATE, DELETE ON login_failures TO sds_api, sds_auth;
DO $$
BEGIN
    -- The per-credential rate limit table (0041) is written on the credential-check connection.
    IF to_regclass('request_rate') IS NOT NULL THEN
        GRANT SELECT, INSERT, UPDATE, DELETE ON request_rate TO sds_api, sds_auth;
    END IF;
END
$$;

-- ---- sds_ingest: validate the device, find its deployment, store, mark dirty -------------------
GRANT SELECT (id, name, org_id, state, last_seen, last_post, batt_pct, batt_volt,
              signal_strength, reported_fw) ON devices TO sds_ingest;
GRANT UPDATE (last_seen, last_post, state, batt_pct, batt_volt, signal_strength, reported_fw)
    ON devices TO sds_ingest;
GRANT SELECT ON deployments TO sds_ingest;
GRANT SELECT (id, tz_name, elev) ON locations TO sds_ingest;
-- SELECT on calibrated: the staging table is created LIKE it; health: the newest report wins.
GRANT SELECT, INSERT ON calibrated, health TO sds_ingest;
GRANT INSERT ON quarantine TO sds_ingest;
GRANT USAGE ON SEQUENCE quarantine_id_seq TO sds_ingest;
GRANT INSERT ON rollup_dirty TO sds_ingest;

-- ---- sds_aggregate: recompute rollups from readings ---------------------------------------------
GRANT SELECT ON calibrated, health, locations, crop_coefficients, deployments, devices
    TO sds_aggregate;
GRANT SELECT, INSERT, UPDATE, DELETE ON hourly, local_hourly, daily TO sds_aggregate;
-- UPDATE: the claim locks marks with SELECT ... FOR UPDATE SKIP LOCKED before deleting them.
GRANT SELECT, INSERT, UPDATE, DELETE ON rollup_dirty TO sds_aggregate;
GRANT SELECT, INSERT, UPDATE ON aggregate_runs, job_runs TO sds_aggregate;
GRANT USAGE ON SEQUENCE job_runs_id_seq TO sds_aggregate;

-- ---- row-level security on the tenant tables ---------------------------------------------------
-- FORCE: the owner is subject to the policies too, so its access is the visible `owner_all`
-- policy below rather than an implicit bypass (superusers still bypass RLS).
DO $$
DECLARE
    t text;
BEGIN
    FOREACH t IN ARRAY ARRAY['organisations', 'users', 'locations', 'crop_coefficients',
                             'devices', 'deployments', 'api_keys', 'auth_tokens'] LOOP
        EXECUTE format('ALTER TABLE %I ENABLE ROW LEVEL SECURITY', t);
        EXECUTE format('ALTER TABLE %I FORCE ROW LEVEL SECURITY', t);
        EXECUTE format('CREATE POLICY owner_all ON %I TO CURRENT_USER USING (true) '
                       'WITH CHECK (true)', t);
    END LOOP;
END
$$;

-- The API: one organisation per request. USING limits what SELECT, UPDATE and DELETE see;
-- WITH CHECK refuses rows written into another organisation.
CREATE POLICY api_tenant ON organisations TO sds_api
    USING (id = sds_request_org());
CREATE POLICY api_tenant ON users TO sds_api
    USING (org_id = sds_request_org()) WITH CHECK (org_id = sds_request_org());
CREATE POLICY api_tenant ON locations TO sds_api
    USING (org_id = sds_request_org()) WITH CHECK (org_id = sds_request_org());
CREATE POLICY api_tenant ON devices TO sds_api
    USING (org_id = sds_request_org()) WITH CHECK (org_id = sds_request_org());
CREATE POLICY api_tenant ON api_keys TO sds_api
    USING (org_id = sds_request_org()) WITH CHECK (org_id = sds_request_org());
-- Child tables without organisation_id follow their parent, whose own policy filters the
-- subquery (RLS applies inside policy subqueries as well).
CREATE POLICY api_tenant ON crop_coefficients TO sds_api
    USING (EXISTS (SELECT 1 FROM locations l WHERE l.id = location_id));
CREATE POLICY api_tenant ON deployments TO sds_api
    USING (EXISTS (SELECT 1 FROM devices d WHERE d.id = device_id));
CREATE POLICY api_tenant ON auth_tokens TO sds_api
    USING (EXISTS (SELECT 1 FROM users u WHERE u.id = user_id))
    WITH CHECK (EXISTS (SELECT 1 FROM users u WHERE u.id = user_id));

-- Credential checks look a credential up before its organisation is known: the column grants
-- above keep them to the credential columns; rows of every organisation are visible.
CREATE POLICY auth_lookup ON users FOR SELECT TO sds_auth USING (true);
CREATE POLICY auth_rehash ON users FOR UPDATE TO sds_auth USING (true) WITH CHECK (true);
CREATE POLICY auth_lookup ON api_keys FOR SELECT TO sds_auth USING (true);
CREATE POLICY auth_last_seen ON api_keys FOR UPDATE TO sds_auth USING (true) WITH CHECK (true);
CREATE POLICY auth_lookup ON auth_tokens FOR SELECT TO sds_auth USING (true);
CREATE POLICY auth_issue ON auth_tokens FOR INSERT TO sds_auth WITH CHECK (true);

-- Ingest and aggregate serve every organisation; their grants are what limit them.
CREATE POLICY service_read ON devices FOR SELECT TO sds_ingest, sds_aggregate USING (true);
CREATE POLICY ingest_seen ON devices FOR UPDATE TO sds_ingest USING (true) WITH CHECK (true);
CREATE POLICY service_read ON deployments FOR SELECT TO sds_ingest, sds_aggregate USING (true);
CREATE POLICY service_read ON locations FOR SELECT TO sds_ingest, sds_aggregate USING (true);
CREATE POLICY service_read ON crop_coefficients FOR SELECT TO sds_aggregate USING (true);
