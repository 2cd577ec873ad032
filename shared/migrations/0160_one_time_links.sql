-- One-time links (issue 23, docs/auth.md "Invitations and password reset"): an invitation into
-- an organisation with a role, or a password reset of one user. The link's secret is shown once
-- (mailed, or shown to the administrator / printed by `sds`); only its SHA-256 digest is kept,
-- like tokens and keys. A link works once (used_at), until expires_at, unless revoked.

CREATE TABLE one_time_links (
    id          uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    purpose     text NOT NULL CHECK (purpose IN ('invite', 'password_reset')),
    org_id      uuid NOT NULL REFERENCES organisations (id) ON DELETE CASCADE,
    email       text NOT NULL CHECK (email ~ '^[^@\s]+@[^@\s]+$' AND length(email) <= 320),
    -- The role an invitation grants (the values are the memberships' to check); none for a reset.
    role        text CHECK (role ~ '^[a-z_]{1,32}$'),
    teams_only  boolean NOT NULL DEFAULT false,
    -- Whose password a reset sets; an invitation names an email, not an account.
    user_id     uuid REFERENCES users (id) ON DELETE CASCADE,
    inviter     uuid REFERENCES users (id) ON DELETE SET NULL,
    inviter_label text NOT NULL CHECK (length(inviter_label) BETWEEN 1 AND 320),
    digest      bytea NOT NULL UNIQUE CHECK (length(digest) = 32),
    created_at  timestamptz NOT NULL DEFAULT now(),
    expires_at  timestamptz NOT NULL,
    used_at     timestamptz,
    revoked_at  timestamptz,
    CHECK ((purpose = 'invite') = (role IS NOT NULL)),
    CHECK ((purpose = 'password_reset') = (user_id IS NOT NULL))
);
CREATE INDEX one_time_links_org_idx ON one_time_links (org_id, purpose, created_at DESC);
CREATE INDEX one_time_links_user_idx ON one_time_links (user_id) WHERE user_id IS NOT NULL;

ALTER TABLE one_time_links ENABLE ROW LEVEL SECURITY;
ALTER TABLE one_time_links FORCE ROW LEVEL SECURITY;
CREATE POLICY owner_all ON one_time_links TO CURRENT_USER USING (true) WITH CHECK (true);
CREATE POLICY api_tenant ON one_time_links TO sds_api
    USING (org_id = sds_request_org()) WITH CHECK (org_id = sds_request_org());
-- No DELETE: a revoked or used link stays, as the record of what was sent.
GRANT SELECT, INSERT, UPDATE ON one_time_links TO sds_api;

-- Accepting a link creates the invited user in the link's organisation (row-level security on
-- users keeps the insert to it).
GRANT INSERT ON users TO sds_api;

-- Accepted, or asked for, by someone who is not signed in: the links get the action's own
-- audit `via`.
ALTER TABLE audit_log DROP CONSTRAINT audit_log_via_check;
ALTER TABLE audit_log ADD CONSTRAINT audit_log_via_check
    CHECK (via IN ('basic', 'bearer', 'apikey', 'session', 'cli', 'link'));

-- ---- what sds_auth (not yet signed in) may do with links ---------------------------------------
-- A link presented for acceptance: marked used in the same statement that finds it live, so two
-- acceptances of one link cannot both pass (the second finds used_at set). Rolled back with the
-- rest of the acceptance when it fails (a refused password), so the link keeps working.
CREATE FUNCTION sds_link_use(p_digest bytea)
RETURNS TABLE (id uuid, purpose text, org_id uuid, email text, role text, teams_only boolean,
               user_id uuid)
LANGUAGE sql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, public
AS $fn$
    UPDATE public.one_time_links l SET used_at = now()
     WHERE l.digest = p_digest AND l.used_at IS NULL AND l.revoked_at IS NULL
       AND l.expires_at > now()
    RETURNING l.id, l.purpose, l.org_id, l.email, l.role, l.teams_only, l.user_id
$fn$;

-- What the accept page shows before the form is sent: a live link's purpose, email, role and
-- organisation name; nothing for any other.
CREATE FUNCTION sds_link_peek(p_digest bytea)
RETURNS TABLE (purpose text, email text, role text, org_name text, expires_at timestamptz,
               account boolean)
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog, public
AS $fn$
    SELECT l.purpose, l.email, l.role, o.name, l.expires_at,
           EXISTS (SELECT 1 FROM public.users u WHERE lower(u.email) = lower(l.email)
                   AND u.active)
      FROM public.one_time_links l JOIN public.organisations o ON o.id = l.org_id
     WHERE l.digest = p_digest AND l.used_at IS NULL AND l.revoked_at IS NULL
       AND l.expires_at > now()
$fn$;

-- POST /auth/password-reset: one call whether or not the email has an account, so the answer
-- and its time do not say which. For an active account it stores the link (and its audit entry)
-- and returns the user and organisation; for any other email nothing.
CREATE FUNCTION sds_link_reset_request(p_email text, p_digest bytea, p_ttl double precision,
                                       p_address text)
RETURNS TABLE (user_id uuid, org_id uuid, email text)
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, public
AS $fn$
DECLARE
    u record;
BEGIN
    SELECT x.id, x.org_id, x.email INTO u FROM public.users x
     WHERE lower(x.email) = lower(p_email) AND x.active;
    IF NOT FOUND THEN
        RETURN;
    END IF;
    INSERT INTO public.one_time_links (purpose, org_id, email, user_id, inviter, inviter_label,
                                       digest, expires_at)
    VALUES ('password_reset', u.org_id, u.email, u.id, NULL, 'self', p_digest,
            now() + make_interval(secs => p_ttl));
    INSERT INTO public.audit_log (org_id, actor_user, actor, via, address, action, target_type,
                                  target_id, details)
    VALUES (u.org_id, u.id, u.email, 'link', left(p_address, 64), 'user.reset_request', 'user',
            u.id::text, '{}');
    RETURN QUERY SELECT u.id, u.org_id, u.email;
END
$fn$;

REVOKE EXECUTE ON FUNCTION sds_link_use(bytea), sds_link_peek(bytea),
    sds_link_reset_request(text, bytea, double precision, text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION sds_link_use(bytea), sds_link_peek(bytea),
    sds_link_reset_request(text, bytea, double precision, text) TO sds_auth;

-- A reset link made by an organisation's manager opens the whole account, so it is refused for a
-- user who also belongs to another organisation (serve/links.py). The API role sees only the
-- request organisation's memberships; this one yes/no question goes through the owner's rights.
CREATE FUNCTION sds_link_other_orgs(p_user uuid) RETURNS boolean
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog, public
AS $fn$
    SELECT EXISTS (SELECT 1 FROM public.memberships m WHERE m.user_id = p_user
                     AND m.org_id IS DISTINCT FROM public.sds_request_org())
$fn$;
REVOKE EXECUTE ON FUNCTION sds_link_other_orgs(uuid) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION sds_link_other_orgs(uuid) TO sds_api;
