-- Per-credential request counters for the API rate limit (SDS_API_RATE_LIMIT), shared by every
-- API worker and host so the limit holds across processes. One row per API key or user
-- ('key:<uuid>' / 'user:<uuid>'): a fixed window that starts with its first request.
-- UNLOGGED: a counter is written on every authenticated request, and losing the counts in a
-- database crash only opens a fresh window; skipping the WAL keeps the write cheap.
-- fillfactor 50 leaves room on each page for HOT updates of the same row.

CREATE UNLOGGED TABLE request_rate (
    subject      text PRIMARY KEY,
    window_start timestamptz NOT NULL,
    requests     integer NOT NULL
) WITH (fillfactor = 50);
