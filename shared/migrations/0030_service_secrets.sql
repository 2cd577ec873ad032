-- Random keys that every API worker and host must share, kept in the database so a fresh
-- install works without configuration: the /data cursor HMAC key is used when SDS_CURSOR_SECRET
-- is unset. The first worker to start inserts it; the others read the same row.

CREATE TABLE service_secrets (
    name        text PRIMARY KEY,
    value       bytea NOT NULL CHECK (length(value) >= 32),
    created_at  timestamptz NOT NULL DEFAULT now()
);
