"""Time windows and time parsing: 5-minute grid, UTC hours, device-local hours and days.

Every window is half-open `[start, end)` in UTC. Local windows are computed with `zoneinfo`:
a local hour runs from one instant whose wall clock shows hh:00 to the next such instant, cut
at any offset change in between; a local day runs from its first instant (local midnight, or the
first valid instant when midnight does not exist) to the next day's first instant. So 23-, 24.5-
and 25-hour days, 30-minute DST (Australia/Lord_Howe) and :30/:45 zones need no special cases.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import UTC, date, datetime, time, timedelta, timezone, tzinfo
from functools import lru_cache
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError, available_timezones

from shared.errors import BadParameter

FIVE_MINUTES = timedelta(minutes=5)
HOUR = timedelta(hours=1)
_SECOND = timedelta(seconds=1)


def floor_5min(t: datetime) -> datetime:
    """The start of the 5-minute slot containing `t` (aware, UTC)."""
    t = t.astimezone(UTC)
    return t.replace(minute=t.minute - t.minute % 5, second=0, microsecond=0)


def on_5min_grid(t: datetime) -> bool:
    """True when instant `t` is exactly on a 5-minute boundary of UTC."""
    u = t.astimezone(UTC)
    return u.second == 0 and u.microsecond == 0 and u.minute % 5 == 0


def hour_bounds(t: datetime) -> tuple[datetime, datetime]:
    """The UTC hour containing `t`."""
    start = t.astimezone(UTC).replace(minute=0, second=0, microsecond=0)
    return start, start + HOUR


@lru_cache(maxsize=1024)
def zone(name: str) -> ZoneInfo:
    """The IANA zone called `name`; BadParameter for anything else (`UTC+5`, `Mars/Olympus`)."""
    if not isinstance(name, str) or name not in _zone_names():
        raise BadParameter(f"unknown time zone {name!r}: use an IANA name such as Europe/Berlin")
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError) as exc:  # pragma: no cover - listed but unreadable
        raise BadParameter(f"unknown time zone {name!r}") from exc


@lru_cache(maxsize=1)
def _zone_names() -> frozenset[str]:
    return frozenset(available_timezones())


def _offset(t: datetime, tz: tzinfo) -> timedelta:
    off = t.astimezone(tz).utcoffset()
    assert off is not None
    return off


def _first_change(tz: tzinfo, lo: datetime, hi: datetime) -> datetime:
    """The first instant in (lo, hi] whose offset differs from lo's (one must exist)."""
    base = _offset(lo, tz)
    while hi - lo > _SECOND:
        mid = lo + (hi - lo) / 2
        mid = mid.replace(microsecond=0)
        if mid <= lo:
            mid = lo + _SECOND
        if _offset(mid, tz) == base:
            lo = mid
        else:
            hi = mid
    return hi


@lru_cache(maxsize=65536)
def local_hour_bounds(t: datetime, tz: tzinfo) -> tuple[datetime, datetime]:
    """The device-local hour containing instant `t`, as a UTC `[start, end)`.

    Starts at the instant the wall clock last read hh:00 (or the offset change after it) and
    ends at the next hh:00 (or the offset change before it). Bucket lengths are therefore 1 h,
    or 30/45 min or 1.5 h around DST changes in zones with such offsets.
    """
    t = t.astimezone(UTC)
    local = t.astimezone(tz)
    off = local.utcoffset()
    into = timedelta(minutes=local.minute, seconds=local.second, microseconds=local.microsecond)
    start = t - into
    end = start + HOUR
    if _offset(start, tz) != off:
        start = _first_change(tz, start, t)
    if _offset(end - _SECOND, tz) != off:
        end = _first_change(tz, t, end - _SECOND)
    return start, end


@lru_cache(maxsize=65536)
def local_day_start(day: date, tz: tzinfo) -> datetime:
    """The first instant (UTC) of local date `day`: local midnight, or the first valid
    instant after it when midnight falls in a DST gap (America/Santiago 2024-09-08 -> 04:00Z)."""
    guess = datetime.combine(day, time(0), tzinfo=tz).astimezone(UTC)
    local = guess.astimezone(tz)
    if local.date() == day and local.time() == time(0):
        return guess
    # Midnight does not exist (or is ambiguous): find the first instant whose date is `day`.
    lo, hi = guess - timedelta(hours=26), guess + timedelta(hours=26)
    while hi - lo > _SECOND:
        mid = (lo + (hi - lo) / 2).replace(microsecond=0)
        if mid <= lo:
            mid = lo + _SECOND
        if mid.astimezone(tz).date() >= day:
            hi = mid
        else:
            lo = mid
    return hi


def local_day_bounds(day: date, tz: tzinfo) -> tuple[datetime, datetime]:
    """The local day `day` as a UTC `[start, end)`: 23, 24, 24.5 or 25 hours long."""
    return local_day_start(day, tz), local_day_start(day + timedelta(days=1), tz)


def local_date(t: datetime, tz: tzinfo) -> date:
    """The local calendar date of instant `t`."""
    return t.astimezone(tz).date()


