-- Channels a grower sets up in the dashboard (docs/alerts.md "Channels", issue 33).
--
-- 1. A webhook channel's message `format`: `standard` (Standard Webhooks, signed: the only one
--    before) or the shape of a service's own API (Slack-compatible incoming webhooks, Microsoft
--    Teams, Telegram sendMessage, ntfy, PagerDuty Events v2). Those services do not verify a
--    Standard Webhooks signature, so only `standard` channels have a secret; `options` holds
--    what a format needs beside the URL (Telegram's chat_id, PagerDuty's routing_key).
-- 2. What the receiver answered on the last attempt of a delivery (`last_answer`: the HTTP
--    status line and the start of the body, or the SMTP server's reply), shown by the
--    dashboard's Test button.
-- 3. An organisation's own SMTP settings, changed by an owner without restarting a process (the
--    deliverer reads them at each send); the password sealed with SDS_APIKEY_SEAL_KEYS like
--    webhook secrets and API keys.

ALTER TABLE alert_channels
    ADD COLUMN format text NOT NULL DEFAULT 'standard'
        CHECK (format IN ('standard', 'slack', 'teams', 'telegram', 'ntfy', 'pagerduty')),
    ADD COLUMN options jsonb NOT NULL DEFAULT '{}'::jsonb
        CHECK (jsonb_typeof(options) = 'object');
ALTER TABLE alert_channels DROP CONSTRAINT alert_channels_check;
ALTER TABLE alert_channels ADD CONSTRAINT alert_channels_webhook_check
    CHECK (kind <> 'webhook' OR (url IS NOT NULL
                                 AND (secret_sealed IS NOT NULL OR format <> 'standard')));
ALTER TABLE alert_channels ADD CONSTRAINT alert_channels_format_kind_check
    CHECK (kind = 'webhook' OR format = 'standard');

ALTER TABLE alert_deliveries ADD COLUMN last_answer text;

CREATE TABLE org_smtp_settings (
    org_id          uuid PRIMARY KEY REFERENCES organisations (id) ON DELETE CASCADE,
    host            text NOT NULL CHECK (length(host) BETWEEN 1 AND 253),
    port            integer NOT NULL CHECK (port BETWEEN 1 AND 65535),
    security        text NOT NULL CHECK (security IN ('none', 'starttls', 'tls')),
    username        text,
    password_sealed bytea,     -- Fernet-sealed (SDS_APIKEY_SEAL_KEYS); never shown again
    from_address    text NOT NULL,
    updated_at      timestamptz NOT NULL DEFAULT now(),
    updated_by      uuid
);

COMMENT ON COLUMN org_smtp_settings.password_sealed IS
    'Fernet-encrypted SMTP password (key not in the database); write-only through the API';

ALTER TABLE org_smtp_settings ENABLE ROW LEVEL SECURITY;
ALTER TABLE org_smtp_settings FORCE ROW LEVEL SECURITY;
CREATE POLICY owner_all ON org_smtp_settings TO CURRENT_USER USING (true) WITH CHECK (true);
CREATE POLICY api_tenant ON org_smtp_settings TO sds_api
    USING (org_id = sds_request_org()) WITH CHECK (org_id = sds_request_org());
CREATE POLICY deliver_read ON org_smtp_settings FOR SELECT TO sds_alerts USING (true);
GRANT SELECT, INSERT, UPDATE, DELETE ON org_smtp_settings TO sds_api;
GRANT SELECT ON org_smtp_settings TO sds_alerts;
