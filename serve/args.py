"""Marshmallow schemas for the query strings of `/schemas` and `/data/{table}`.

Each field parses one parameter into a typed value and turns a bad value into a message naming
the parameter (answered as 400 by `serve.errors.Parser`). Unknown parameters are ignored (clients
send `vol`, `apikey`, ...), and an empty value counts as absent.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import date, datetime, tzinfo
from typing import Any

import marshmallow as ma
from marshmallow import fields, validate

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

    def _deserialize(self, value: Any, attr: str | None, data: Any, **kwargs: Any) -> TimeArg:
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

    def _deserialize(self, value: Any, attr: str | None, data: Any, **kwargs: Any) -> LocalTimeArg:
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

    def _deserialize(self, value: Any, attr: str | None, data: Any, **kwargs: Any) -> units.Unit:
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
        if isinstance(clean.get("order"), str):
            clean["order"] = clean["order"].strip().lower()
        return clean


class DataArgs(_QuerySchema):
    """Query parameters of GET /api/v2/data/{table}."""

    device = fields.String(metadata={"description": "Device name; device or location is required"})
    location = fields.String(metadata={
        "description": "Location id (or its name); device or location is required. With device: "
                       "that device's rows while it stood at this location"})
    select = fields.String(metadata={
        "description": "Comma-separated columns, returned in this order (default: all columns "
                       "of the table, see /schemas/{table})"})
    start_time = Instant(metadata={
        "description": "Inclusive start: 2019-07-01 or 2019-07-01T12:00:00Z (offsets and "
                       "fractions accepted); default end_time minus the table's window"})
    end_time = Instant(metadata={"description": "Inclusive end, same forms; default now"})
    limit = fields.Integer(
        validate=validate.Range(1, MAX_LIMIT, error="must be an integer from 1 to 10000"),
        error_messages={"invalid": "must be an integer from 1 to 10000"},
        metadata={"description": "Rows per page, 1..10000; default the table's row cap"})
    cursor = fields.String(metadata={"description": "X-Cursor-Next of the previous page"})
    order = fields.String(
        validate=validate.OneOf(["asc", "desc"], error="must be asc or desc"),
        metadata={"description": "Sort direction on time: asc (default) or desc",
                  "enum": ["asc", "desc"]})
    local_time = LocalTime(metadata={
        "description": "Adds a local_time column: an IANA zone (DST-aware, e.g. "
                       "America/New_York), an offset like -04:00, or seconds like -25200 (flat)"})
    temp = UnitCode("temp", metadata={"description": _unit_doc("temp")})
    pres = UnitCode("pres", metadata={"description": _unit_doc("pres")})
    size = UnitCode("size", metadata={"description": _unit_doc("size")})
    ratio = UnitCode("ratio", metadata={"description": _unit_doc("ratio")})
    speed = UnitCode("speed", metadata={"description": _unit_doc("speed")})