def slots(start: datetime, end: datetime) -> int:
    """Number of 5-minute slots in `[start, end)` (both on the grid for whole buckets)."""
    return int((end - start) / FIVE_MINUTES)


ROLLUP_KINDS = ("hourly", "local_hourly", "daily")


def bucket_of(kind: str, t: datetime, tz: tzinfo | None) -> tuple[datetime, datetime]:
    """The `[start, end)` of the rollup bucket of `kind` (hourly, local_hourly, daily) that
    holds instant `t`; the local kinds need the zone. The one rule for "which bucket holds
    this instant", used by the dirty marks and the rollups."""
    if kind == "hourly":
        return hour_bounds(t)
    if tz is None:
        raise ValueError(f"{kind} buckets need a time zone")
    if kind == "local_hourly":
        return local_hour_bounds(t, tz)
    if kind == "daily":
        return local_day_bounds(local_date(t, tz), tz)
    raise ValueError(f"unknown rollup {kind!r}")


@dataclass(frozen=True, slots=True)
class Cell:
    """The largest piece of time in one UTC hour, one local hour and one local day of a zone,
    with one UTC offset: rollups keep partial aggregates per cell and merge them into every
    table (a UTC hour holds one or two cells; two in :30/:45 zones)."""

    start: datetime
    end: datetime
    offset: int  # seconds east of UTC, constant over the cell
    local_hour: tuple[datetime, datetime]
    day: date
    local_day: tuple[datetime, datetime]


def cells(tz: tzinfo, start: datetime, end: datetime) -> list[Cell]:
    """The cells of zone `tz` covering `[start, end)` (from the UTC hour of `start`), in
    order."""
    out: list[Cell] = []
    hour = hour_bounds(start)[0]
    while hour < end:
        out.extend(_hour_cells(hour, tz))
        hour += HOUR
    return out


@lru_cache(maxsize=65536)
def _hour_cells(hour: datetime, tz: tzinfo) -> tuple[Cell, ...]:
    # The scheduler asks for the same zones' recent hours every minute.
    out: list[Cell] = []
    t, end = hour, hour + HOUR
    while t < end:
        lh = local_hour_bounds(t, tz)
        cell_end = min(end, lh[1])
        day = local_date(t, tz)
        out.append(Cell(t, cell_end, int(_offset(t, tz).total_seconds()), lh, day,
                        local_day_bounds(day, tz)))
        t = cell_end
    return tuple(out)


def offset_segments(found: list[Cell]) -> list[tuple[datetime, datetime, int]]:
    """`(from, to, offset seconds)` runs of one UTC offset over consecutive `cells`."""
    runs: list[tuple[datetime, datetime, int]] = []
    for c in found:
        if runs and runs[-1][2] == c.offset and runs[-1][1] == c.start:
            runs[-1] = (runs[-1][0], c.end, c.offset)
        else:
            runs.append((c.start, c.end, c.offset))
    return runs


# ---- parsing of user-supplied times ---------------------------------------------------------

_DATE_ONLY = re.compile(r"^\d{4}-\d{2}-\d{2}$")

# The instants a user may name (API parameters, CLI options). Python's datetime stops at years 1
# and 9999, and a window, margin or offset added to an instant near either end overflows
# (0001-01-01 minus the default window; 9999-12-31T23:55-01:00 in UTC): a 500 before this bound.
# Sensor data lies well inside it.
INSTANT_MIN = datetime(1900, 1, 1, tzinfo=UTC)
INSTANT_MAX = datetime(2999, 12, 31, 23, 59, 59, tzinfo=UTC)
INSTANT_RANGE = "1900-01-01T00:00:00Z to 2999-12-31T23:59:59Z"


def parse_instant(raw: str, *, name: str = "time") -> datetime:
    """Parse an ISO 8601 date or datetime into an aware UTC datetime.

    A date alone means 00:00 UTC that day; a datetime without an offset is taken as UTC;
    `Z`, `+00:00`, `+0000` and fractional seconds are accepted. Instants outside
    [INSTANT_MIN, INSTANT_MAX] are a BadParameter that states the accepted range.
    """
    text = raw.strip()
    if not text:
        raise BadParameter(f"{name}: empty value", errors={name: ["must be an ISO 8601 time"]})
    try:
        if _DATE_ONLY.match(text):
            value = datetime.combine(date.fromisoformat(text), time(0), tzinfo=UTC)
        else:
            if text.endswith(("z", "Z")):
                text = text[:-1] + "+00:00"
            value = datetime.fromisoformat(
                text.replace(" ", "T", 1) if "T" not in text else text)
    except ValueError:
        raise BadParameter(
            f"{name}: {raw!r} is not an ISO 8601 date or datetime (e.g. 2019-07-01 or "
            "2019-07-01T12:00:00Z)",
            errors={name: ["must be an ISO 8601 date or datetime"]},
        ) from None
    if value.tzinfo is None:
        value = value.replace(tzinfo=UTC)
    utc: datetime | None
    try:
        utc = value.astimezone(UTC)
    except OverflowError:  # e.g. 9999-12-31T23:55:00-01:00 is in year 10000 in UTC
        utc = None
    if utc is None or not INSTANT_MIN <= utc <= INSTANT_MAX:
        raise BadParameter(
            f"{name}: {raw!r} is outside the accepted range {INSTANT_RANGE}",
            errors={name: [f"must lie from {INSTANT_RANGE}"]},
        )
    return utc


