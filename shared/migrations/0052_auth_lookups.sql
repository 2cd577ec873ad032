-- Credential lookups through narrow functions (docs/security.md "Database roles"). A credential
-- check runs before its organisation is known, as sds_auth; with 0050 that role could read the
-- credential columns of every user, key and token. Now it reads one row, by the exact email or
-- digest presented, through these SECURITY DEFINER functions (owner's rights, fixed search_path
-- so no caller-made object can stand in for the tables), and keeps only what its writes need:
-- ids to re-hash a password, `last_seen` to touch a key, INSERT to issue a token.

CREATE FUNCTION sds_auth_user(p_email text)
RETURNS TABLE (id uuid, org_id uuid, password_hash text, active boolean)
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog, public
AS $fn$
    SELECT u.id, u.org_id, u.password_hash, u.active FROM public.users u
     WHERE lower(u.email) = lower(p_email)
$fn$;

-- live: not revoked, not expired, user active, issued after the last password change.
CREATE FUNCTION sds_auth_token(p_digest bytea)
RETURNS TABLE (id uuid, user_id uuid, org_id uuid, digest bytea, live boolean)
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog, public
AS $fn$
    SELECT t.id, t.user_id, u.org_id, t.digest,
           (t.revoked_at IS NULL AND t.expires_at > now() AND u.active
            AND t.created_at >= u.password_changed_at)
      FROM public.auth_tokens t JOIN public.users u ON u.id = t.user_id
     WHERE t.digest = p_digest
$fn$;

-- live: key and user active, not expired; stale: last_seen older than p_seen_interval seconds.
CREATE FUNCTION sds_auth_api_key(p_digest bytea, p_seen_interval double precision)
RETURNS TABLE (id uuid, user_id uuid, org_id uuid, digest bytea, scopes text[], live boolean,
               stale boolean)
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog, public
AS $fn$
    SELECT k.id, k.user_id, u.org_id, k.digest, k.scopes,
           (k.active AND u.active AND (k.exp IS NULL OR k.exp > now())),
           (k.last_seen IS NULL OR k.last_seen <= now() - make_interval(secs => p_seen_interval))
      FROM public.api_keys k JOIN public.users u ON u.id = k.user_id
     WHERE k.digest = p_digest
$fn$;

REVOKE EXECUTE ON FUNCTION sds_auth_user(text), sds_auth_token(bytea),
    sds_auth_api_key(bytea, double precision) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION sds_auth_user(text), sds_auth_token(bytea),
    sds_auth_api_key(bytea, double precision) TO sds_auth;

-- Table-level REVOKE also takes back the column grants of 0050; then only what the writes read.
REVOKE SELECT ON users, api_keys, auth_tokens FROM sds_auth;
GRANT SELECT (id) ON users TO sds_auth;                -- UPDATE ... SET password_hash WHERE id
GRANT SELECT (id, last_seen) ON api_keys TO sds_auth;  -- UPDATE ... SET last_seen WHERE ...
DROP POLICY auth_lookup ON auth_tokens;                -- INSERT only now
