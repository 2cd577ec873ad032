-- The daily digest (docs/alerts.md "Daily digest"; issue 33): an organisation that turns it on
-- gets, once a day at `hour` in `time_zone`, one email to its owners and administrators
-- summarising the firing and resolved events of the last 24 hours. The deliverer writes it as
-- an alert_events row of kind 'digest' (admins_only, so the fan-out sends it by email to the
-- administrators, through the durable outbox like channel_disabled; already acknowledged, so
-- it does not count as unread in the inbox) and sets last_day in the same transaction: one a
-- day, whatever the number of deliverers.

ALTER TABLE alert_events DROP CONSTRAINT alert_events_kind_check;
ALTER TABLE alert_events ADD CONSTRAINT alert_events_kind_check
    CHECK (kind IN ('firing', 'resolved', 'channel_disabled', 'test', 'digest'));

CREATE TABLE alert_digests (
    org_id     uuid PRIMARY KEY REFERENCES organisations (id) ON DELETE CASCADE,
    active     boolean NOT NULL DEFAULT true,
    hour       smallint NOT NULL DEFAULT 7 CHECK (hour BETWEEN 0 AND 23),
    time_zone  text NOT NULL DEFAULT 'UTC',
    last_day   date,  -- the local day of the newest digest written
    updated_at timestamptz NOT NULL DEFAULT now()
);

ALTER TABLE alert_digests ENABLE ROW LEVEL SECURITY;
ALTER TABLE alert_digests FORCE ROW LEVEL SECURITY;
CREATE POLICY owner_all ON alert_digests TO CURRENT_USER USING (true) WITH CHECK (true);
CREATE POLICY api_tenant ON alert_digests TO sds_api
    USING (org_id = sds_request_org()) WITH CHECK (org_id = sds_request_org());
GRANT SELECT, INSERT, UPDATE, DELETE ON alert_digests TO sds_api;
GRANT SELECT ON alert_digests TO sds_alerts;
GRANT UPDATE (last_day) ON alert_digests TO sds_alerts;
CREATE POLICY deliver_all ON alert_digests TO sds_alerts USING (true) WITH CHECK (true);

-- `at` as local time in `tz`; NULL for a zone PostgreSQL does not know (the API refuses those;
-- one written past it must not stop the deliverer for every organisation).
CREATE FUNCTION sds_local_time(at timestamptz, tz text) RETURNS timestamp
LANGUAGE plpgsql STABLE AS $$
BEGIN
    RETURN at AT TIME ZONE tz;
EXCEPTION WHEN invalid_parameter_value THEN
    RETURN NULL;
END
$$;
GRANT EXECUTE ON FUNCTION sds_local_time(timestamptz, text) TO sds_alerts;
