"""Decoding and validation of one MQTT payload into readings; pure (no I/O, no clock).

A payload is one JSON object or a JSON array of objects. Each object carries `time` (ISO 8601
with a UTC offset) and measurement fields in stored units; the fields and their plausible
ranges come from the column registry (`READING_INPUTS`, `HEALTH_INPUTS`, `Column.valid_range`).

Whole-message problems (too large, not UTF-8, not JSON, wrong shape) reject the message; problems
of one reading reject only that reading, so good readings beside it are stored. Every rejection
carries a short reason code (the quarantine `reason`) and a readable detail.

Per-element isolation: whatever one element of an array holds (a time outside datetime's range,
nesting deeper than any parser allows, an integer of thousands of digits, bytes that are not
UTF-8, repeated keys), only that element is rejected: the framer (ingest/jsonframe.py) parses
each element on its own when it must, and this module validates what it found.

Bounded output: at most `Limits.max_rejections` rejections are kept in full per message; the
rest are only counted by reason (`Decoded.summarised`), so a 2 MB array of a million bad
elements costs a bounded number of quarantine rows and a bounded amount of memory.

The validators are compiled from the registry rather than built as marshmallow schemas: with all
sixteen reading fields, marshmallow's `Schema.load` measured 42 us per reading here against 2.4 us
for these checks, and decoding is on the ingester's critical path (benchmark bench/ingest).
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any, NamedTuple

import orjson

from ingest.jsonframe import (
    HugeInt,
    NonFinite,
    Unparsed,
    frame,
)
from ingest.topics import HEALTH, READINGS
from shared.columns import HEALTH_INPUTS, READING_INPUTS, Column
from shared.quarantinecodes import (
    BAD_SHAPE,
    BAD_TEXT,
    BAD_TIME,
    DEVICE_MISMATCH,
    DUPLICATE_KEY,
    FUTURE_TIME,
    MISSING_TIME,
    NO_VALUES,
    NOT_FINITE,
    OFF_GRID,
    OUT_OF_RANGE,
    REASONS,
    TOO_OLD,
    WRONG_TYPE,
)
from shared.timeutil import on_5min_grid

_ORDER = {code: i for i, code in enumerate(REASONS)}
MAX_FW_LENGTH = 64


@dataclass(frozen=True, slots=True)
class Limits:
    """Validation limits taken from the settings."""

    max_payload: int = 1536 * 1024  # SDS_INGEST_MAX_PAYLOAD's default (shared/config.py)
    max_future: timedelta = timedelta(seconds=300)
    horizon: timedelta = timedelta(days=400)
    max_rejections: int = 100  # rejections kept one by one per message; the rest are counted

    @classmethod
    def from_settings(cls, settings: Any) -> Limits:
        """Limits of a `Settings` object."""
        return cls(max_payload=settings.ingest_max_payload,
                   max_future=timedelta(seconds=settings.ingest_max_future),
                   horizon=timedelta(days=settings.ingest_horizon_days),
                   max_rejections=max(1, settings.ingest_quarantine_rows_per_message))


class Reading(NamedTuple):
    """One accepted reading (or health report): its time and its fields in stored units.

    `index` is the position in a JSON array payload, None for a single-object payload.
    (A NamedTuple rather than a frozen dataclass: created once per reading, three times
    cheaper.)
    """

    index: int | None  # type: ignore[assignment]  # the field shadows tuple.index on purpose
    time: datetime
    values: dict[str, float | str | None]


@dataclass(frozen=True, slots=True)
class Rejection:
    """One rejected reading (`index` set) or a rejected message (`index` None)."""

    index: int | None
    code: str
    detail: str
    # The rejected array element's JSON (its raw bytes when the careful path cut it out): the
    # quarantine row stores it instead of repeating the whole message (ingest/writer.py).
    element: bytes | None = None


@dataclass(slots=True)
class Decoded:
    """The outcome of decoding one payload.

    `summarised` counts, by reason, the rejections beyond `Limits.max_rejections` (not kept
    one by one).
    """

    readings: list[Reading] = field(default_factory=list)
    rejections: list[Rejection] = field(default_factory=list)
    unknown_fields: int = 0
    summarised: Counter[str] = field(default_factory=Counter)

    def reject(self, rejection: Rejection, limit: int) -> None:
        """Keep `rejection`, or only count it once `limit` rejections are kept."""
        if len(self.rejections) < limit:
            self.rejections.append(rejection)
        else:
            self.summarised[rejection.code] += 1

    @property
    def rejected(self) -> int:
        """All rejections, kept and summarised."""
        return len(self.rejections) + sum(self.summarised.values())



Check = Callable[[Any], tuple[str, str] | None]


def _number_check(col: Column) -> Check:
    lo, hi = col.valid_range if col.valid_range else (-math.inf, math.inf)
    unit = f" {col.unit}" if col.unit else ""

    def check(value: Any) -> tuple[str, str] | None:
        kind = type(value)
        if kind is float:
            if not math.isfinite(value):
                return NOT_FINITE, f"{col.name}: {value!r} is not a finite number"
        elif kind is int:
            pass
        elif kind is NonFinite:
            return NOT_FINITE, f"{col.name}: {value} is not a finite number"
        elif kind is HugeInt:
            return OUT_OF_RANGE, (f"{col.name}: an integer of {len(value.lstrip('-'))} digits "
                                  f"is outside {lo:g}..{hi:g}{unit}")
        else:
            return WRONG_TYPE, f"{col.name}: expected a number, got {_json_type(value)}"
        if not lo <= value <= hi:
            return OUT_OF_RANGE, f"{col.name}: {_number(value)} is outside {lo:g}..{hi:g}{unit}"
        return None

    return check


def _text_check(col: Column) -> Check:
    def check(value: Any) -> tuple[str, str] | None:
        if type(value) is not str:
            return WRONG_TYPE, f"{col.name}: expected a string, got {_json_type(value)}"
        if len(value) > MAX_FW_LENGTH:
            return OUT_OF_RANGE, f"{col.name}: longer than {MAX_FW_LENGTH} characters"
        if not value.isprintable():
            # Control characters (NUL above all, which PostgreSQL text cannot hold).
            return BAD_TEXT, f"{col.name}: {value[:20]!r} contains control characters"
        return None

    return check


def _checks(columns: tuple[Column, ...]) -> dict[str, Check]:
    return {c.name: (_number_check(c) if c.is_numeric else _text_check(c)) for c in columns}


_CHECKS = {READINGS: _checks(READING_INPUTS), HEALTH: _checks(HEALTH_INPUTS)}
# Fast path per numeric field: (low, high) of a finite value that needs no further checks.
_BOUNDS = {kind: {c.name: (c.valid_range if c.valid_range else (-math.inf, math.inf))
                  for c in cols if c.is_numeric}
           for kind, cols in ((READINGS, READING_INPUTS), (HEALTH, HEALTH_INPUTS))}
# Keys that are part of the message format rather than measurements.
_ENVELOPE = frozenset({"time", "device"})


def fields_of(kind: str) -> tuple[str, ...]:
    """The measurement fields a message of `kind` may carry, in registry order."""
    return tuple(_CHECKS[kind])


def _number(value: float) -> str:
    """A number for a detail text; huge integers by their size (their repr could fail)."""
    if type(value) is int and abs(value) >= 10 ** 18:
        return f"an integer of {len(str(abs(value)))} digits"
    return repr(value)


def _json_type(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, str):
        return f"a string ({value[:20]!r})"
    if isinstance(value, list):
        return "an array"
    if isinstance(value, dict):
        return "an object"
    return type(value).__name__



def parse_time(raw: Any) -> datetime | tuple[str, str]:
    """An aware UTC datetime from an ISO 8601 string with an offset, else (code, detail)."""
    if type(raw) is not str:
        return BAD_TIME, f"time: expected an ISO 8601 string, got {_json_type(raw)}"
    try:
        t = datetime.fromisoformat(raw)
    except ValueError:
        return BAD_TIME, f"time: {raw[:40]!r} is not an ISO 8601 date-time"
    if len(raw) < 16:  # a bare date parses too, but is not a reading time
        return BAD_TIME, f"time: {raw!r} is a date, not a date-time"
    if t.tzinfo is UTC:  # `Z` and `+00:00` (the common case)
        return t
    if t.tzinfo is None or t.utcoffset() is None:
        return BAD_TIME, (f"time: {raw[:40]!r} has no UTC offset; send e.g. "
                          "2024-07-01T12:05:00Z")
    try:
        return t.astimezone(UTC)
    except OverflowError:  # e.g. 0001-01-01T00:00:00+01:00 is before year 1 in UTC
        return BAD_TIME, (f"time: {raw[:40]!r} is outside the representable range "
                          "(years 1-9999 in UTC)")


def decode_payload(
    payload: bytes, *, kind: str, device: str, now: datetime, limits: Limits,
) -> Decoded:
    """Decode and validate the payload of a `kind` message published by `device` at `now`."""
    value, problem, repeated, raws = frame(payload, limits.max_payload)
    out = Decoded()
    if problem is not None:
        out.rejections.append(Rejection(None, *problem))
        return out
    if isinstance(value, dict):
        items: list[tuple[int | None, Any]] | enumerate[Any] = [(None, value)]
    elif isinstance(value, list) and value:
        items = enumerate(value)
    else:
        what = "an empty array" if isinstance(value, list) else _json_type(value)
        out.rejections.append(Rejection(
            None, BAD_SHAPE, f"payload is {what}; expected an object or an array of objects"))
        return out
    checks = _CHECKS[kind]
    bounds = _BOUNDS[kind]
    newest = now + limits.max_future
    oldest = now - limits.horizon
    keep = limits.max_rejections
    for index, item in items:
        if type(item) is not dict and len(out.rejections) >= keep:
            # Past the cap (e.g. a million-element [1,1,...]): count without building a detail.
            out.summarised[item.code if type(item) is Unparsed else BAD_SHAPE] += 1
            continue
        where = "" if index is None else f"reading {index}: "
        if type(item) is Unparsed:
            out.reject(Rejection(index, item.code, f"{where}element {item.detail}",
                                 None if raws is None or index is None else raws[index]), keep)
            continue
        if index in repeated:
            keys = ", ".join(repr(k[:40]) for k in dict.fromkeys(repeated[index]))
            problems: list[tuple[str, str]] = [(DUPLICATE_KEY, f"repeated key(s) {keys[:200]}")]
            reading = None
        else:
            reading, problems, unknown = _validate(item, kind, checks, bounds, device, newest,
                                                   oldest)
            out.unknown_fields += unknown
        if problems:
            if len(out.rejections) >= keep:  # past the cap: count only, build nothing
                out.summarised[_first(problems)] += 1
                continue
            problems.sort(key=lambda p: _ORDER.get(p[0], len(_ORDER)))
            element = None if index is None else (
                raws[index] if raws is not None else _element_json(item))
            out.rejections.append(Rejection(
                index, problems[0][0], where + "; ".join(d for _, d in problems), element))
        elif reading is not None:
            out.readings.append(Reading(index, reading[0], reading[1]))
    return out


def _first(problems: list[tuple[str, str]]) -> str:
    return min(problems, key=lambda p: _ORDER.get(p[0], len(_ORDER)))[0]


def _element_json(item: Any) -> bytes:
    """An element's JSON for its quarantine row (re-encoded; a description if it cannot be)."""
    try:
        return orjson.dumps(item, default=str)
    except (TypeError, orjson.JSONEncodeError):  # e.g. nested deeper than orjson writes
        return orjson.dumps(f"(element not re-encoded: {_json_type(item)} nested too deeply;"
                            " the whole message is on the message's first quarantine row)")


