-- Quarantine retention (docs/ingest.md "Bounded quarantine"). The ingester applies
-- SDS_QUARANTINE_RETENTION_DAYS hourly, but its role may only INSERT into quarantine (it must
-- never delete fresh evidence of bad input). This function is its one way to delete: by age
-- only, never rows younger than a day, at most `max_rows` per call (short transactions; the
-- caller repeats until it returns less). Operators purge with `sds quarantine purge`, as the
-- owner, without these limits.
CREATE FUNCTION sds_quarantine_purge(keep_days integer, max_rows integer)
RETURNS bigint
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, public
AS $fn$
DECLARE
    n bigint;
BEGIN
    IF keep_days IS NULL OR keep_days < 1 THEN
        RAISE EXCEPTION 'quarantine retention must keep at least 1 day, not %', keep_days;
    END IF;
    DELETE FROM quarantine WHERE id IN (
        SELECT id FROM quarantine
         WHERE received_at < now() - make_interval(days => keep_days)
         ORDER BY received_at LIMIT greatest(1, least(max_rows, 100000)));
    GET DIAGNOSTICS n = ROW_COUNT;
    RETURN n;
END
$fn$;
REVOKE ALL ON FUNCTION sds_quarantine_purge(integer, integer) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION sds_quarantine_purge(integer, integer) TO sds_ingest;
