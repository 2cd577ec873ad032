-- The cold tier's operational life (issue 36, docs/operations.md "Cold tier"): the scheduler's
-- mover runs as sds_aggregate, and a cold month's files are rewritten in place of one another
-- (compaction of late readings, relabels of moved devices, retention), through the same
-- verified steps as a move. A rewrite's new file is 'staged' (written and verified, not yet
-- read: its rows are still in the files it replaces) until one transaction makes it 'live' and
-- the files it replaces 'retired' (no longer read), which are then removed.
ALTER TABLE cold_files DROP CONSTRAINT cold_files_state_check;
ALTER TABLE cold_files ADD CONSTRAINT cold_files_state_check
    CHECK (state IN ('pending', 'verified', 'staged', 'live', 'retired'));

-- A device moved (shared/places.move_device) over readings already cold: the relabel is queued
-- in the move's transaction and the scheduler rewrites the files holding them (its rollups are
-- marked then). Readers show the old location for those cold rows until it did.
CREATE TABLE cold_relabels (
    id         bigserial PRIMARY KEY,
    device     text NOT NULL,
    location   uuid NOT NULL REFERENCES locations (id) ON DELETE CASCADE,
    lo         timestamptz NOT NULL,
    hi         timestamptz,  -- NULL: open-ended
    requested  timestamptz NOT NULL DEFAULT now()
);

GRANT SELECT, INSERT, UPDATE, DELETE ON cold_files, cold_relabels TO sds_aggregate;
GRANT USAGE ON SEQUENCE cold_files_id_seq TO sds_aggregate;
CREATE POLICY service_all ON cold_files TO sds_aggregate USING (true) WITH CHECK (true);
-- The mover deletes the readings it made cold; it reads organisations' names for status.
GRANT DELETE ON calibrated TO sds_aggregate;

-- The API queues relabels (INSERT only; it reads none). A service table like rollup_dirty,
-- without row-level security: the move that queues one passed the deployments' tenant checks
-- in the same transaction, and the scheduler applies a queued relabel only when the location
-- is of the device's organisation (aggregate/coldrelabel.py).
GRANT INSERT ON cold_relabels TO sds_api;
GRANT USAGE ON SEQUENCE cold_relabels_id_seq TO sds_api;
