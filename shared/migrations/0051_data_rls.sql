-- Row-level security on the data hypertables (docs/security.md "Database roles"): the API role
-- sees the readings and rollups of its organisation's devices only, so a data query that
-- forgets its tenant check still returns nothing of another organisation. Rows carry the
-- device name and no organisation column; a device belongs to one organisation, and the
-- subquery on `devices` is itself filtered by that table's policy (app.org_id).
-- TimescaleDB does not copy a hypertable's policies to its chunks (timescale/timescaledb#7830):
-- queries through the hypertable are filtered, a statement naming a chunk table directly is not.

DO $$
DECLARE
    t text;
BEGIN
    FOREACH t IN ARRAY ARRAY['calibrated', 'hourly', 'local_hourly', 'daily', 'health'] LOOP
        EXECUTE format('ALTER TABLE %I ENABLE ROW LEVEL SECURITY', t);
        EXECUTE format('ALTER TABLE %I FORCE ROW LEVEL SECURITY', t);
        EXECUTE format('CREATE POLICY owner_all ON %I TO CURRENT_USER USING (true) '
                       'WITH CHECK (true)', t);
        EXECUTE format('CREATE POLICY api_tenant ON %I FOR SELECT TO sds_api '
                       'USING (device IN (SELECT d.name FROM devices d))', t);
        -- Ingest and aggregate serve every organisation; their grants are what limit them.
        EXECUTE format('CREATE POLICY service_all ON %I TO sds_ingest, sds_aggregate '
                       'USING (true) WITH CHECK (true)', t);
    END LOOP;
END
$$;
