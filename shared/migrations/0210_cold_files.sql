-- The cold tier's catalogue (issue 36, docs/operations.md "Cold tier"): one row per Parquet file
-- of `calibrated` readings moved out of the table, by organisation and month. A file is written,
-- read back and verified (rows + content checksum, state 'verified'), then one transaction
-- deletes exactly its rows from `calibrated` and marks it 'live'. Readers use verified and live
-- files and prefer a hot row over a cold copy of it, so no reading is ever shown twice or lost
-- whatever step the mover was killed at; 'pending' rows are files being written, which the next
-- run removes.
CREATE TABLE cold_files (
    id          bigserial PRIMARY KEY,
    org_id      uuid NOT NULL REFERENCES organisations (id) ON DELETE CASCADE,
    month       date NOT NULL CHECK (extract(day FROM month) = 1),
    path        text NOT NULL UNIQUE,  -- relative to SDS_COLD_PATH
    state       text NOT NULL DEFAULT 'pending' CHECK (state IN ('pending', 'verified', 'live')),
    rows        bigint,
    bytes       bigint,
    checksum    text,  -- sha256 of the rows' content (shared.coldfiles.content_checksum)
    first_time  timestamptz,
    last_time   timestamptz,
    created     timestamptz NOT NULL DEFAULT now(),
    live_at     timestamptz
);
CREATE INDEX cold_files_org_idx ON cold_files (org_id, month);

-- The API reads the catalogue of its own organisation only.
GRANT SELECT ON cold_files TO sds_api;
ALTER TABLE cold_files ENABLE ROW LEVEL SECURITY;
ALTER TABLE cold_files FORCE ROW LEVEL SECURITY;
CREATE POLICY owner_all ON cold_files TO CURRENT_USER USING (true) WITH CHECK (true);
CREATE POLICY api_tenant ON cold_files FOR SELECT TO sds_api
    USING (org_id = sds_request_org());