def _validate(
    item: Any, kind: str, checks: dict[str, Check], bounds: dict[str, tuple[float, float]],
    device: str, newest: datetime, oldest: datetime,
) -> tuple[tuple[datetime, dict[str, Any]] | None, list[tuple[str, str]], int]:
    if not isinstance(item, dict):
        return None, [(BAD_SHAPE, f"expected an object, got {_json_type(item)}")], 0
    problems: list[tuple[str, str]] = []
    sent = item.get("device")
    if sent is not None and sent != device:
        named = repr(sent[:64]) if isinstance(sent, str) else _json_type(sent)
        problems.append((DEVICE_MISMATCH, f"device: payload names {named} but the "
                         f"topic is device {device!r}"))
    t: datetime | None = None
    if "time" not in item:
        problems.append((MISSING_TIME, "time: missing"))
    else:
        parsed = parse_time(item["time"])
        if isinstance(parsed, tuple):
            problems.append(parsed)
        else:
            t = parsed
            if kind == READINGS and not on_5min_grid(t):
                problems.append((OFF_GRID, f"time: {t:%Y-%m-%dT%H:%M:%S.%fZ} is not on the "
                                 "5-minute grid (minutes divisible by 5, zero seconds)"))
            if t > newest:
                problems.append((FUTURE_TIME, f"time: {t:%Y-%m-%dT%H:%M:%SZ} is in the future"))
            elif t < oldest:
                problems.append((TOO_OLD, f"time: {t:%Y-%m-%dT%H:%M:%SZ} is older than the "
                                 "accepted horizon"))
    values: dict[str, Any] = {}
    unknown = 0
    for key, value in item.items():
        bound = bounds.get(key)
        if bound is not None:
            # Fast path for the common case: a finite number in range (NaN fails `<=`).
            kind_of = type(value)
            if kind_of is float and bound[0] <= value <= bound[1]:
                values[key] = value
                continue
            if kind_of is int and bound[0] <= value <= bound[1]:
                values[key] = float(value)
                continue
        check = checks.get(key)
        if check is None:
            if key not in _ENVELOPE:
                unknown += 1
            continue
        if value is None:
            continue
        problem = check(value)
        if problem is not None:
            problems.append(problem)
        else:
            values[key] = float(value) if type(value) is int else value
    if not values and not problems:
        problems.append((NO_VALUES, "no measurement fields (known fields: "
                         + ", ".join(checks) + ")"))
    if problems or t is None:
        return None, problems, unknown
    return (t, values), problems, unknown
