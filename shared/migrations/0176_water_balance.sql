-- The FAO-56 root-zone water balance per location (issue 35; docs/waterbalance.md).
--
-- water_settings: a location's soil (a FAO-56 Table 19 class, or measured field capacity and
-- wilting point), roots (constant, or growing linearly between two dates) and Table 22 p.
-- irrigation_events: depths (mm) by local date, planned or applied; audited by the API/CLI.
-- water_balance: one row per device and local day at a location with settings, computed by
-- the aggregate scheduler from the daily rows (aggregate/water.py) from the first changed day
-- forward: water_balance_dirty holds, per device and location, the first day to recompute;
-- a trigger on daily writes it, and so do changes to settings, events and kc schedules.

CREATE TABLE water_settings (
    location_id    uuid PRIMARY KEY REFERENCES locations(id) ON DELETE CASCADE,
    soil           text CHECK (length(soil) BETWEEN 1 AND 40),
    theta_fc       real NOT NULL,
    theta_wp       real NOT NULL,
    root_depth     real NOT NULL CHECK (root_depth > 0 AND root_depth <= 5),
    root_depth_end real CHECK (root_depth_end > 0 AND root_depth_end <= 5),
    root_start     date,
    root_end       date,
    p              real NOT NULL CHECK (p > 0 AND p < 1),
    updated_at     timestamptz NOT NULL DEFAULT now(),
    CHECK (theta_wp >= 0 AND theta_wp < theta_fc AND theta_fc <= 1),
    CHECK ((root_start IS NULL) = (root_end IS NULL) AND (root_end IS NULL OR root_end > root_start))
);

