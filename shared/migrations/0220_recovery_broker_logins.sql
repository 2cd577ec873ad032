-- The dashboard and POST /api/v2/devices change the broker's password file (issue 34), but the
-- API's role could not write the recovery kit (migration 0177), so a device added there was
-- missing from the kit until the next `deploy/run.sh` start or `sds recovery save`: a
-- whole-machine loss in between lost its login. The API may now replace exactly one kit file,
-- the broker's password file, sealed by the API with SDS_RECOVERY_KEY (the database never
-- holds the key); it can neither read the kit nor touch its other files.
CREATE FUNCTION sds_recovery_keep_broker_logins(p_sealed bytea)
RETURNS void
LANGUAGE sql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, public
AS $fn$
    INSERT INTO public.recovery_files (name, sealed) VALUES ('mosquitto/passwd', p_sealed)
    ON CONFLICT (name) DO UPDATE SET sealed = EXCLUDED.sealed, updated_at = now()
$fn$;
REVOKE EXECUTE ON FUNCTION sds_recovery_keep_broker_logins(bytea) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION sds_recovery_keep_broker_logins(bytea) TO sds_api;
