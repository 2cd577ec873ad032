-- Password-reset requests as a durable queue (issue 31): POST /auth/password-reset writes one
-- row here whatever the email, so the request does the same work for an account and for no
-- account. Before, `sds_link_reset_request` wrote the link, its mail and the audit entry for an
-- account and nothing for an unknown email, and the account's request took 2 ms (about 40 %)
-- longer under load: a timing oracle of which emails have accounts. The deliverer
-- (python -m alerts.delivery) now resolves the queue: an account's request becomes its link,
-- its mail in the durable outbox (0180) and its audit entry, all dated the request's time;
-- any other request is dropped. The API's throttling (per email and per address) still counts
-- every request before it is queued.
--
-- The body holds the link's secret (made, and sealed with SDS_APIKEY_SEAL_KEYS when a key is
-- set, by the API before it knows whether the account exists); the row is deleted when it is
-- resolved, so a dump holds at most the secrets of requests still waiting for the deliverer.
CREATE TABLE reset_requests (
    id           uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    email        text NOT NULL CHECK (length(email) <= 320),
    digest       bytea NOT NULL CHECK (length(digest) = 32),
    address      text CHECK (length(address) <= 64),
    subject      text,                  -- NULL: SMTP was off, no mail is queued
    body         bytea,
    sealed       boolean NOT NULL,
    requested_at timestamptz NOT NULL DEFAULT now(),
    expires_at   timestamptz NOT NULL   -- the link's, from the request's time
);
CREATE INDEX reset_requests_at_idx ON reset_requests (requested_at);
-- Only these functions touch it: nobody reads the queue but the deliverer's resolution.
REVOKE ALL ON reset_requests FROM PUBLIC;

-- A new request wakes the deliverer like a new mail (its one LISTEN channel, 0100, 0180).
CREATE TRIGGER reset_requests_notify AFTER INSERT ON reset_requests
    FOR EACH ROW EXECUTE FUNCTION sds_mail_outbox_notify();

-- The request: one insert, the same for every email.
CREATE FUNCTION sds_reset_request_queue(p_email text, p_digest bytea, p_ttl double precision,
                                        p_address text, p_subject text, p_body bytea,
                                        p_sealed boolean)
RETURNS void
LANGUAGE sql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, public
AS $fn$
    INSERT INTO public.reset_requests (email, digest, address, subject, body, sealed,
                                       expires_at)
    VALUES (left(p_email, 320), p_digest, left(p_address, 64), p_subject, p_body, p_sealed,
            now() + make_interval(secs => p_ttl));
$fn$;
REVOKE EXECUTE ON FUNCTION
    sds_reset_request_queue(text, bytea, double precision, text, text, bytea, boolean)
    FROM PUBLIC;
GRANT EXECUTE ON FUNCTION
    sds_reset_request_queue(text, bytea, double precision, text, text, bytea, boolean)
    TO sds_auth;

-- The resolution, by the deliverer: up to p_limit queued requests (oldest first; SKIP LOCKED,
-- so two deliverers never resolve one twice) each become, for an active account, its link
-- (mailed_only: a reset asked for by email is only ever mailed), its mail (when the request
-- had one) and its audit entry, all at the request's time; a request for no account, or one
-- already past its expiry, is dropped. Returns how many requests were resolved (made or
-- dropped).
CREATE FUNCTION sds_reset_requests_resolve(p_limit integer)
RETURNS integer
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, public
AS $fn$
DECLARE
    r record;
    u record;
    link uuid;
    n integer := 0;
BEGIN
    FOR r IN DELETE FROM public.reset_requests q
              WHERE q.id IN (SELECT x.id FROM public.reset_requests x ORDER BY x.requested_at
                              LIMIT p_limit FOR UPDATE SKIP LOCKED)
             RETURNING q.*
    LOOP
        n := n + 1;
        CONTINUE WHEN r.expires_at <= now();
        SELECT x.id, x.org_id, x.email INTO u FROM public.users x
         WHERE lower(x.email) = lower(r.email) AND x.active;
        CONTINUE WHEN NOT FOUND;
        INSERT INTO public.one_time_links (purpose, org_id, email, user_id, inviter,
                                           inviter_label, digest, created_at, expires_at,
                                           mailed_only)
        VALUES ('password_reset', u.org_id, u.email, u.id, NULL, 'self', r.digest,
                r.requested_at, r.expires_at, true)
        ON CONFLICT (digest) DO NOTHING
        RETURNING id INTO link;
        CONTINUE WHEN link IS NULL;  -- a digest already used (only a replayed row)
        IF r.subject IS NOT NULL THEN
            INSERT INTO public.mail_outbox (link_id, recipient, subject, body, sealed,
                                            created_at, expires_at)
            VALUES (link, u.email, r.subject, r.body, r.sealed, r.requested_at, r.expires_at);
        END IF;
        INSERT INTO public.audit_log (org_id, at, actor_user, actor, via, address, action,
                                      target_type, target_id, details)
        VALUES (u.org_id, r.requested_at, u.id, u.email, 'link', r.address,
                'user.reset_request', 'user', u.id::text, '{}');
    END LOOP;
    RETURN n;
END
$fn$;
REVOKE EXECUTE ON FUNCTION sds_reset_requests_resolve(integer) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION sds_reset_requests_resolve(integer) TO sds_alerts;

-- The request's old function, which wrote for an account only.
DROP FUNCTION sds_link_reset_request(text, bytea, double precision, text, text, bytea, boolean);
