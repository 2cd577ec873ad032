-- Silences and quiet hours (docs/alerts.md "Silences and quiet hours"; issue 33).
-- A silence is a time window matching a rule and/or a device of one organisation; a mute
-- (quiet hours) is a weekly window in a time zone matching a rule (or every rule). The evaluator
-- still writes every event (the inbox keeps them); the deliverer's fan-out sends an event that
-- was created inside a matching silence or mute to no channel and records which one held it in
-- alert_event_fanout.silence_id. Held events are dropped, not queued for after the window:
-- a frost alert sent at 07:00 for 03:00 is noise, and the inbox has it.

CREATE TABLE alert_silences (
    id           uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    org_id       uuid NOT NULL REFERENCES organisations (id) ON DELETE CASCADE,
    kind         text NOT NULL CHECK (kind IN ('silence', 'mute')),
    rule_id      uuid REFERENCES alert_rules (id) ON DELETE CASCADE,
    device       text CHECK (device IS NULL OR length(device) BETWEEN 1 AND 64),
    -- silence: [starts_at, ends_at); expiring one sets ends_at to now()
    starts_at    timestamptz,
    ends_at      timestamptz,
    -- mute: ISO weekdays (1 Monday .. 7 Sunday) and minutes of the local day [start, end);
    -- start > end runs over midnight (22:00-06:00 on a Monday ends Tuesday 06:00)
    weekdays     smallint[],
    start_minute smallint CHECK (start_minute BETWEEN 0 AND 1439),
    end_minute   smallint CHECK (end_minute BETWEEN 0 AND 1440),
    time_zone    text,
    comment      text NOT NULL DEFAULT '' CHECK (length(comment) <= 500),
    created_by   uuid,
    created_at   timestamptz NOT NULL DEFAULT now(),
    CHECK (kind <> 'silence' OR (starts_at IS NOT NULL AND ends_at IS NOT NULL
                                 AND ends_at >= starts_at
                                 AND (rule_id IS NOT NULL OR device IS NOT NULL))),
    CHECK (kind <> 'mute' OR (cardinality(weekdays) BETWEEN 1 AND 7
                              AND weekdays <@ ARRAY[1, 2, 3, 4, 5, 6, 7]::smallint[]
                              AND start_minute IS NOT NULL AND end_minute IS NOT NULL
                              AND start_minute <> end_minute AND time_zone IS NOT NULL))
);
CREATE INDEX alert_silences_org_idx ON alert_silences (org_id, created_at DESC);

-- Which silence or mute held an event from its channels (NULL: sent as usual).
ALTER TABLE alert_event_fanout ADD COLUMN silence_id uuid;

ALTER TABLE alert_silences ENABLE ROW LEVEL SECURITY;
ALTER TABLE alert_silences FORCE ROW LEVEL SECURITY;
CREATE POLICY owner_all ON alert_silences TO CURRENT_USER USING (true) WITH CHECK (true);
CREATE POLICY api_tenant ON alert_silences TO sds_api
    USING (org_id = sds_request_org()) WITH CHECK (org_id = sds_request_org());
-- A teams-only member sees the silences of the devices and rules their teams see (0155).
CREATE POLICY api_teams ON alert_silences AS RESTRICTIVE TO sds_api
    USING (NOT sds_request_teams_only()
           OR ((device IS NULL OR device IN (SELECT d.name FROM devices d))
               AND (rule_id IS NULL OR rule_id IN (SELECT r.id FROM alert_rules r))));
GRANT SELECT ON alert_silences TO sds_alerts;
CREATE POLICY deliver_read ON alert_silences FOR SELECT TO sds_alerts USING (true);
GRANT SELECT, INSERT, UPDATE, DELETE ON alert_silences TO sds_api;

-- Whether `at` falls in a weekly window (a mute): the local ISO weekday and minute of `at` in
-- `tz`; a window whose end is not after its start runs over midnight, so its early part
-- belongs to the previous day's entry in `weekdays`. An unknown zone matches nothing rather
-- than failing the deliverer's fan-out for every organisation.
CREATE FUNCTION sds_in_weekly_window(at timestamptz, weekdays smallint[], start_minute smallint,
                                     end_minute smallint, tz text) RETURNS boolean
LANGUAGE plpgsql STABLE AS $$
DECLARE
    local timestamp;
    dow smallint;
    minute integer;
BEGIN
    BEGIN
        local := at AT TIME ZONE tz;
    EXCEPTION WHEN invalid_parameter_value THEN
        RETURN false;
    END;
    dow := extract(isodow FROM local);
    minute := extract(hour FROM local) * 60 + extract(minute FROM local);
    IF start_minute < end_minute THEN
        RETURN dow = ANY (weekdays) AND minute >= start_minute AND minute < end_minute;
    END IF;
    RETURN (dow = ANY (weekdays) AND minute >= start_minute)
        OR ((dow + 5) % 7 + 1 = ANY (weekdays) AND minute < end_minute);
END
$$;
GRANT EXECUTE ON FUNCTION sds_in_weekly_window(timestamptz, smallint[], smallint, smallint, text)
    TO sds_alerts;
