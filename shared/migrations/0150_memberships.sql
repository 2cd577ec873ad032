-- Memberships (issue 23, docs/auth.md "Roles"): a user belongs to one or many organisations,
-- with a role in each. This table is the one truth of who belongs where and with which role;
-- users.is_admin (the old two-role flag) is dropped so it cannot become a second one.
-- users.org_id stays as the user's home organisation: the one Basic credentials act in and a
-- token's default; it is always one of the user's memberships while they have any (trigger).
--   owner   everything an admin can, and the only role that makes or removes owners
--   admin   manages the organisation: people, keys' administrators' scopes, locations, ...
--   member  reads the organisation's data, writes annotations and alert rules
--   viewer  reads only (own name, preferences and API keys excepted)
-- teams_only (member and viewer only): sees only their teams' devices and locations; the
-- request carries it as app.teams_only, the teams' row-level policies read it.

CREATE TABLE memberships (
    user_id     uuid NOT NULL REFERENCES users (id) ON DELETE CASCADE,
    org_id      uuid NOT NULL REFERENCES organisations (id) ON DELETE CASCADE,
    role        text NOT NULL CHECK (role IN ('owner', 'admin', 'member', 'viewer')),
    teams_only  boolean NOT NULL DEFAULT false,
    created_at  timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (user_id, org_id),
    CHECK (NOT teams_only OR role IN ('member', 'viewer'))
);
CREATE INDEX memberships_org_idx ON memberships (org_id, role);

-- Every user so far belongs to their one organisation. The administrators become owners: the
-- strongest role, so nothing they could do before is taken away.
INSERT INTO memberships (user_id, org_id, role, created_at)
SELECT id, org_id, CASE WHEN is_admin THEN 'owner' ELSE 'member' END, created_at FROM users;

ALTER TABLE users DROP COLUMN is_admin;

-- The request's user (app.user_id, '' for none: shared.db.set_request_scope) for policies.
CREATE FUNCTION sds_request_user() RETURNS uuid
LANGUAGE sql STABLE PARALLEL SAFE
RETURN nullif(current_setting('app.user_id', true), '')::uuid;

-- A bearer token is bound to one organisation (docs/auth.md "Which organisation a request acts
-- in"); one issued without naming it is bound to the user's home organisation.
ALTER TABLE auth_tokens ADD COLUMN org_id uuid REFERENCES organisations (id) ON DELETE CASCADE;
UPDATE auth_tokens t SET org_id = u.org_id FROM users u WHERE u.id = t.user_id;
ALTER TABLE auth_tokens ALTER COLUMN org_id SET NOT NULL;

CREATE FUNCTION sds_token_home_org() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, public
AS $fn$
BEGIN
    IF NEW.org_id IS NULL THEN
        SELECT u.org_id INTO NEW.org_id FROM public.users u WHERE u.id = NEW.user_id;
    END IF;
    RETURN NEW;
END
$fn$;
CREATE TRIGGER auth_tokens_home_org BEFORE INSERT ON auth_tokens
    FOR EACH ROW EXECUTE FUNCTION sds_token_home_org();

-- When a membership ends: the user's home moves to their oldest remaining membership, and a
-- user with none left is deactivated (their every credential answers 401). Here, not in
-- Python, so the API, the CLI and a cascade from a deleted organisation keep the same rule.
CREATE FUNCTION sds_membership_gone() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, public
AS $fn$
DECLARE
    next_home uuid;
BEGIN
    SELECT m.org_id INTO next_home FROM public.memberships m WHERE m.user_id = OLD.user_id
     ORDER BY m.created_at, m.org_id LIMIT 1;
    IF next_home IS NULL THEN
        UPDATE public.users SET active = false WHERE id = OLD.user_id AND active;
    ELSE
        UPDATE public.users SET org_id = next_home WHERE id = OLD.user_id AND org_id = OLD.org_id;
    END IF;
    RETURN NULL;
END
$fn$;
CREATE TRIGGER memberships_gone AFTER DELETE ON memberships
    FOR EACH ROW EXECUTE FUNCTION sds_membership_gone();

-- ---- row-level security ------------------------------------------------------------------------
ALTER TABLE memberships ENABLE ROW LEVEL SECURITY;
ALTER TABLE memberships FORCE ROW LEVEL SECURITY;
CREATE POLICY owner_all ON memberships TO CURRENT_USER USING (true) WITH CHECK (true);
CREATE POLICY api_tenant ON memberships TO sds_api
    USING (org_id = sds_request_org()) WITH CHECK (org_id = sds_request_org());
GRANT SELECT, INSERT, UPDATE, DELETE ON memberships TO sds_api;

-- A user is visible to the API when they are a member of the request's organisation (or, for
-- a user being written, homed there): no longer by users.org_id alone.
DROP POLICY api_tenant ON users;
CREATE POLICY api_tenant ON users TO sds_api
    USING (EXISTS (SELECT 1 FROM memberships m
                    WHERE m.user_id = users.id AND m.org_id = sds_request_org()))
    WITH CHECK (org_id = sds_request_org() OR EXISTS (
        SELECT 1 FROM memberships m WHERE m.user_id = users.id AND m.org_id = sds_request_org()));

-- A token acts in the organisation it is bound to: the API role reaches (and revokes) the
-- request's organisation's tokens only.
DROP POLICY api_tenant ON auth_tokens;
CREATE POLICY api_tenant ON auth_tokens TO sds_api
    USING (org_id = sds_request_org() AND EXISTS (SELECT 1 FROM users u WHERE u.id = user_id))
    WITH CHECK (org_id = sds_request_org() AND EXISTS (SELECT 1 FROM users u WHERE u.id = user_id));

