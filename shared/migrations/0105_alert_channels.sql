-- Delivery channels and the delivery outbox (docs/alerts.md "Channels", "Retries and disabling").
-- A channel is where an organisation's alert events go: a webhook (Standard Webhooks, signed with
-- the channel's whsec_ secret), an email list (SMTP), or the organisation's MQTT alerts topic.
-- The deliverer (python -m alerts.delivery) fans each event out into one alert_deliveries row per
-- channel it goes to, then sends each row at least once; the event id is the webhook-id of every
-- attempt, so a receiver drops duplicates by it.

CREATE TABLE alert_channels (
    id                   uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    org_id               uuid NOT NULL REFERENCES organisations (id) ON DELETE CASCADE,
    name                 text NOT NULL,
    kind                 text NOT NULL CHECK (kind IN ('webhook', 'email', 'mqtt')),
    url                  text,     -- webhook: the receiver's http(s) URL
    secret_sealed        bytea,    -- webhook: the whsec_ secret, Fernet-sealed (SDS_APIKEY_SEAL_KEYS)
    secret_last4         text,     -- webhook: shown masked in listings (whsec_...abcd)
    recipients           text[],   -- email: addresses
    active               boolean NOT NULL DEFAULT true,
    consecutive_failures integer NOT NULL DEFAULT 0,
    disabled_at          timestamptz,  -- set by the deliverer after N failures in a row
    disabled_reason      text,
    created_at           timestamptz NOT NULL DEFAULT now(),
    updated_at           timestamptz NOT NULL DEFAULT now(),
    CHECK (kind <> 'webhook' OR (url IS NOT NULL AND secret_sealed IS NOT NULL)),
    CHECK (kind <> 'email' OR cardinality(recipients) > 0),
    UNIQUE (org_id, name)
);

COMMENT ON COLUMN alert_channels.secret_sealed IS
    'Fernet-encrypted whsec_ signing secret (key not in the database); shown once at creation';

-- One row per event x channel: the outbox the deliverer works from. channel_id NULL is the
-- organisation's administrators by email (events with admins_only, e.g. channel_disabled).
CREATE TABLE alert_deliveries (
    id              bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    event_id        uuid NOT NULL REFERENCES alert_events (id) ON DELETE CASCADE,
    org_id          uuid NOT NULL REFERENCES organisations (id) ON DELETE CASCADE,
    channel_id      uuid REFERENCES alert_channels (id) ON DELETE CASCADE,
    state           text NOT NULL DEFAULT 'pending'
                    CHECK (state IN ('pending', 'delivered', 'failed')),
    attempts        integer NOT NULL DEFAULT 0,
    next_attempt_at timestamptz NOT NULL DEFAULT now(),
    last_attempt_at timestamptz,
    last_status     integer,   -- webhook: the receiver's HTTP status
    last_error      text,
    delivered_at    timestamptz,
    created_at      timestamptz NOT NULL DEFAULT now()
);

-- Fan-out is idempotent: two deliverers (or one restarted mid-way) insert each pair once.
CREATE UNIQUE INDEX alert_deliveries_event_channel_idx ON alert_deliveries
    (event_id, coalesce(channel_id, '00000000-0000-0000-0000-000000000000'::uuid));
-- The claim: due pending rows, oldest due first.
CREATE INDEX alert_deliveries_due_idx ON alert_deliveries (next_attempt_at) WHERE state = 'pending';
CREATE INDEX alert_deliveries_channel_idx ON alert_deliveries (channel_id, created_at DESC);

-- Events already fanned out (alert_events belongs to the evaluator's migrations; the deliverer
-- keeps its own mark).
CREATE TABLE alert_event_fanout (
    event_id  uuid PRIMARY KEY REFERENCES alert_events (id) ON DELETE CASCADE,
    fanned_at timestamptz NOT NULL DEFAULT now()
);

-- Row-level security like the other tenant tables (0050): the API role sees and changes its
-- organisation's channels and reads its deliveries; the deliverer runs as the owner (it serves
-- every organisation), whose access is the visible owner_all policy.
DO $$
DECLARE
    t text;
BEGIN
    FOREACH t IN ARRAY ARRAY['alert_channels', 'alert_deliveries'] LOOP
        EXECUTE format('ALTER TABLE %I ENABLE ROW LEVEL SECURITY', t);
        EXECUTE format('ALTER TABLE %I FORCE ROW LEVEL SECURITY', t);
        EXECUTE format('CREATE POLICY owner_all ON %I TO CURRENT_USER USING (true) '
                       'WITH CHECK (true)', t);
        EXECUTE format('CREATE POLICY api_tenant ON %I TO sds_api '
                       'USING (org_id = sds_request_org()) '
                       'WITH CHECK (org_id = sds_request_org())', t);
    END LOOP;
END
$$;

GRANT SELECT, INSERT, UPDATE, DELETE ON alert_channels TO sds_api;
GRANT SELECT ON alert_deliveries TO sds_api;
