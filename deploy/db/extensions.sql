-- The extensions of the service's database, created by the superuser in that database before
-- the first migration: a non-superuser may not create timescaledb (migration 0003 guards it
-- too). Run by deploy/services.sh (pg_bootstrap) and by the tests' database provisioning
-- (testbed/database.py). Idempotent.
CREATE EXTENSION IF NOT EXISTS timescaledb;
CREATE EXTENSION IF NOT EXISTS btree_gist;
