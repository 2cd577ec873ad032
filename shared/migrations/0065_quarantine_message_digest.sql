-- A redelivered message is quarantined once (docs/ingest.md "Validation and quarantine"). The
-- broker redelivers (DUP) what the ingester had committed but not yet acknowledged when it
-- crashed; readings are absorbed by their key, quarantine rows had none. Each row now carries
-- the SHA-256 of its message (topic, NUL, payload), and the ingester asks, for the DUP messages
-- of a batch only, which of them are already in quarantine, through this function: its role
-- still cannot read the table.
ALTER TABLE quarantine ADD COLUMN message_digest bytea;
CREATE INDEX quarantine_digest_idx ON quarantine (message_digest)
    WHERE message_digest IS NOT NULL;

CREATE FUNCTION sds_quarantine_seen(digests bytea[])
RETURNS SETOF bytea
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog, public
AS $fn$
    SELECT DISTINCT message_digest FROM quarantine WHERE message_digest = ANY(digests)
$fn$;
REVOKE ALL ON FUNCTION sds_quarantine_seen(bytea[]) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION sds_quarantine_seen(bytea[]) TO sds_ingest;