-- The caller's own organisations, with their role in each and the number of active members:
-- GET /orgs and /users/me/orgs. The other organisations' rows are beyond the API role's
-- policies, so this one question goes through the owner's rights, keyed by app.user_id.
CREATE FUNCTION sds_my_orgs()
RETURNS TABLE (id uuid, name text, created_at timestamptz, role text, teams_only boolean,
               members bigint)
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog, public
AS $fn$
    SELECT o.id, o.name, o.created_at, m.role, m.teams_only,
           (SELECT count(*) FROM public.memberships x JOIN public.users u ON u.id = x.user_id
             WHERE x.org_id = o.id AND u.active)
      FROM public.memberships m JOIN public.organisations o ON o.id = m.org_id
     WHERE m.user_id = nullif(current_setting('app.user_id', true), '')::uuid
$fn$;
REVOKE EXECUTE ON FUNCTION sds_my_orgs() FROM PUBLIC;
GRANT EXECUTE ON FUNCTION sds_my_orgs() TO sds_api;

-- POST /orgs/{id}/users adds an existing user of the service by their exact email: the one
-- look-up across organisations the API role makes (the view allows it to managers only).
CREATE FUNCTION sds_member_lookup(p_email text)
RETURNS TABLE (id uuid)
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog, public
AS $fn$
    SELECT u.id FROM public.users u WHERE lower(u.email) = lower(p_email)
$fn$;
REVOKE EXECUTE ON FUNCTION sds_member_lookup(text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION sds_member_lookup(text) TO sds_api;

-- ---- credential lookups (0052) now carry the membership -------------------------------------
-- A credential is live only while its user is a member of the organisation it acts in; the
-- role and teams_only of that membership are read in the same lookup, so a demotion or a
-- removal takes effect at the next request of every token and key.
DROP FUNCTION sds_auth_user(text);
DROP FUNCTION sds_auth_token(bytea);
DROP FUNCTION sds_auth_api_key(bytea, double precision);

CREATE FUNCTION sds_auth_user(p_email text)
RETURNS TABLE (id uuid, org_id uuid, password_hash text, active boolean, role text,
               teams_only boolean)
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog, public
AS $fn$
    SELECT u.id, u.org_id, u.password_hash, u.active AND m.role IS NOT NULL, m.role,
           coalesce(m.teams_only, false)
      FROM public.users u
      LEFT JOIN public.memberships m ON m.user_id = u.id AND m.org_id = u.org_id
     WHERE lower(u.email) = lower(p_email)
$fn$;

CREATE FUNCTION sds_auth_token(p_digest bytea)
RETURNS TABLE (id uuid, user_id uuid, org_id uuid, digest bytea, live boolean, role text,
               teams_only boolean)
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog, public
AS $fn$
    SELECT t.id, t.user_id, t.org_id, t.digest,
           (t.revoked_at IS NULL AND t.expires_at > now() AND u.active
            AND t.created_at >= u.password_changed_at AND m.role IS NOT NULL),
           m.role, coalesce(m.teams_only, false)
      FROM public.auth_tokens t JOIN public.users u ON u.id = t.user_id
      LEFT JOIN public.memberships m ON m.user_id = t.user_id AND m.org_id = t.org_id
     WHERE t.digest = p_digest
$fn$;

CREATE FUNCTION sds_auth_api_key(p_digest bytea, p_seen_interval double precision)
RETURNS TABLE (id uuid, user_id uuid, org_id uuid, digest bytea, scopes text[], live boolean,
               stale boolean, role text, teams_only boolean)
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog, public
AS $fn$
    SELECT k.id, k.user_id, k.org_id, k.digest, k.scopes,
           (k.active AND u.active AND (k.exp IS NULL OR k.exp > now()) AND m.role IS NOT NULL),
           (k.last_seen IS NULL OR k.last_seen <= now() - make_interval(secs => p_seen_interval)),
           m.role, coalesce(m.teams_only, false)
      FROM public.api_keys k JOIN public.users u ON u.id = k.user_id
      LEFT JOIN public.memberships m ON m.user_id = k.user_id AND m.org_id = k.org_id
     WHERE k.digest = p_digest
$fn$;

-- A token for another of the user's organisations (POST /auth/token with `org`): is the user
-- a member there? Asked before the request's organisation is known, as sds_auth.
CREATE FUNCTION sds_auth_membership(p_user uuid, p_org uuid)
RETURNS TABLE (role text, teams_only boolean)
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog, public
AS $fn$
    SELECT m.role, m.teams_only FROM public.memberships m
     WHERE m.user_id = p_user AND m.org_id = p_org
$fn$;

REVOKE EXECUTE ON FUNCTION sds_auth_user(text), sds_auth_token(bytea),
    sds_auth_api_key(bytea, double precision), sds_auth_membership(uuid, uuid) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION sds_auth_user(text), sds_auth_token(bytea),
    sds_auth_api_key(bytea, double precision), sds_auth_membership(uuid, uuid) TO sds_auth;

-- ---- the alert deliverer: channel_disabled mail goes to the owners and admins -----------------
GRANT SELECT (id) ON users TO sds_alerts;
GRANT SELECT (user_id, org_id, role) ON memberships TO sds_alerts;
CREATE POLICY deliver_read ON memberships FOR SELECT TO sds_alerts USING (true);
