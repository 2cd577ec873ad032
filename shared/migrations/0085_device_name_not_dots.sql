-- A device name made only of dots ('.', '..', '...') passes the 0001 pattern but cannot be
-- reached by path: clients and proxies resolve /devices/.. before it is sent. New names
-- may not be dots only (shared/accounts.py DEVICE_NAME is the Python side of this rule).
-- NOT VALID: an install that already has such a device keeps it (it stays reachable by
-- query parameter, e.g. /data/calibrated?device=..) instead of failing the upgrade.
ALTER TABLE devices ADD CONSTRAINT devices_name_not_only_dots
    CHECK (name !~ '^\.+$') NOT VALID;
