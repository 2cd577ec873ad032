-- Key retrieval (interface spec 2.7, 3, 4.8; docs/auth.md "Key retrieval"): beside the SHA-256
-- digest used for lookup, each API key may keep a sealed copy of its value, encrypted with
-- Fernet under SDS_APIKEY_SEAL_KEYS, which the database never holds. NULL: a show-once key
-- (made while retrieval was off, or before this migration).
ALTER TABLE api_keys ADD COLUMN sealed bytea;

COMMENT ON COLUMN api_keys.digest IS
    'SHA-256 of the key: the only form lookups use. The value itself is stored only sealed.';
COMMENT ON COLUMN api_keys.sealed IS
    'Fernet-encrypted key value (SDS_APIKEY_SEAL_KEYS, not in the database); NULL: show-once';

-- api_keys stays a tenant table (forced row-level security, policy api_tenant). sds_api holds
-- table-wide SELECT, INSERT and UPDATE (0050), so the owner's requests may write and read the
-- sealed copy of their own organisation's keys. sds_auth keeps its column grants (id,
-- last_seen; 0052): credential checks never see the sealed copy.
