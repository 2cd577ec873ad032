-- sds_sync_watermark() (0080) refuses, instead of answering too late a watermark, when it
-- cannot see another session's transaction: PostgreSQL hides xact_start (and state) of
-- sessions whose role the owner has no rights of, and a transaction it cannot see could
-- still commit rows stamped before the watermark. The error names the fix. (The rows a
-- superuser session writes inside a transaction, e.g. an operator's psql, are not guarded.)
CREATE OR REPLACE FUNCTION sds_sync_watermark() RETURNS timestamptz
LANGUAGE plpgsql STABLE SECURITY DEFINER SET search_path = pg_catalog, public
AS $fn$
DECLARE
    oldest timestamptz;
    hidden integer;
BEGIN
    -- Hidden rows show neither xact_start nor backend_type, but do show the role. Hidden
    -- superuser sessions are left out: TimescaleDB's background workers run as one, and the
    -- service's processes never do (as deployed they log in as the owner, who sees them).
    SELECT min(a.xact_start) FILTER (WHERE a.backend_type = 'client backend'),
           count(*) FILTER (WHERE a.query = '<insufficient privilege>'
                            AND NOT coalesce(r.rolsuper, true))
      INTO oldest, hidden
      FROM pg_stat_activity a LEFT JOIN pg_roles r ON r.oid = a.usesysid
     WHERE a.datname = current_database() AND a.pid <> pg_backend_pid();
    IF hidden > 0 THEN
        RAISE EXCEPTION 'sds_sync_watermark: % session(s) of other roles are hidden from %; '
            'grant it pg_read_all_stats (docs/security.md "Database roles")',
            hidden, current_user;
    END IF;
    RETURN least(now(), oldest) - interval '1 second';
END
$fn$;
REVOKE EXECUTE ON FUNCTION sds_sync_watermark() FROM PUBLIC;
GRANT EXECUTE ON FUNCTION sds_sync_watermark() TO sds_api;
