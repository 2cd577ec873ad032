"""A user's dashboard preferences: chosen units, time zone and columns per table.

Stored in `users.preferences` (migration 0130, one JSON object; keys in docs/dashboard.md
"Preferences"), read when a page is made and written by the device page's script through
`PUT /dashboard/preferences` (serve.web.views) and by `PATCH /api/v2/users/me`
(serve/api/users.py): it sits outside serve/web/ so that the API never imports the dashboard.
The tables the dashboard charts and their plottable columns are here too, as what a preference
may name. Everything written is checked here first: an unknown key, unit code, zone, table or
column is a BadRequest naming it, never stored.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any
from uuid import UUID

import psycopg
from psycopg.types.json import Jsonb

from shared import units
from shared.columns import TABLES, Column
from shared.errors import BadParameter, BadRequest
from shared.timeutil import parse_local_time

# Zone choices that are not a zone name: the device's own zone, and the browser's.
ZONE_WORDS = ("device", "browser")
KEYS = ("units", "zone", "columns")
_ZONE_MAX = 64

# The tables the device page charts, in menu order, with a short title, default range and
# the time between two rows (a longer distance between rows is an outage, drawn as a gap).
CHART_TABLES = {
    "calibrated": ("5-minute readings", timedelta(days=7), timedelta(minutes=5)),
    "hourly": ("Hourly (UTC hours)", timedelta(days=30), timedelta(hours=1)),
    "local_hourly": ("Hourly (local hours)", timedelta(days=30), timedelta(hours=1)),
    "daily": ("Daily (local days)", timedelta(days=365), timedelta(days=1)),
}


def plottable(table: str) -> list[Column]:
    """Numeric columns of `table` (keys, text, flags and timestamps cannot be drawn)."""
    return [c for c in TABLES[table].columns if c.is_numeric]


def check(raw: Any) -> dict[str, Any]:
    """The preferences in `raw` (a JSON object), checked; BadRequest saying what is wrong."""
    if not isinstance(raw, dict):
        raise BadRequest("preferences: expected a JSON object")
    unknown = sorted(set(raw) - set(KEYS))
    if unknown:
        raise BadRequest(f"preferences: unknown key(s) {', '.join(unknown)}; known: "
                         f"{', '.join(KEYS)}")
    out: dict[str, Any] = {}
    if "units" in raw:
        out["units"] = _units(raw["units"])
    if "zone" in raw:
        out["zone"] = _zone(raw["zone"])
    if "columns" in raw:
        out["columns"] = _columns(raw["columns"])
    return out


def _units(raw: Any) -> dict[str, str]:
    if not isinstance(raw, dict):
        raise BadRequest("preferences.units: expected an object of unit parameter to code")
    out = {}
    for param, code in raw.items():
        if param not in units.UNIT_PARAMS:
            raise BadRequest(f"preferences.units: unknown unit parameter {param!r}; known: "
                             f"{', '.join(units.UNIT_PARAMS)}")
        if code not in units.UNITS[param]:
            raise BadRequest(f"preferences.units.{param}: {code!r} is not one of "
                             f"{', '.join(units.UNITS[param])}")
        out[param] = code
    return out


def _zone(raw: Any) -> str:
    if not isinstance(raw, str) or not raw.strip() or len(raw) > _ZONE_MAX:
        raise BadRequest("preferences.zone: expected 'device', 'browser', an IANA zone or an "
                         f"offset, at most {_ZONE_MAX} characters")
    value = raw.strip()
    if value not in ZONE_WORDS:
        try:
            parse_local_time(value)
        except BadParameter as exc:
            raise BadRequest(f"preferences.zone: {exc.message}") from None
    return value


def _columns(raw: Any) -> dict[str, list[str]]:
    if not isinstance(raw, dict):
        raise BadRequest("preferences.columns: expected an object of table to column names")
    out = {}
    for table, names in raw.items():
        if table not in CHART_TABLES:
            raise BadRequest(f"preferences.columns: unknown table {table!r}; known: "
                             f"{', '.join(CHART_TABLES)}")
        known = [c.name for c in plottable(table)]
        if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
            raise BadRequest(f"preferences.columns.{table}: expected a list of column names")
        bad = [n for n in names if n not in known]
        if bad:
            raise BadRequest(f"preferences.columns.{table}: no plottable column(s) "
                             f"{', '.join(map(repr, bad))}")
        out[table] = list(dict.fromkeys(names))
    return out


# Preferences are the user's, whichever organisation they act in; `org` must be one of theirs.
# Whole literals (no concatenation), so the statements are plainly constant.
_READ_SQL = ("SELECT preferences FROM users WHERE id = %s AND EXISTS (SELECT 1 FROM memberships"
             " m WHERE m.user_id = users.id AND m.org_id = %s)")
_LOCK_SQL = ("SELECT preferences FROM users WHERE id = %s AND EXISTS (SELECT 1 FROM memberships"
             " m WHERE m.user_id = users.id AND m.org_id = %s) FOR UPDATE")
_WRITE_SQL = ("UPDATE users SET preferences = %s WHERE id = %s AND EXISTS (SELECT 1 FROM"
              " memberships m WHERE m.user_id = users.id AND m.org_id = %s)")


def read(conn: psycopg.Connection, *, user: UUID, org: UUID) -> dict[str, Any]:
    """The user's stored preferences (an empty object when none)."""
    row = conn.execute(_READ_SQL, (user, org)).fetchone()
    return dict(row[0]) if row and isinstance(row[0], dict) else {}


# Keys whose objects merge entry by entry (a page that shows three unit selectors changes
# those three units, not the other two; columns per table); other keys are replaced whole.
MERGED = ("units", "columns")


def write(conn: psycopg.Connection, *, user: UUID, org: UUID, changes: dict[str, Any]
          ) -> dict[str, Any]:
    """Merge the checked `changes` into the user's preferences (keys not sent are kept;
    `units` and `columns` merge per unit parameter and per table, other keys are replaced);
    the result."""
    row = conn.execute(_LOCK_SQL, (user, org)).fetchone()
    if row is None:
        return {}
    stored = dict(row[0]) if isinstance(row[0], dict) else {}
    for key, value in changes.items():
        stored[key] = {**(stored.get(key) or {}), **value} if key in MERGED else value
    conn.execute(_WRITE_SQL, (Jsonb(stored), user, org))
    return stored


def chosen_units(args: dict[str, str], stored: dict[str, Any]) -> dict[str, str]:
    """Unit codes for a page: a unit parameter in the URL wins, then the user's preference."""
    remembered = stored.get("units") or {}
    return {p: args[p] if p in args else remembered.get(p, "") for p in units.UNIT_PARAMS}
