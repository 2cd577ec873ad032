-- Data tables: 5-minute readings, rollups, health; plus quarantine and rollup bookkeeping.
-- Columns mirror shared/columns.py (a test asserts they are equal). Keyed on (device, time);
-- the location id on each row is where the device stood at that time.

CREATE TABLE calibrated (
    time timestamp with time zone NOT NULL,
    device text NOT NULL,
    location uuid,
    tair real,
    rh real,
    p real,
    precip real,
    swdw real,
    swuw real,
    lwdw real,
    lwuw real,
    pardw real,
    paruw real,
    wind_speed real,
    wind_gust real,
    wind_direction real,
    tabove real,
    tbelow real,
    lfw real,
    tdew real,
    ea real,
    vpd real,
    slp real,
    PRIMARY KEY (device, time)
);
CREATE INDEX calibrated_location_idx ON calibrated (location, time, device);

CREATE TABLE hourly (
    time timestamp with time zone NOT NULL,
    device text NOT NULL,
    location uuid,
    tair real,
    maxt real,
    mint real,
    rh real,
    max_rh real,
    min_rh real,
    tdew real,
    max_tdew real,
    ea real,
    vpd real,
    slp real,
    p real,
    precip real,
    prate real,
    et real,
    etc real,
    swdw real,
    swuw real,
    lwdw real,
    lwuw real,
    pardw real,
    paruw real,
    tabove real,
    tbelow real,
    lfw real,
    wind_speed real,
    wind_speed_max real,
    wind_speed_min real,
    wind_direction real,
    wind_heading text,
    sample_pct real,
    low_quality boolean,
    create_time timestamp with time zone NOT NULL DEFAULT now(),
    update_time timestamp with time zone NOT NULL DEFAULT now(),
    PRIMARY KEY (device, time)
);
CREATE INDEX hourly_location_idx ON hourly (location, time, device);

CREATE TABLE local_hourly (
    time timestamp with time zone NOT NULL,
    device text NOT NULL,
    location uuid,
    tair real,
    maxt real,
    mint real,
    rh real,
    max_rh real,
    min_rh real,
    tdew real,
    max_tdew real,
    ea real,
    vpd real,
    slp real,
    p real,
    precip real,
    prate real,
    et real,
    etc real,
    swdw real,
    swuw real,
    lwdw real,
    lwuw real,
    pardw real,
    paruw real,
    tabove real,
    tbelow real,
    lfw real,
    wind_speed real,
    wind_speed_max real,
    wind_speed_min real,
    wind_direction real,
    wind_heading text,
    sample_pct real,
    low_quality boolean,
    create_time timestamp with time zone NOT NULL DEFAULT now(),
    update_time timestamp with time zone NOT NULL DEFAULT now(),
    PRIMARY KEY (device, time)
);
CREATE INDEX local_hourly_location_idx ON local_hourly (location, time, device);

CREATE TABLE daily (
    time timestamp with time zone NOT NULL,
    device text NOT NULL,
    location uuid,
    meant real,
    maxt real,
    mint real,
    maxt_time timestamp with time zone,
    mint_time timestamp with time zone,
    mean_rh real,
    max_rh real,
    min_rh real,
    rh_at_maxt real,
    rh_at_mint real,
    slp real,
    tdew real,
    max_tdew real,
    tdew_at_mint real,
    ea real,
    vpd real,
    et real,
    etc real,
    kc real,
    crop_water_demand real,
    precip real,
    precip_hours real,
    swdw real,
    dli real,
    sunshine_duration real,
    mean_tbelow real,
    wind_speed real,
    wind_speed_max real,
    wind_speed_min real,
    wind_direction real,
    gdd real,
    heat_stress_hours real,
    lfw real,
    sample_pct real,
    low_quality boolean,
    create_time timestamp with time zone NOT NULL DEFAULT now(),
    update_time timestamp with time zone NOT NULL DEFAULT now(),
    PRIMARY KEY (device, time)
);
CREATE INDEX daily_location_idx ON daily (location, time, device);

CREATE TABLE health (
    time timestamp with time zone NOT NULL,
    device text NOT NULL,
    location uuid,
    batt_pct real,
    batt_volt real,
    rssi real,
    sys_temp real,
    fw text,
    PRIMARY KEY (device, time)
);
CREATE INDEX health_location_idx ON health (location, time, device);

-- Messages or readings that could not be stored, with the reason; never silently dropped.
CREATE TABLE quarantine (
    id            bigserial PRIMARY KEY,
    received_at   timestamptz NOT NULL DEFAULT now(),
    topic         text NOT NULL,
    device        text,
    reason        text NOT NULL,     -- short code, e.g. bad_json, out_of_range, unknown_device
    detail        text NOT NULL,     -- readable explanation
    reading_index integer,           -- position in a JSON array payload; NULL for the message
    payload       bytea NOT NULL     -- raw bytes as received (the whole message)
);
CREATE INDEX quarantine_received_idx ON quarantine (received_at);
CREATE INDEX quarantine_reason_idx ON quarantine (reason, received_at);

-- Dirty marks: buckets whose rollup must be recomputed. Written by ingest in the reading's
-- transaction; claimed by the rollup with DELETE ... RETURNING in the recompute's transaction.
CREATE TABLE rollup_dirty (
    rollup    text NOT NULL CHECK (rollup IN ('hourly', 'local_hourly', 'daily')),
    device    text NOT NULL,
    bucket    timestamptz NOT NULL,   -- UTC start of the bucket
    marked_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (rollup, device, bucket)
);

-- Last run and last error per scheduled job (aggregate status).
CREATE TABLE aggregate_runs (
    job          text PRIMARY KEY,
    last_start   timestamptz,
    last_finish  timestamptz,
    last_ok      timestamptz,
    last_error   text,
    last_error_at timestamptz,
    buckets      bigint NOT NULL DEFAULT 0,   -- buckets recomputed by the last run
    total_runs   bigint NOT NULL DEFAULT 0
);

-- One row per job execution: proves exactly one scheduler ran each tick.
CREATE TABLE job_runs (
    id        bigserial PRIMARY KEY,
    job       text NOT NULL,
    started   timestamptz NOT NULL DEFAULT now(),
    finished  timestamptz,
    ok        boolean,
    buckets   bigint,
    runner    text NOT NULL              -- host:pid of the scheduler that ran it
);
CREATE INDEX job_runs_job_idx ON job_runs (job, started);
