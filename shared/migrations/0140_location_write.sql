-- locations:write (issue 23): an organisation's administrators change a location through the
-- API. Notes and the crop name are the location's own words; the API role may now update
-- locations, replace their crop-coefficient schedule and mark the rollups the change affects
-- (shared/dirty.mark_location). Row-level security (api_tenant, 0050) already limits every
-- one of these to the caller's organisation: UPDATE sees and writes only its locations, and
-- crop_coefficients rows follow their location.

ALTER TABLE locations
    ADD COLUMN notes text CHECK (length(notes) <= 2000),
    ADD COLUMN crop  text CHECK (length(crop) BETWEEN 1 AND 100);

GRANT UPDATE (name, lat, lon, elev, tz_name, kc, sensor_height, state, notes, crop, updated_at)
    ON locations TO sds_api;
GRANT INSERT, DELETE ON crop_coefficients TO sds_api;
-- Marks name a device and a bucket; the API writes only those of readings it can see (RLS on
-- calibrated), and a mark makes the scheduler recompute one bucket from stored rows, never
-- change them otherwise.
GRANT INSERT ON rollup_dirty TO sds_api;
