-- The database roles of a deployment, made by the PostgreSQL superuser in any database of the
-- cluster (roles are cluster-wide). Run by deploy/services.sh (pg_bootstrap) and, from this same
-- file, by the tests' database provisioning (testbed/database.py), so the suite runs on the role
-- topology that ships (issue 30). Idempotent.
--
--   sds            the login role: owns the database and everything the migrations create, runs
--                  the migrations, and is no superuser (so row-level security applies to it: the
--                  owner's policies, and every policy TO a role it is a member of)
--   sds_api ...    the processes' NOLOGIN roles (migration 0050, docs/security.md "Database
--                  roles"); sds is a member of each, to SET ROLE to it
--
-- The login role's password is set by the caller (deploy/services.sh keeps it in
-- .state/secrets.env; the test clusters use trust authentication).
DO $$
DECLARE
    r text;
BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'sds') THEN
        RAISE NOTICE 'creating role sds';
        CREATE ROLE sds LOGIN;
    END IF;
    FOREACH r IN ARRAY ARRAY['sds_api', 'sds_auth', 'sds_ingest', 'sds_aggregate',
                             'sds_alerts'] LOOP
        IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = r) THEN
            RAISE NOTICE 'creating role %', r;
            EXECUTE format('CREATE ROLE %I NOLOGIN', r);
        END IF;
        IF NOT pg_has_role('sds', r, 'MEMBER') THEN
            EXECUTE format('GRANT %I TO sds', r);
        END IF;
    END LOOP;
END
$$;
