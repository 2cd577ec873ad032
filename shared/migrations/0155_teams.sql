-- Teams (issue 23, docs/auth.md "Teams"): named groups of an organisation's members, devices
-- and locations. A member whose membership is limited to teams (app.teams_only = 'on', set per
-- request by shared/db.set_request_scope) sees only their teams' devices and locations; the
-- restriction is in the policies below, on every table the API role reads, so a query that
-- forgets it still shows nothing more.
--
-- Every link row carries the organisation, and composite foreign keys tie the team, the
-- device and the location to that same organisation, so no row can put another
-- organisation's device or location into a team, whoever writes it.

ALTER TABLE devices ADD CONSTRAINT devices_id_org_key UNIQUE (id, org_id);
ALTER TABLE locations ADD CONSTRAINT locations_id_org_key UNIQUE (id, org_id);

CREATE TABLE teams (
    id       uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    org_id   uuid NOT NULL REFERENCES organisations (id) ON DELETE CASCADE,
    name     text NOT NULL CHECK (length(name) BETWEEN 1 AND 200),
    created  timestamptz NOT NULL DEFAULT now(),
    UNIQUE (org_id, name),
    UNIQUE (id, org_id)
);

-- A team member is a member of the team's organisation: the API and the CLI check it, and the
-- trigger below takes them out of its teams when that membership ends.
CREATE TABLE team_members (
    team_id  uuid NOT NULL,
    org_id   uuid NOT NULL,
    user_id  uuid NOT NULL REFERENCES users (id) ON DELETE CASCADE,
    added    timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (team_id, user_id),
    FOREIGN KEY (team_id, org_id) REFERENCES teams (id, org_id) ON DELETE CASCADE
);
-- The visibility functions below start from the caller: (user, organisation) -> teams.
CREATE INDEX team_members_user_idx ON team_members (user_id, org_id);

CREATE TABLE team_devices (
    team_id    uuid NOT NULL,
    org_id     uuid NOT NULL,
    device_id  uuid NOT NULL,
    added      timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (team_id, device_id),
    FOREIGN KEY (team_id, org_id) REFERENCES teams (id, org_id) ON DELETE CASCADE,
    FOREIGN KEY (device_id, org_id) REFERENCES devices (id, org_id) ON DELETE CASCADE
);
CREATE INDEX team_devices_device_idx ON team_devices (device_id);

CREATE TABLE team_locations (
    team_id      uuid NOT NULL,
    org_id       uuid NOT NULL,
    location_id  uuid NOT NULL,
    added        timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (team_id, location_id),
    FOREIGN KEY (team_id, org_id) REFERENCES teams (id, org_id) ON DELETE CASCADE,
    FOREIGN KEY (location_id, org_id) REFERENCES locations (id, org_id) ON DELETE CASCADE
);
CREATE INDEX team_locations_location_idx ON team_locations (location_id);

-- ---- the request's caller ------------------------------------------------------------------
-- sds_request_user() (app.user_id) is migration 0150's. teams_only is false when unset: a
-- connection that never set it (ingest, aggregate, the owner) is not restricted by teams; the
-- API sets it on every request from the caller's membership (memberships.teams_only).
CREATE FUNCTION sds_request_teams_only() RETURNS boolean
LANGUAGE sql STABLE PARALLEL SAFE
RETURN coalesce(current_setting('app.teams_only', true), '') = 'on';

