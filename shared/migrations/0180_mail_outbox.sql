-- One durable outbox for the service's mail (issue 31): invitation and password-reset emails
-- are rows here, written in the transaction that makes their link and sent, retried and backed
-- off by the deliverer (python -m alerts.delivery) beside the alert deliveries. Before, each
-- API worker had an in-memory queue thread that dropped mail when full and lost it on restart.
--
-- The body holds the link's secret, which the database otherwise never keeps (0160 stores its
-- digest): it is sealed with SDS_APIKEY_SEAL_KEYS when a key is set (`sealed`), and erased
-- when the mail is sent, given up or expired, so a dump holds at most the secrets of links
-- still waiting for the mail server.
CREATE TABLE mail_outbox (
    id              uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    link_id         uuid NOT NULL REFERENCES one_time_links (id) ON DELETE CASCADE,
    recipient       text NOT NULL,
    subject         text NOT NULL,
    body            bytea,                 -- NULL once sent, given up or expired
    sealed          boolean NOT NULL,
    state           text NOT NULL DEFAULT 'pending'
                    CHECK (state IN ('pending', 'sent', 'failed', 'expired')),
    attempts        integer NOT NULL DEFAULT 0,
    next_attempt_at timestamptz NOT NULL DEFAULT now(),
    last_attempt_at timestamptz,
    last_error      text,
    created_at      timestamptz NOT NULL DEFAULT now(),
    sent_at         timestamptz,
    expires_at      timestamptz NOT NULL   -- the link's: no mail is worth sending after it
);
CREATE INDEX mail_outbox_due_idx ON mail_outbox (next_attempt_at) WHERE state = 'pending';
CREATE INDEX mail_outbox_link_idx ON mail_outbox (link_id);

-- A new mail wakes the deliverer like a new alert event (its one LISTEN channel, 0100).
CREATE FUNCTION sds_mail_outbox_notify() RETURNS trigger
LANGUAGE plpgsql AS $fn$
BEGIN
    PERFORM pg_notify('sds_alert_events', 'mail');
    RETURN NULL;
END
$fn$;
CREATE TRIGGER mail_outbox_notify AFTER INSERT ON mail_outbox
    FOR EACH ROW EXECUTE FUNCTION sds_mail_outbox_notify();

-- The deliverer sends every organisation's mail: its grants are what limit it.
GRANT SELECT, UPDATE ON mail_outbox TO sds_alerts;

-- Mail a link made in this same transaction (created_at = now(), the transaction's start) to
-- the link's own email: the API role can queue no mail to any other address, nor of an older
-- link. `p_mailed_only`: the secret goes only to the inbox (not also shown), so using the link
-- proves the email (0165). Returns the mail's id, or NULL when no such live link exists.
CREATE FUNCTION sds_mail_link(p_link uuid, p_subject text, p_body bytea, p_sealed boolean,
                              p_mailed_only boolean)
RETURNS uuid
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, public
AS $fn$
DECLARE
    l record;
    mail uuid;
BEGIN
    SELECT x.id, x.email, x.expires_at INTO l FROM public.one_time_links x
     WHERE x.id = p_link AND x.created_at = now() AND x.used_at IS NULL
       AND x.revoked_at IS NULL;
    IF NOT FOUND THEN
        RETURN NULL;
    END IF;
    IF p_mailed_only THEN
        UPDATE public.one_time_links SET mailed_only = true WHERE id = l.id;
    END IF;
    INSERT INTO public.mail_outbox (link_id, recipient, subject, body, sealed, expires_at)
    VALUES (l.id, l.email, p_subject, p_body, p_sealed, l.expires_at) RETURNING id INTO mail;
    RETURN mail;
END
$fn$;
REVOKE EXECUTE ON FUNCTION sds_mail_link(uuid, text, bytea, boolean, boolean) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION sds_mail_link(uuid, text, bytea, boolean, boolean) TO sds_api;

-- POST /auth/password-reset (0160, 0165), now also queueing the mail in the same call when
-- `p_subject` is given (SMTP configured): still one call whether or not the email has an
-- account, so neither the answer nor its time says which.
DROP FUNCTION sds_link_reset_request(text, bytea, double precision, text);
CREATE FUNCTION sds_link_reset_request(p_email text, p_digest bytea, p_ttl double precision,
                                       p_address text, p_subject text, p_body bytea,
                                       p_sealed boolean)
RETURNS TABLE (user_id uuid, org_id uuid, email text)
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, public
AS $fn$
DECLARE
    u record;
    link uuid;
BEGIN
    SELECT x.id, x.org_id, x.email INTO u FROM public.users x
     WHERE lower(x.email) = lower(p_email) AND x.active;
    IF NOT FOUND THEN
        RETURN;
    END IF;
    INSERT INTO public.one_time_links (purpose, org_id, email, user_id, inviter, inviter_label,
                                       digest, expires_at, mailed_only)
    VALUES ('password_reset', u.org_id, u.email, u.id, NULL, 'self', p_digest,
            now() + make_interval(secs => p_ttl), true)
    RETURNING id INTO link;
    IF p_subject IS NOT NULL THEN
        INSERT INTO public.mail_outbox (link_id, recipient, subject, body, sealed, expires_at)
        VALUES (link, u.email, p_subject, p_body, p_sealed,
                now() + make_interval(secs => p_ttl));
    END IF;
    INSERT INTO public.audit_log (org_id, actor_user, actor, via, address, action, target_type,
                                  target_id, details)
    VALUES (u.org_id, u.id, u.email, 'link', left(p_address, 64), 'user.reset_request', 'user',
            u.id::text, '{}');
    RETURN QUERY SELECT u.id, u.org_id, u.email;
END
$fn$;
REVOKE EXECUTE ON FUNCTION
    sds_link_reset_request(text, bytea, double precision, text, text, bytea, boolean)
    FROM PUBLIC;
GRANT EXECUTE ON FUNCTION
    sds_link_reset_request(text, bytea, double precision, text, text, bytea, boolean)
    TO sds_auth;
