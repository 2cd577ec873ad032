-- /api/v2/orgs/{id} (issue 23): an organisation's administrators rename it. Row-level security
-- (api_tenant on organisations, 0050) limits the API role to its own organisation.
GRANT UPDATE (name) ON organisations TO sds_api;
