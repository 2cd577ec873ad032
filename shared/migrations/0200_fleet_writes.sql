-- The fleet from the dashboard (issue 34): an administrator adds a device (registered and
-- deployed in one step, POST /api/v2/devices), retires one, and creates a location
-- (POST /api/v2/locations), all through the API role. Row-level security keeps each write to
-- the caller's organisation: api_tenant (0050) checks new rows' org_id, api_teams (0155)
-- keeps a teams-only caller to their own (and such a caller is no administrator anyway).
-- Only the columns those writes set are granted.

GRANT INSERT (org_id, name, type, model) ON devices TO sds_api;
GRANT UPDATE (state) ON devices TO sds_api;
GRANT INSERT (org_id, name, tz_name, lat, lon, elev, kc, sensor_height, start_date)
    ON locations TO sds_api;
