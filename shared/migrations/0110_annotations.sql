-- Annotations (issue 24, docs/api.md "Annotations"): a note on a device or a location for an
-- instant (end_time NULL) or a time range, with text, tags and the user who wrote it.
-- Bounds live here too, so a write that skips the API's checks still cannot store a hostile size.

CREATE TABLE annotations (
    id          uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    org_id      uuid NOT NULL REFERENCES organisations (id) ON DELETE CASCADE,
    device_id   uuid REFERENCES devices (id) ON DELETE CASCADE,
    location_id uuid REFERENCES locations (id) ON DELETE CASCADE,
    start_time  timestamptz NOT NULL,
    end_time    timestamptz,               -- NULL: an instant at start_time
    text        text NOT NULL CHECK (length(text) BETWEEN 1 AND 2000),
    tags        text[] NOT NULL DEFAULT '{}'
                CHECK (cardinality(tags) <= 20 AND array_position(tags, NULL) IS NULL),
    author_id   uuid REFERENCES users (id) ON DELETE SET NULL,
    created_at  timestamptz NOT NULL DEFAULT now(),
    updated_at  timestamptz NOT NULL DEFAULT now(),
    CHECK (num_nonnulls(device_id, location_id) = 1),   -- on a device or on a location
    CHECK (end_time IS NULL OR end_time >= start_time)
);
-- Listings filter by organisation and overlap with a time window, newest subject first.
CREATE INDEX annotations_org_time_idx ON annotations (org_id, start_time, id);
CREATE INDEX annotations_device_idx ON annotations (device_id, start_time) WHERE device_id IS NOT NULL;
CREATE INDEX annotations_location_idx ON annotations (location_id, start_time)
    WHERE location_id IS NOT NULL;
CREATE INDEX annotations_tags_idx ON annotations USING gin (tags);

GRANT SELECT, INSERT, UPDATE, DELETE ON annotations TO sds_api;

-- Row-level security as on the other tenant tables (0050): the owner through an explicit
-- policy, the API one organisation per request. WITH CHECK also keeps the device or location
-- inside the organisation: the subqueries on devices and locations are filtered by their own
-- policies, so another organisation's device or location is simply not there.
ALTER TABLE annotations ENABLE ROW LEVEL SECURITY;
ALTER TABLE annotations FORCE ROW LEVEL SECURITY;
CREATE POLICY owner_all ON annotations TO CURRENT_USER USING (true) WITH CHECK (true);
CREATE POLICY api_tenant ON annotations TO sds_api
    USING (org_id = sds_request_org())
    WITH CHECK (org_id = sds_request_org()
                AND (device_id IS NULL OR EXISTS (SELECT 1 FROM devices d WHERE d.id = device_id))
                AND (location_id IS NULL
                     OR EXISTS (SELECT 1 FROM locations l WHERE l.id = location_id)));
