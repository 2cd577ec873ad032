-- Moving a device between locations through the API (issue 23, `locations:write`): the API
-- role may now add a deployment, close the device's open one, and relabel the readings the
-- move covers (shared/accounts.deploy_device). Row-level security keeps each of these to the
-- caller's organisation: a deployment's device must be one of its devices (api_tenant, 0050,
-- which also checks new rows) and, restrictively, its location one of its locations; readings
-- and health rows are updated only for its devices, and only their location column.

GRANT INSERT, UPDATE (during) ON deployments TO sds_api;
GRANT USAGE ON SEQUENCE deployments_id_seq TO sds_api;
GRANT UPDATE (last_deploy) ON devices TO sds_api;
GRANT UPDATE (location) ON calibrated, health TO sds_api;

CREATE POLICY api_own_location ON deployments AS RESTRICTIVE FOR INSERT TO sds_api
    WITH CHECK (EXISTS (SELECT 1 FROM locations l WHERE l.id = location_id));

DO $$
DECLARE
    t text;
BEGIN
    FOREACH t IN ARRAY ARRAY['calibrated', 'health'] LOOP
        EXECUTE format('CREATE POLICY api_move ON %I FOR UPDATE TO sds_api '
                       'USING (device IN (SELECT d.name FROM devices d)) '
                       'WITH CHECK (device IN (SELECT d.name FROM devices d))', t);
    END LOOP;
END
$$;
