-- Data lifecycle (docs/operations.md "Data lifecycle"): per-organisation overrides of the raw
-- retention horizons (SDS_RETENTION_CALIBRATED_DAYS / SDS_RETENTION_HEALTH_DAYS), and what the
-- scheduler's retention job (sds_aggregate) needs to export and remove old raw rows.
-- NULL: the global setting applies. Rollups (hourly, local_hourly, daily) are never removed.

ALTER TABLE organisations
    ADD COLUMN calibrated_retention_days integer CHECK (calibrated_retention_days > 0),
    ADD COLUMN health_retention_days integer CHECK (health_retention_days > 0);

-- The job reads every organisation's horizons (and nothing else of them).
GRANT SELECT (id, name, calibrated_retention_days, health_retention_days) ON organisations
    TO sds_aggregate;
CREATE POLICY service_read ON organisations FOR SELECT TO sds_aggregate USING (true);

-- Horizons shorter than the one chunks are dropped at are applied with DELETE.
GRANT DELETE ON calibrated, health TO sds_aggregate;

-- Whole chunks past the longest horizon are dropped. drop_chunks needs the table's owner, so
-- the job reaches it through these two narrow functions, which accept only the two raw tables.
-- Both take the chunks' EXCLUSIVE lock (reads go on, writes wait) so that nothing can be
-- written into a chunk between its export and its drop.
CREATE FUNCTION sds_lock_raw_chunks(tbl text, older_than timestamptz)
RETURNS TABLE (chunk text, range_start timestamptz, range_end timestamptz)
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, public
AS $fn$
DECLARE
    c record;
BEGIN
    IF tbl NOT IN ('calibrated', 'health') THEN
        RAISE EXCEPTION 'retention applies to calibrated and health only, not %', tbl;
    END IF;
    IF NOT EXISTS (SELECT 1 FROM pg_extension WHERE extname = 'timescaledb') THEN
        RETURN;
    END IF;
    FOR c IN EXECUTE
        'SELECT format(''%I.%I'', chunk_schema, chunk_name) AS chunk, range_start, range_end
           FROM timescaledb_information.chunks
          WHERE hypertable_schema = ''public'' AND hypertable_name = $1 AND range_end <= $2
          ORDER BY range_start' USING tbl, older_than
    LOOP
        EXECUTE format('LOCK TABLE %s IN EXCLUSIVE MODE', c.chunk);
        chunk := c.chunk; range_start := c.range_start; range_end := c.range_end;
        RETURN NEXT;
    END LOOP;
END
$fn$;

-- Drops exactly the chunks named (those the caller locked and exported): should drop_chunks
-- find any other chunk in the range (one created since), everything rolls back.
CREATE FUNCTION sds_drop_raw_chunks(tbl text, older_than timestamptz, expected text[])
RETURNS SETOF text
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, public
AS $fn$
DECLARE
    dropped text[];
BEGIN
    IF tbl NOT IN ('calibrated', 'health') THEN
        RAISE EXCEPTION 'retention applies to calibrated and health only, not %', tbl;
    END IF;
    IF NOT EXISTS (SELECT 1 FROM pg_extension WHERE extname = 'timescaledb') THEN
        RETURN;
    END IF;
    EXECUTE 'SELECT coalesce(array_agg(c::text ORDER BY c::text), ''{}'')
               FROM drop_chunks($1::regclass, older_than => $2) c'
        INTO dropped USING format('public.%I', tbl), older_than;
    IF dropped IS DISTINCT FROM (SELECT coalesce(array_agg(e ORDER BY e), '{}')
                                 FROM unnest(expected) e) THEN
        RAISE EXCEPTION 'drop_chunks(%) would drop % but only % were exported; nothing dropped',
            tbl, dropped, expected;
    END IF;
    RETURN QUERY SELECT unnest(dropped);
END
$fn$;

REVOKE EXECUTE ON FUNCTION sds_lock_raw_chunks(text, timestamptz) FROM PUBLIC;
REVOKE EXECUTE ON FUNCTION sds_drop_raw_chunks(text, timestamptz, text[]) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION sds_lock_raw_chunks(text, timestamptz) TO sds_aggregate;
GRANT EXECUTE ON FUNCTION sds_drop_raw_chunks(text, timestamptz, text[]) TO sds_aggregate;
