-- The watermark of `updated_since` listings (docs/api.md "Changed rows"): an instant before
-- which no row's update_time can still change for a reader. A rollup row's update_time is its
-- transaction's now(), its start, so a transaction that started before a reader's snapshot
-- and commits after it writes times the reader has already passed. The watermark is therefore
-- the start of the oldest transaction still running in this database (or now, if none), less
-- a second for the instant between a transaction taking its start time and announcing it.
--
-- Other sessions' xact_start is visible only to roles with their rights: SECURITY DEFINER
-- runs this as the owner (the role that migrates; deploy/services.sh makes it the login role
-- of every process). With a separate LOGIN role per process, grant the owner
-- pg_read_all_stats (docs/security.md "Database roles").
CREATE FUNCTION sds_sync_watermark() RETURNS timestamptz
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog, public
AS $fn$
    SELECT least(now(), min(a.xact_start)) - interval '1 second'
    FROM pg_stat_activity a
    WHERE a.datname = current_database() AND a.pid <> pg_backend_pid()
      AND a.backend_type = 'client backend' AND a.xact_start IS NOT NULL
$fn$;
REVOKE EXECUTE ON FUNCTION sds_sync_watermark() FROM PUBLIC;
GRANT EXECUTE ON FUNCTION sds_sync_watermark() TO sds_api;
