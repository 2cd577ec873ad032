-- Proven emails and consent to join (issue 30 section 3, docs/auth.md "Proven emails and joining
-- another organisation"). With SMTP off an invitation link is shown to the inviter, so accepting
-- it proved nothing about the email: an organisation's admin could make an account for someone
-- else's address and ride every later invitation of that address into other organisations.
--
-- users.email_verified_at: when the account's email was proven (a link that went only to that
-- inbox was used, or the operator vouched: `sds user create`, `sds user verify`); NULL: never.
-- one_time_links.mailed_only: the link's secret went only to the email's inbox (a mailed
-- invitation, a reset asked for by email), never shown to anyone: using it proves the email.

ALTER TABLE users ADD COLUMN email_verified_at timestamptz;
-- Accounts made so far: the operator's (`sds user create`, the demo) are vouched for; an
-- account created or brought back by accepting an invitation is not, as nothing recorded
-- whether that link was mailed or shown.
UPDATE users u SET email_verified_at = u.created_at
 WHERE NOT EXISTS (SELECT 1 FROM audit_log a WHERE a.action = 'invite.accept'
                     AND a.target_id = u.id::text
                     AND a.details->>'account' IN ('created', 'reactivated'));

ALTER TABLE one_time_links ADD COLUMN mailed_only boolean NOT NULL DEFAULT false;

-- sds_link_use now also says whether the link went only to the inbox.
DROP FUNCTION sds_link_use(bytea);
CREATE FUNCTION sds_link_use(p_digest bytea)
RETURNS TABLE (id uuid, purpose text, org_id uuid, email text, role text, teams_only boolean,
               user_id uuid, mailed_only boolean)
LANGUAGE sql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, public
AS $fn$
    UPDATE public.one_time_links l SET used_at = now()
     WHERE l.digest = p_digest AND l.used_at IS NULL AND l.revoked_at IS NULL
       AND l.expires_at > now()
    RETURNING l.id, l.purpose, l.org_id, l.email, l.role, l.teams_only, l.user_id, l.mailed_only
$fn$;
REVOKE EXECUTE ON FUNCTION sds_link_use(bytea) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION sds_link_use(bytea) TO sds_auth;

-- A reset asked for by email is only ever mailed (never shown): mailed_only from the start.
CREATE OR REPLACE FUNCTION sds_link_reset_request(p_email text, p_digest bytea,
                                                  p_ttl double precision, p_address text)
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
                                       digest, expires_at, mailed_only)
    VALUES ('password_reset', u.org_id, u.email, u.id, NULL, 'self', p_digest,
            now() + make_interval(secs => p_ttl), true);
    INSERT INTO public.audit_log (org_id, actor_user, actor, via, address, action, target_type,
                                  target_id, details)
    VALUES (u.org_id, u.id, u.email, 'link', left(p_address, 64), 'user.reset_request', 'user',
            u.id::text, '{}');
    RETURN QUERY SELECT u.id, u.org_id, u.email;
END
$fn$;

-- ---- the signed-in user's pending invitations (GET /users/me/invitations) ------------------
-- Live invitations of the caller's email (app.user_id) into organisations they are not a member
-- of. Other organisations' links are beyond the API role's policies: through the owner's rights.
CREATE FUNCTION sds_my_invitations()
RETURNS TABLE (id uuid, org_id uuid, org_name text, role text, teams_only boolean,
               inviter_label text, created_at timestamptz, expires_at timestamptz)
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog, public
AS $fn$
    SELECT l.id, l.org_id, o.name, l.role, l.teams_only, l.inviter_label, l.created_at,
           l.expires_at
      FROM public.one_time_links l
      JOIN public.organisations o ON o.id = l.org_id
      JOIN public.users u ON lower(u.email) = lower(l.email)
     WHERE u.id = nullif(current_setting('app.user_id', true), '')::uuid AND u.active
       AND l.purpose = 'invite' AND l.used_at IS NULL AND l.revoked_at IS NULL
       AND l.expires_at > now()
       AND NOT EXISTS (SELECT 1 FROM public.memberships m
                        WHERE m.user_id = u.id AND m.org_id = l.org_id)
     ORDER BY l.created_at DESC, l.id
$fn$;

-- The caller consents to one of them (POST /users/me/invitations/{id}/accept): marked used in
-- the statement that finds it live and theirs. `proven`: the caller also presented the link's
-- secret (p_digest) and that link went only to the inbox. The caller (serve/links.py) joins
-- the organisation in the same transaction, or rolls the whole back.
CREATE FUNCTION sds_my_invitation_use(p_link uuid, p_digest bytea)
RETURNS TABLE (org_id uuid, email text, role text, teams_only boolean, proven boolean)
LANGUAGE sql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, public
AS $fn$
    UPDATE public.one_time_links l SET used_at = now()
      FROM public.users u
     WHERE l.id = p_link AND u.id = nullif(current_setting('app.user_id', true), '')::uuid
       AND u.active AND lower(u.email) = lower(l.email)
       AND l.purpose = 'invite' AND l.used_at IS NULL AND l.revoked_at IS NULL
       AND l.expires_at > now()
       AND NOT EXISTS (SELECT 1 FROM public.memberships m
                        WHERE m.user_id = u.id AND m.org_id = l.org_id)
    RETURNING l.org_id, l.email, l.role, l.teams_only,
              (l.mailed_only AND p_digest IS NOT NULL AND l.digest = p_digest)
$fn$;

-- ---- sign out everywhere ------------------------------------------------------------------
-- Every bearer token revoked and every API key deactivated of the request's user
-- (app.user_id), in every organisation: the API role reaches only the request organisation's
-- rows, and recovering an account must end what was made in all of them.
CREATE FUNCTION sds_revoke_my_credentials()
RETURNS TABLE (tokens integer, keys integer)
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, public
AS $fn$
DECLARE
    me uuid := nullif(current_setting('app.user_id', true), '')::uuid;
    t integer;
    k integer;
BEGIN
    IF me IS NULL THEN
        RAISE EXCEPTION 'no request user' USING ERRCODE = 'insufficient_privilege';
    END IF;
    UPDATE public.auth_tokens SET revoked_at = now()
     WHERE user_id = me AND revoked_at IS NULL AND expires_at > now();
    GET DIAGNOSTICS t = ROW_COUNT;
    UPDATE public.api_keys SET active = false, updated = now() WHERE user_id = me AND active;
    GET DIAGNOSTICS k = ROW_COUNT;
    RETURN QUERY SELECT t, k;
END
$fn$;

REVOKE EXECUTE ON FUNCTION sds_my_invitations(), sds_my_invitation_use(uuid, bytea),
    sds_revoke_my_credentials() FROM PUBLIC;
GRANT EXECUTE ON FUNCTION sds_my_invitations(), sds_my_invitation_use(uuid, bytea),
    sds_revoke_my_credentials() TO sds_api;
