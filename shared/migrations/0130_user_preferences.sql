-- A user's dashboard preferences (units, time zone, columns per table), kept on the server so
-- they follow the user to every device page, every browser and every machine. One JSON
-- object; its keys are documented in docs/dashboard.md "Preferences" and checked by
-- serve/web/preferences.py before they are written. The people issue will expose the same
-- column at /api/v2/users/me. Tenancy: the row is the user's own, under the users table's
-- row-level security (0050); sds_api already holds SELECT and UPDATE on users.
ALTER TABLE users ADD COLUMN preferences jsonb NOT NULL DEFAULT '{}';