CREATE TABLE irrigation_events (
    id          uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    location_id uuid NOT NULL REFERENCES locations(id) ON DELETE CASCADE,
    day         date NOT NULL,
    depth_mm    real NOT NULL CHECK (depth_mm > 0 AND depth_mm <= 500),
    status      text NOT NULL DEFAULT 'applied' CHECK (status IN ('planned', 'applied')),
    note        text CHECK (length(note) <= 500),
    created_at  timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX irrigation_events_location_day_idx ON irrigation_events (location_id, day);

CREATE TABLE water_balance (
    time timestamp with time zone NOT NULL,
    device text NOT NULL,
    location uuid,
    et real,
    kc real,
    etc real,
    precip real,
    irrigation real,
    root_depth real,
    taw real,
    p real,
    raw real,
    ks real,
    etc_adj real,
    deep_percolation real,
    depletion real,
    days_to_raw real,
    sample_pct real,
    low_quality boolean,
    create_time timestamp with time zone NOT NULL DEFAULT now(),
    update_time timestamp with time zone NOT NULL DEFAULT now(),
    PRIMARY KEY (device, time)
);
CREATE INDEX water_balance_location_time_idx ON water_balance (location, time);
DO $$
BEGIN
    IF EXISTS (SELECT 1 FROM pg_extension WHERE extname = 'timescaledb') THEN
        PERFORM create_hypertable('water_balance', 'time', chunk_time_interval => interval '365 days');
    END IF;
END
$$;

CREATE TABLE water_balance_dirty (
    device    text NOT NULL,
    location  uuid NOT NULL,
    day       date NOT NULL,
    marked_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (device, location)
);

-- A daily row written or removed marks its device's balance from that local day on.
CREATE FUNCTION sds_mark_water_balance() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    r record;
BEGIN
    IF TG_OP = 'DELETE' THEN r := OLD; ELSE r := NEW; END IF;
    IF r.location IS NULL THEN
        RETURN NULL;
    END IF;
    INSERT INTO water_balance_dirty (device, location, day)
    SELECT r.device, r.location, (r.time AT TIME ZONE l.tz_name)::date
    FROM water_settings w JOIN locations l ON l.id = w.location_id
    WHERE w.location_id = r.location
    ON CONFLICT (device, location) DO UPDATE SET day = least(water_balance_dirty.day, EXCLUDED.day);
    RETURN NULL;
END $$;
CREATE TRIGGER daily_marks_water_balance AFTER INSERT OR UPDATE OR DELETE ON daily
    FOR EACH ROW EXECUTE FUNCTION sds_mark_water_balance();

-- Every device with daily rows at `loc`, marked from `day` (a settings, event or kc change).
CREATE FUNCTION sds_mark_location_water(loc uuid, from_day date) RETURNS void
LANGUAGE sql AS $$
    INSERT INTO water_balance_dirty (device, location, day)
    SELECT DISTINCT d.device, d.location, from_day FROM daily d WHERE d.location = loc
    ON CONFLICT (device, location) DO UPDATE SET day = least(water_balance_dirty.day, EXCLUDED.day);
$$;

-- Row-level security as the data and location tables have it (0050, 0051).
ALTER TABLE water_balance ENABLE ROW LEVEL SECURITY;
ALTER TABLE water_balance FORCE ROW LEVEL SECURITY;
CREATE POLICY owner_all ON water_balance TO CURRENT_USER USING (true) WITH CHECK (true);
CREATE POLICY api_tenant ON water_balance FOR SELECT TO sds_api
    USING (device IN (SELECT d.name FROM devices d));
CREATE POLICY service_all ON water_balance TO sds_aggregate USING (true) WITH CHECK (true);
DO $$
DECLARE
    t text;
BEGIN
    FOREACH t IN ARRAY ARRAY['water_settings', 'irrigation_events'] LOOP
        EXECUTE format('ALTER TABLE %I ENABLE ROW LEVEL SECURITY', t);
        EXECUTE format('ALTER TABLE %I FORCE ROW LEVEL SECURITY', t);
        EXECUTE format('CREATE POLICY owner_all ON %I TO CURRENT_USER USING (true) '
                       'WITH CHECK (true)', t);
        EXECUTE format('CREATE POLICY api_tenant ON %I TO sds_api USING (EXISTS (SELECT 1 '
                       'FROM locations l WHERE l.id = location_id)) WITH CHECK (EXISTS ('
                       'SELECT 1 FROM locations l WHERE l.id = location_id))', t);
        EXECUTE format('CREATE POLICY service_read ON %I FOR SELECT TO sds_aggregate '
                       'USING (true)', t);
    END LOOP;
END
$$;

GRANT SELECT ON water_balance TO sds_api;
GRANT SELECT, INSERT, UPDATE, DELETE ON water_settings, irrigation_events TO sds_api;
GRANT SELECT, INSERT, UPDATE, DELETE ON water_balance, water_balance_dirty TO sds_aggregate;
GRANT SELECT ON water_settings, irrigation_events TO sds_aggregate;
-- The API marks through the owner's-rights function only.
ALTER FUNCTION sds_mark_location_water(uuid, date) SECURITY DEFINER;
ALTER FUNCTION sds_mark_location_water(uuid, date) SET search_path = public, pg_temp;
GRANT EXECUTE ON FUNCTION sds_mark_location_water(uuid, date) TO sds_api;

-- The alert kind `depletion` (shared/alertrules.py): the evaluator reads water_balance's
-- days_to_raw as it reads daily (0101).
ALTER TABLE alert_rules DROP CONSTRAINT alert_rules_kind_check,
    ADD CONSTRAINT alert_rules_kind_check
        CHECK (kind IN ('threshold', 'silent', 'battery', 'quarantine', 'depletion'));
ALTER TABLE alert_rules DROP CONSTRAINT alert_rules_source_check,
    ADD CONSTRAINT alert_rules_source_check
        CHECK (source IN ('calibrated', 'hourly', 'daily', 'health', 'devices', 'quarantine',
                          'water_balance'));
GRANT SELECT ON water_balance TO sds_alerts;
CREATE POLICY alerts_read ON water_balance FOR SELECT TO sds_alerts USING (true);