# ASCII digits only (serve/counts.py): `\d` alone also matches other scripts' digits.
_OFFSET = re.compile(r"^([+-])(\d{1,2}):?(\d{2})$", re.ASCII)
_SECONDS = re.compile(r"^[+-]?\d{1,6}$", re.ASCII)
# `+0545`, `-0300`: the colon-less offset the API itself writes (format_local). Signed, four
# digits, HH <= 14 (the widest real offset, Kiribati's +14:00) and MM < 60; any other digit
# string (`-3600`, `+1575`, `1030`) is seconds.
_HHMM = re.compile(r"^([+-])(\d{2})(\d{2})$", re.ASCII)
MAX_HHMM_HOURS = 14


def parse_local_time(raw: str) -> tzinfo:
    """Parse a `local_time` value: an IANA zone (DST-aware), or a flat offset: `±HH:MM`,
    `±HHMM` (HH <= 14, MM < 60), or any other digits as seconds (`-3600` is an hour)."""
    text = raw.strip()
    hhmm = _HHMM.match(text)
    if hhmm and int(hhmm.group(2)) <= MAX_HHMM_HOURS and int(hhmm.group(3)) < 60:
        delta = timedelta(hours=int(hhmm.group(2)), minutes=int(hhmm.group(3)))
        return timezone(-delta if hhmm.group(1) == "-" else delta)
    if _SECONDS.match(text):
        seconds = int(text)
        if abs(seconds) >= 86400:
            raise BadParameter(f"local_time: offset {raw!r} is out of range (|offset| < 86400 s)")
        return timezone(timedelta(seconds=seconds))
    m = _OFFSET.match(text)
    if m:
        sign, hours, minutes = m.group(1), int(m.group(2)), int(m.group(3))
        if hours > 23 or minutes > 59:
            raise BadParameter(f"local_time: offset {raw!r} is out of range")
        delta = timedelta(hours=hours, minutes=minutes)
        return timezone(-delta if sign == "-" else delta)
    try:
        return zone(text)
    except BadParameter:
        raise BadParameter(
            f"local_time: {raw!r} is not a time zone name (e.g. America/New_York), an offset "
            "like -04:00, or an offset in seconds like -25200",
            errors={"local_time": ["unknown time zone or offset"]},
        ) from None


def format_local(t: datetime, tz: tzinfo) -> str:
    """Instant `t` in `tz` (a zone, DST-aware, or a flat offset) as ISO 8601 with a colon-less
    offset: `2019-06-30T20:00:00-0400`, `.ffffff` only when present, seconds in the offset only
    when present. The one Python rendering of local time (the API's `local_time`); its SQL twin
    for CSV bodies, `sds_iso_time` (migration 0031), is held equal to it by
    tests/shared/test_timeutil.py."""
    iso = t.astimezone(tz).isoformat()
    i = 26 if len(iso) > 19 and iso[19] == "." else 19
    return iso[:i] + iso[i:].replace(":", "")


# UTC instants as text: every form the service writes, each for its own contract, all here.

def format_utc_z(t: datetime) -> str:
    """`2019-07-01T00:00:00Z`: the JSON form of `time` (whole seconds)."""
    return t.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def format_utc_z_exact(t: datetime) -> str:
    """`2030-01-01T00:00:00Z`, or `...00.250000Z` when there are microseconds: an instant a
    client set (an API key's expiry), written back without losing or inventing precision."""
    t = t.astimezone(UTC)
    return t.strftime("%Y-%m-%dT%H:%M:%S.%fZ" if t.microsecond else "%Y-%m-%dT%H:%M:%SZ")


def format_utc_micros_z(t: datetime) -> str:
    """`2026-11-24T05:04:52.123456Z`: a watermark, to the microsecond (update_time)."""
    return t.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def format_utc_record(t: datetime) -> str:
    """`2021-03-04T12:34:56.123456+00:00`: times in model records (devices, keys)."""
    return t.astimezone(UTC).isoformat(timespec="microseconds")


def format_lag(delta: timedelta) -> str:
    """A lag for people, to the second and in the two largest units: '26 s', '3 min 4 s',
    '2 h 5 min', '3 d 4 h' (`sds aggregate status` printed `0:00:26.138358`)."""
    seconds = max(int(delta.total_seconds()), 0)
    parts = [(seconds // 86400, "d"), (seconds % 86400 // 3600, "h"),
             (seconds % 3600 // 60, "min"), (seconds % 60, "s")]
    while len(parts) > 1 and parts[0][0] == 0:
        parts.pop(0)
    shown = [f"{n} {unit}" for n, unit in parts[:2] if n or unit == parts[0][1]]
    return " ".join(shown)


def stamp(t: datetime | None) -> str | None:
    """Record times: UTC, microseconds and offset (`2021-03-04T12:34:56.123456+00:00`), None
    for None (serve/records.py and people/ write record times with it)."""
    return None if t is None else format_utc_record(t)
