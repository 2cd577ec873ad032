-- Organisations, users, locations, devices, deployments, API keys and tokens.
-- Secrets are stored only as digests (API keys, tokens) or argon2id hashes (passwords).

CREATE EXTENSION IF NOT EXISTS btree_gist;  -- trusted: needed for the deployment overlap rule

CREATE TABLE organisations (
    id          uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    name        text NOT NULL UNIQUE CHECK (length(name) BETWEEN 1 AND 200),
    created_at  timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE users (
    id                  uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    org_id              uuid NOT NULL REFERENCES organisations (id) ON DELETE CASCADE,
    email               text NOT NULL CHECK (email ~ '^[^@\s]+@[^@\s]+$'),
    name                text,
    password_hash       text NOT NULL CHECK (password_hash LIKE '$argon2id$%'),
    active              boolean NOT NULL DEFAULT true,
    is_admin            boolean NOT NULL DEFAULT false,
    password_changed_at timestamptz NOT NULL DEFAULT now(),
    created_at          timestamptz NOT NULL DEFAULT now()
);
CREATE UNIQUE INDEX users_email_key ON users (lower(email));
CREATE INDEX users_org_idx ON users (org_id);

CREATE TABLE locations (
    id            uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    org_id        uuid NOT NULL REFERENCES organisations (id) ON DELETE CASCADE,
    name          text NOT NULL CHECK (length(name) BETWEEN 1 AND 200),
    lon           double precision CHECK (lon BETWEEN -180 AND 180),
    lat           double precision CHECK (lat BETWEEN -90 AND 90),
    elev          real,                       -- metres above sea level
    tz_name       text NOT NULL,              -- IANA zone, validated against zoneinfo on input
    kc            real CHECK (kc BETWEEN 0 AND 3),  -- crop coefficient when no dated schedule
    sensor_height real NOT NULL DEFAULT 2 CHECK (sensor_height > 0),  -- wind sensor height, m
    state         text NOT NULL DEFAULT 'Active' CHECK (state IN ('Active', 'Inactive')),
    archived      boolean NOT NULL DEFAULT false,
    start_date    date,
    end_date      date,
    created_at    timestamptz NOT NULL DEFAULT now(),
    updated_at    timestamptz NOT NULL DEFAULT now(),
    UNIQUE (org_id, name),
    CHECK (end_date IS NULL OR start_date IS NULL OR end_date >= start_date)
);

-- Optional dated crop coefficient schedule; the latest start_date on or before a day applies.
CREATE TABLE crop_coefficients (
    location_id uuid NOT NULL REFERENCES locations (id) ON DELETE CASCADE,
    start_date  date NOT NULL,
    kc          real NOT NULL CHECK (kc BETWEEN 0 AND 3),
    PRIMARY KEY (location_id, start_date)
);

CREATE TABLE devices (
    id              uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    name            text NOT NULL UNIQUE CHECK (name ~ '^[A-Za-z0-9_.-]{1,64}$'),
    org_id          uuid NOT NULL REFERENCES organisations (id) ON DELETE CASCADE,
    owner_id        uuid REFERENCES users (id) ON DELETE SET NULL,
    type            text,
    model           text,
    state           text NOT NULL DEFAULT 'New'
                    CHECK (state IN ('New', 'Active', 'Inactive', 'Retired')),
    firmware_id     text,
    reported_fw     text,
    sync_interval   integer NOT NULL DEFAULT 300,
    has_bridge      boolean NOT NULL DEFAULT false,
    last_seen       timestamptz,
    last_post       timestamptz,
    last_deploy     timestamptz,
    batt_pct        real,
    batt_volt       real,
    signal_strength real,
    created_at      timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX devices_org_idx ON devices (org_id, name);

-- A device stands at one location over a half-open time range; ranges never overlap per device.
CREATE TABLE deployments (
    id          bigserial PRIMARY KEY,
    device_id   uuid NOT NULL REFERENCES devices (id) ON DELETE CASCADE,
    location_id uuid NOT NULL REFERENCES locations (id) ON DELETE CASCADE,
    during      tstzrange NOT NULL CHECK (NOT isempty(during) AND NOT lower_inf(during)),
    EXCLUDE USING gist (device_id WITH =, during WITH &&)
);
CREATE INDEX deployments_location_idx ON deployments USING gist (location_id, during);

CREATE TABLE api_keys (
    id          uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    user_id     uuid NOT NULL REFERENCES users (id) ON DELETE CASCADE,
    org_id      uuid NOT NULL REFERENCES organisations (id) ON DELETE CASCADE,
    name        text NOT NULL DEFAULT '',
    prefix      text NOT NULL,                 -- first characters, shown in listings
    last4       text NOT NULL,                 -- last characters, shown in listings
    digest      bytea NOT NULL UNIQUE,         -- SHA-256 of the key; the key itself is never stored
    scopes      text[] NOT NULL,
    exp         timestamptz,
    active      boolean NOT NULL DEFAULT true,
    created     timestamptz NOT NULL DEFAULT now(),
    updated     timestamptz NOT NULL DEFAULT now(),
    created_by  uuid NOT NULL REFERENCES users (id) ON DELETE CASCADE,
    last_seen   timestamptz
);
CREATE INDEX api_keys_user_idx ON api_keys (user_id);

CREATE TABLE auth_tokens (
    id          uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    user_id     uuid NOT NULL REFERENCES users (id) ON DELETE CASCADE,
    digest      bytea NOT NULL UNIQUE,         -- SHA-256 of the token
    created_at  timestamptz NOT NULL DEFAULT now(),
    expires_at  timestamptz NOT NULL,
    revoked_at  timestamptz
);
CREATE INDEX auth_tokens_user_idx ON auth_tokens (user_id);