-- What a teams-only caller may see. SECURITY DEFINER (owner's rights, fixed search_path): the
-- policies of devices and locations ask these, and reading the team tables through the API
-- role's own policies from there would recurse. They answer only for the request's own
-- user and organisation, so they reveal nothing a caller could not see anyway.
CREATE FUNCTION sds_request_team_ids() RETURNS SETOF uuid
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog, public
AS $fn$
    SELECT m.team_id FROM team_members m
     WHERE m.user_id = sds_request_user() AND m.org_id = sds_request_org()
$fn$;

-- A team's locations, and the devices listed in the team or ever deployed at one of its
-- locations (so a location's whole history reads the same as for everyone else).
CREATE FUNCTION sds_request_team_location_ids() RETURNS SETOF uuid
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog, public
AS $fn$
    SELECT tl.location_id FROM team_locations tl
     WHERE tl.team_id IN (SELECT sds_request_team_ids())
$fn$;

CREATE FUNCTION sds_request_team_device_ids() RETURNS SETOF uuid
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog, public
AS $fn$
    SELECT td.device_id FROM team_devices td
     WHERE td.team_id IN (SELECT sds_request_team_ids())
    UNION
    SELECT dp.device_id FROM deployments dp
     WHERE dp.location_id IN (SELECT sds_request_team_location_ids())
$fn$;

REVOKE EXECUTE ON FUNCTION sds_request_team_ids(), sds_request_team_location_ids(),
    sds_request_team_device_ids() FROM PUBLIC;
GRANT EXECUTE ON FUNCTION sds_request_team_ids(), sds_request_team_location_ids(),
    sds_request_team_device_ids() TO sds_api;

-- The membership ends (removal, or the organisation's cascade): so does the team membership,
-- so a later membership in the same organisation starts with no teams.
CREATE FUNCTION sds_membership_teams_gone() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, public
AS $fn$
BEGIN
    DELETE FROM public.team_members m WHERE m.user_id = OLD.user_id AND m.org_id = OLD.org_id;
    RETURN NULL;
END
$fn$;
CREATE TRIGGER memberships_teams_gone AFTER DELETE ON memberships
    FOR EACH ROW EXECUTE FUNCTION sds_membership_teams_gone();

-- ---- the team tables themselves ------------------------------------------------------------
DO $$
DECLARE
    t text;
BEGIN
    FOREACH t IN ARRAY ARRAY['teams', 'team_members', 'team_devices', 'team_locations'] LOOP
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
-- A teams-only member sees their own teams only (and those teams' rows).
CREATE POLICY api_teams ON teams AS RESTRICTIVE TO sds_api
    USING (NOT sds_request_teams_only() OR id IN (SELECT sds_request_team_ids()));
DO $$
DECLARE
    t text;
BEGIN
    FOREACH t IN ARRAY ARRAY['team_members', 'team_devices', 'team_locations'] LOOP
        EXECUTE format('CREATE POLICY api_teams ON %I AS RESTRICTIVE TO sds_api '
                       'USING (NOT sds_request_teams_only() '
                       'OR team_id IN (SELECT sds_request_team_ids()))', t);
    END LOOP;
END
$$;

GRANT SELECT, INSERT, UPDATE, DELETE ON teams, team_members, team_devices, team_locations
    TO sds_api;

-- ---- the restriction on what the API reads -------------------------------------------------
-- RESTRICTIVE policies are ANDed with the organisation's (api_tenant). For everyone but a
-- teams-only member the first arm is true and the subquery is never run, so other callers
-- pay one setting lookup per row of these small tables.
CREATE POLICY api_teams ON devices AS RESTRICTIVE TO sds_api
    USING (NOT sds_request_teams_only() OR id IN (SELECT sds_request_team_device_ids()));
CREATE POLICY api_teams ON locations AS RESTRICTIVE TO sds_api
    USING (NOT sds_request_teams_only() OR id IN (SELECT sds_request_team_location_ids()));
-- deployments, crop_coefficients and auth_tokens follow their parent's policy (0050), and so
-- do calibrated, hourly, local_hourly, daily and health (0051: `device IN (SELECT name FROM
-- devices)`): the team restriction reaches the hypertables through the small devices table,
-- by device, with no new per-row cost there.

-- Annotations, alert rules and their states and events name a device or a location: a
-- teams-only member sees those of their devices and locations. Rules and events that name
-- neither (a rule for the whole organisation, a disabled channel, a channel's test message)
-- show no device's data and stay readable: a member may send a channel's test, and the
-- INSERT ... RETURNING of its event must see the new row.
CREATE POLICY api_teams ON annotations AS RESTRICTIVE TO sds_api
    USING (NOT sds_request_teams_only()
           OR device_id IN (SELECT d.id FROM devices d)
           OR location_id IN (SELECT l.id FROM locations l));
CREATE POLICY api_teams ON alert_rules AS RESTRICTIVE TO sds_api
    USING (NOT sds_request_teams_only()
           OR (device_id IS NULL AND location_id IS NULL)
           OR device_id IN (SELECT d.id FROM devices d)
           OR location_id IN (SELECT l.id FROM locations l));
CREATE POLICY api_teams ON alert_states AS RESTRICTIVE TO sds_api
    USING (NOT sds_request_teams_only() OR device IN (SELECT d.name FROM devices d));
CREATE POLICY api_teams ON alert_events AS RESTRICTIVE TO sds_api
    USING (NOT sds_request_teams_only()
           OR (device IS NULL AND location_id IS NULL)
           OR device IN (SELECT d.name FROM devices d)
           OR (device IS NULL AND location_id IN (SELECT l.id FROM locations l)));
CREATE POLICY api_teams ON alert_deliveries AS RESTRICTIVE TO sds_api
    USING (NOT sds_request_teams_only() OR event_id IN (SELECT e.id FROM alert_events e));

-- The quarantine view runs with its owner's rights (0070), so it filters by itself.
CREATE OR REPLACE VIEW org_quarantine WITH (security_barrier) AS
SELECT q.id, q.received_at, q.topic, q.device, q.reason, q.detail, q.reading_index,
       octet_length(q.payload) AS payload_bytes, q.payload
FROM quarantine q
JOIN devices d ON d.name = q.device
WHERE d.org_id = sds_request_org()
  AND (NOT sds_request_teams_only() OR d.id IN (SELECT sds_request_team_device_ids()));
