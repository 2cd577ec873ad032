"""Marshmallow schemas for the query strings of `/schemas` and `/data/{table}`.

Each field parses one parameter into a typed value and turns a bad value into a message naming
the parameter (answered as 400 by `serve.errors.Parser`). An empty value counts as absent. The
schemas themselves ignore unknown parameters; `/data` applies `check_parameters` first: a near
miss of a known name is a 400 ("did you mean temp?"), anything else is ignored and named in
X-Ignored-Parameters (docs/api.md "Unknown parameters").
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import date, datetime, tzinfo
from typing import Any

import marshmallow as ma
from marshmallow import fields, validate

from serve.aggregation import LADDER
from serve.counts import Count
from shared import units
from shared.errors import BadParameter
from shared.timeutil import parse_instant, parse_local_time

MAX_LIMIT = 10000


@dataclass(frozen=True, slots=True)
class TimeArg:
    """A parsed start_time/end_time: the instant, the raw text, and whether it was a date."""

    instant: datetime
    raw: str
    day: date | None  # set when the value was a date alone (2019-07-01)


@dataclass(frozen=True, slots=True)
class LocalTimeArg:
    """A parsed local_time: the zone or flat offset, and the raw text."""

    tz: tzinfo
    raw: str


# An unencoded '+' in a query string arrives as a space: `...T12:00:00 02:00` meant +02:00.
_PLUS_AS_SPACE = re.compile(
    r"^(\d{4}-\d{2}-\d{2}T\d{2}:\d{2}(?::\d{2}(?:\.\d+)?)?) (\d{2}:?\d{2})$")
_OFFSET_AS_SPACE = re.compile(r"^ \d{1,2}:\d{2}$")


class Instant(fields.String):
    """ISO 8601 date or datetime (Z, offsets, fractional seconds) -> TimeArg."""

    # A String on the wire (and in the OpenAPI document), a typed value once parsed.
    def _deserialize(  # type: ignore[override]
            self, value: Any, attr: str | None, data: Any, **kwargs: Any) -> TimeArg:
        text = _PLUS_AS_SPACE.sub(r"\1+\2", super()._deserialize(value, attr, data, **kwargs))
        try:
            instant = parse_instant(text, name=attr or "time")
        except BadParameter as exc:
            raise ma.ValidationError(_after_name(exc.message)) from None
        stripped = text.strip()
        day = instant.date() if len(stripped) == 10 and "T" not in stripped else None
        return TimeArg(instant, stripped, day)


class LocalTime(fields.String):
    """IANA zone name (DST-aware), ±HH:MM or seconds (flat) -> LocalTimeArg."""

    # A String on the wire (and in the OpenAPI document), a typed value once parsed.
    def _deserialize(  # type: ignore[override]
            self, value: Any, attr: str | None, data: Any, **kwargs: Any) -> LocalTimeArg:
        text = super()._deserialize(value, attr, data, **kwargs)
        if _OFFSET_AS_SPACE.match(text):
            text = "+" + text[1:]
        try:
            return LocalTimeArg(parse_local_time(text), text.strip())
        except BadParameter as exc:
            raise ma.ValidationError(_after_name(exc.message)) from None


class UnitCode(fields.String):
    """One unit code of a measurement class (case-insensitive) -> shared.units.Unit."""

    def __init__(self, param: str, **kwargs: Any) -> None:
        self.param = param
        codes = list(units.UNITS[param])
        # The OpenAPI document lists the codes (lower and upper case; any case is accepted).
        metadata = {"enum": codes + [c.upper() for c in codes], **kwargs.pop("metadata", {})}
        super().__init__(metadata=metadata, **kwargs)

    # A String on the wire (and in the OpenAPI document), a typed value once parsed.
    def _deserialize(  # type: ignore[override]
            self, value: Any, attr: str | None, data: Any, **kwargs: Any) -> units.Unit:
        text = super()._deserialize(value, attr, data, **kwargs)
        try:
            return units.parse_unit(self.param, text)
        except BadParameter:
            choices = ", ".join(units.UNITS[self.param])
            raise ma.ValidationError(
                f"unknown unit {text!r}; valid: {choices} (any case)") from None


def _after_name(message: str) -> str:
    """'start_time: x is bad' -> 'x is bad' (the handler prefixes the field name itself)."""
    head, sep, tail = message.partition(": ")
    return tail if sep and " " not in head else message


def _unit_doc(param: str) -> str:
    codes = ", ".join(f"`{c}`" for c in units.UNITS[param])
    return f"Unit for every {param} column: {codes}; default `{units.DEFAULTS[param]}`"


class _QuerySchema(ma.Schema):
    class Meta:
        unknown = ma.EXCLUDE

    @ma.pre_load
    def _normalise(self, data: Any, **kwargs: Any) -> Any:
        # `?start_time=` (empty) is what many scripts send for "not set".
        if not hasattr(data, "items"):
            return data
        clean = {k: v for k, v in data.items() if v not in ("", None)}
        for name in ("order", "format"):
            if isinstance(clean.get(name), str):
                clean[name] = clean[name].strip().lower()
        return clean


MAX_DEVICES = 100  # device names in one /data request (device=A,B or repeated device=)


class DeviceNames(fields.String):
    """`device=A,B` and/or repeated `device=` -> tuple of distinct names in request order
    (None when every value is empty). Device names never hold a comma (letters, digits,
    '_', '.', '-'), so splitting on it cannot change the meaning of a valid name.

    Documented as a string (one text box in Swagger UI, where `A,B` is typed); webargs hands
    over every repeated value because of `is_multiple`."""

    is_multiple = True

    # A List on the wire (and in the OpenAPI document), a tuple of names once parsed.
    def _deserialize(  # type: ignore[override]
            self, value: Any, attr: str | None, data: Any, **kwargs: Any
    ) -> tuple[str, ...] | None:
        values = value if isinstance(value, list | tuple) else [value]
        names: list[str] = []
        for item in values:
            if not isinstance(item, str):
                raise ma.ValidationError("must be a device name")
            # A single name is taken as sent (a stray space stays a 404, as it always was);
            # the parts of a comma list may be spaced ("A, B").
            parts = [p.strip() for p in item.split(",")] if "," in item else [item]
            for name in parts:
                if name and name not in names:
                    names.append(name)
        if len(names) > MAX_DEVICES:
            raise ma.ValidationError(f"at most {MAX_DEVICES} devices in one request "
                                     f"({len(names)} sent); page by location instead")
        return tuple(names) or None


class DataArgs(_QuerySchema):
    """Query parameters of GET /api/v2/data/{table}, in the order the documentation lists
    them (the path's `table` comes first, see serve.create_app)."""

    device = DeviceNames(metadata={
        "description": "Device name; device or location is required. Several devices: "
                       "device=A,B or device=A&device=B (rows interleaved by time, then "
                       "device)"})
    location = fields.String(metadata={
        "description": "Location id (or its name); device or location is required. With device: "
                       "that device's rows while it stood at this location"})
    start_time = Instant(metadata={
        "description": "Inclusive start: 2019-07-01 or 2019-07-01T12:00:00Z (offsets and "
                       "fractions accepted); default end_time minus the table's window"})
    end_time = Instant(metadata={"description": "Inclusive end, same forms; default now"})
    select = fields.String(metadata={
        "description": "Comma-separated columns, returned in this order (default: all columns "
                       "of the table, see /schemas/{table})"})
    order = fields.String(
        validate=validate.OneOf(["asc", "desc"], error="must be asc or desc"),
        metadata={"description": "Sort direction on time: asc (default) or desc",
                  "enum": ["asc", "desc"]})
    limit = Count(1, MAX_LIMIT, metadata={
        "description": f"Rows per page, 1..{MAX_LIMIT} (ASCII digits); default the table's "
                       "row cap"})
    cursor = fields.String(metadata={"description": "X-Cursor-Next of the previous page"})
    local_time = LocalTime(metadata={
        "description": "Adds a local_time column: an IANA zone (DST-aware, e.g. "
                       "America/New_York), an offset like -04:00, or seconds like -25200 (flat)"})
    temp = UnitCode("temp", metadata={"description": _unit_doc("temp")})
    pres = UnitCode("pres", metadata={"description": _unit_doc("pres")})
    size = UnitCode("size", metadata={"description": _unit_doc("size")})
    ratio = UnitCode("ratio", metadata={"description": _unit_doc("ratio")})
    speed = UnitCode("speed", metadata={"description": _unit_doc("speed")})
    format = fields.String(
        validate=validate.OneOf(["csv", "json"], error="must be csv or json"),
        metadata={"description": "csv or json: the body's format, whatever Accept says "
                                 "(default: from Accept, JSON unless text/csv is preferred)",
                  "enum": ["csv", "json"]})
    updated_since = Instant(metadata={
        "description": "hourly, local_hourly, daily: only rows whose update_time is at or "
                       "after this instant (new rows and rows recomputed for late data); "
                       "start_time then defaults to no lower bound. Send back the response's "
                       "X-Updated-Since-Next next time to get what changed since"})
    interval = fields.String(metadata={
        "description": "calibrated: one row per bucket of this width and device instead of "
                       "one per reading: 5m, 10m, 15m, 20m, 30m, 1h, 2h, 3h, 4h, 6h, 8h, 12h "
                       "(UTC-aligned), 1d, 7d (local midnight / Monday in the device's zone). "
                       "Each column by its registry rule; see docs/api.md \"Aggregation\"",
        # The canonical spellings (60min, 1w and any case are accepted too).
        "enum": [i.label for i in LADDER]})
    points = Count(1, MAX_LIMIT, metadata={
        "description": "calibrated, for charts: the finest interval giving at most this many "
                       "buckets per device over the window (not with interval); "
                       "X-Aggregation-Interval names it"})


# ---- parameters the API does not know -------------------------------------------------------

# Sent by real clients of the public API this one is modelled on (and by browsers' cache
# busters); this API has no use for them. Never an error: ignored, and named in
# X-Ignored-Parameters.
TOLERATED = frozenset({
    "order_by", "orderBy", "sortBy", "sort", "page", "page_size", "vol",
    "volumetric_soil_moisture_unit", "_", "callback", "v", "version", "tz_name",
})
# Well-known names other APIs use for a parameter of this one (docs/api.md "Unknown
# parameters", the alias table): a user sending them believes the filter worked, so each is a
# near miss of the parameter(s) meant, in any case or separators (`startDate`, `Per-Page`).
ALIASES: dict[str, tuple[str, ...]] = {
    "start_date": ("start_time",), "end_date": ("end_time",), "sort_by": ("order",),
    "per_page": ("limit",), "output_format": ("format",),
    "units": units.UNIT_PARAMS, "unit": units.UNIT_PARAMS,
}
# Other names for a parameter, as users write them: an error naming the right one.
SYNONYMS = {
    "from": "start_time", "to": "end_time", "start": "start_time", "end": "end_time",
    "begin": "start_time", "since": "updated_since", "tz": "local_time",
    "timezone": "local_time", "time_zone": "local_time", "columns": "select",
    "fields": "select", "cols": "select", "devices": "device", "device_id": "device",
    "location_id": "location", "locations": "location", "temperature": "temp",
    "temperature_unit": "temp", "pressure": "pres", "precipitation": "size", "precip": "size",
    "wind_speed": "speed", "humidity": "ratio", "rows": "limit", "count": "limit",
    "next": "cursor", "page_token": "cursor", "sort_order": "order", "direction": "order",
}
_SAFE_NAME = re.compile(r"^[A-Za-z0-9_.\-\[\]]{1,64}$")
_MAX_LISTED = 20


def _distance(a: str, b: str) -> int:
    """Damerau-Levenshtein distance (optimal string alignment) of two short names."""
    rows = [list(range(len(b) + 1))]
    for i in range(1, len(a) + 1):
        row = [i] + [0] * len(b)
        for j in range(1, len(b) + 1):
            cost = 0 if a[i - 1] == b[j - 1] else 1
            row[j] = min(rows[-1][j] + 1, row[j - 1] + 1, rows[-1][j - 1] + cost)
            if i > 1 and j > 1 and a[i - 1] == b[j - 2] and a[i - 2] == b[j - 1]:
                row[j] = min(row[j], rows[-2][j - 2] + 1)
        rows.append(row)
    return rows[-1][-1]


def near_miss(name: str, known: frozenset[str]) -> str | None:
    """The known parameter `name` was most likely meant to be, or None when it is no near miss.

    A near miss: the same name in another case or with other separators (`Start-Time`,
    `startTime`), a listed synonym (`from`, `temperature`), a known name of 4+ letters it
    begins with (`temperature`, `pressure`), or one typo away (two for names of 8+ letters).
    """
    lowered = name.lower()
    squashed = re.sub(r"[^a-z0-9]", "", lowered)
    for k in sorted(known):
        if lowered == k or squashed == k.replace("_", ""):
            return k
    if lowered in SYNONYMS and SYNONYMS[lowered] in known:
        return SYNONYMS[lowered]
    starts = [k for k in known if len(k) >= 4 and lowered.startswith(k)]
    if starts:
        return max(starts, key=len)
    best: tuple[int, str] | None = None
    for k in sorted(known):
        if len(k) < 4:
            continue
        allowed = 2 if len(k) >= 8 else 1
        d = _distance(lowered, k)
        if d <= allowed and (best is None or d < best[0]):
            best = (d, k)
    return best[1] if best else None


def _alias_of(name: str, known: frozenset[str]) -> tuple[str, ...]:
    """The known parameters a well-known alias (ALIASES, any case or separators) stands for."""
    squashed = re.sub(r"[^a-z0-9]", "", name.lower())
    for alias, meant in ALIASES.items():
        if squashed == alias.replace("_", ""):
            return tuple(m for m in meant if m in known)
    return ()


def _meant(name: str, known: frozenset[str]) -> tuple[str, ...]:
    """The known parameter(s) `name` most likely stands for; () when it is no near miss."""
    if name in TOLERATED:
        return ()
    alias = _alias_of(name, known)
    if alias:
        return alias
    single = near_miss(name, known)
    return (single,) if single is not None else ()


def check_parameters(names: list[str], known: frozenset[str]) -> list[str]:
    """Apply the unknown-parameter policy (docs/api.md "Unknown parameters") to the query's
    parameter names: BadParameter for near misses of `known` names (all of them in one
    answer); the other unknown names, to be listed in X-Ignored-Parameters."""
    misses: dict[str, str] = {}
    ignored: list[str] = []
    for name in names:
        if name in known or name in ignored or name in misses:
            continue
        meant = _meant(name, known)
        # With the parameter meant also sent, the near miss changes nothing a user could
        # have wanted (a client sending both `start` and `start_time`): ignored, not an error.
        if meant and not any(m in names for m in meant):
            misses[name] = meant[0] if len(meant) == 1 else (
                ", ".join(meant[:-1]) + " or " + meant[-1])
        else:
            ignored.append(name)
    if misses:
        shown = {(n if len(n) <= 64 else n[:61] + "..."): m for n, m in misses.items()}
        parts = [f"{n}: unknown parameter, did you mean {m}?" for n, m in shown.items()]
        raise BadParameter(
            "; ".join(parts) + " (an unknown parameter would otherwise change nothing)",
            errors={n: [f"unknown parameter; did you mean {m}?"] for n, m in shown.items()})
    return ignored


def ignored_header(ignored: list[str]) -> str:
    """X-Ignored-Parameters value: the names, comma-separated; names that are not plain
    (odd characters, very long) are counted rather than echoed into a header."""
    plain = [n for n in ignored if _SAFE_NAME.match(n)]
    listed = plain[:_MAX_LISTED]
    others = len(ignored) - len(listed)
    return ", ".join(listed + ([f"({others} other)"] if others else []))
