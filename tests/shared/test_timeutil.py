"""Time windows across DST and odd offsets, and parsing of user-supplied times."""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta, timezone
from zoneinfo import ZoneInfo

import pytest

from shared.errors import BadParameter
from shared.timeutil import (
    floor_5min,
    format_local,
    format_utc_z,
    local_day_bounds,
    local_hour_bounds,
    on_5min_grid,
    parse_instant,
    parse_local_time,
    slots,
    zone,
)

H = timedelta(hours=1)

DAYS = [
    pytest.param("America/New_York", date(2024, 3, 10), 23 * H, 276, id="spring_forward_23h"),
    pytest.param("America/New_York", date(2024, 11, 3), 25 * H, 300, id="fall_back_25h"),
    pytest.param("Australia/Lord_Howe", date(2024, 4, 7), 24.5 * H, 294, id="lord_howe_24_5h"),
    pytest.param("Australia/Lord_Howe", date(2024, 10, 6), 23.5 * H, 282, id="lord_howe_23_5h"),
    pytest.param("America/Santiago", date(2024, 9, 8), 23 * H, 276, id="santiago_midnight_gap"),
    pytest.param("Asia/Kolkata", date(2024, 6, 1), 24 * H, 288, id="kolkata_half_hour"),
    pytest.param("Pacific/Chatham", date(2024, 4, 7), 25 * H, 300, id="chatham_fall_back"),
    pytest.param("UTC", date(2024, 6, 1), 24 * H, 288, id="utc"),
]


@pytest.mark.parametrize(("tz", "day", "length", "n_slots"), DAYS)
def test_local_day_length_and_hours_tile_it(tz: str, day: date, length: timedelta,
                                            n_slots: int) -> None:
    z = ZoneInfo(tz)
    start, end = local_day_bounds(day, z)
    assert end - start == length
    assert slots(start, end) == n_slots
    # Local hours tile the day exactly: no overlaps, no gaps; each starts at hh:00 local or at
    # an offset change.
    t, hours = start, []
    while t < end:
        a, b = local_hour_bounds(t, z)
        assert a == t and b > a
        hours.append(b - a)
        t = b
    assert t == end
    assert sum(hours, timedelta()) == length


def test_santiago_day_starts_at_first_valid_instant() -> None:
    start, _ = local_day_bounds(date(2024, 9, 8), ZoneInfo("America/Santiago"))
    assert start == datetime(2024, 9, 8, 4, tzinfo=UTC)


def test_lord_howe_fall_back_readings_land_in_distinct_buckets() -> None:
    # Regression from the plan: date_trunc gives 14:00Z and 14:30Z, which overlap.
    z = ZoneInfo("Australia/Lord_Howe")
    a = local_hour_bounds(datetime(2024, 4, 6, 14, 50, tzinfo=UTC), z)
    b = local_hour_bounds(datetime(2024, 4, 6, 15, 10, tzinfo=UTC), z)
    assert a == (datetime(2024, 4, 6, 14, tzinfo=UTC), datetime(2024, 4, 6, 15, tzinfo=UTC))
    assert b == (datetime(2024, 4, 6, 15, tzinfo=UTC), datetime(2024, 4, 6, 15, 30, tzinfo=UTC))


def test_kathmandu_hours_start_at_quarter_past() -> None:
    start, end = local_hour_bounds(datetime(2024, 6, 1, 12, 0, tzinfo=UTC),
                                   ZoneInfo("Asia/Kathmandu"))
    assert (start.minute, end - start) == (15, H)


def test_grid() -> None:
    t = datetime(2024, 1, 1, 10, 7, 3, tzinfo=UTC)
    assert floor_5min(t) == datetime(2024, 1, 1, 10, 5, tzinfo=UTC)
    assert on_5min_grid(datetime(2024, 1, 1, 10, 5, tzinfo=UTC))
    assert not on_5min_grid(t)
    # A :30 offset does not move the UTC grid.
    assert on_5min_grid(datetime(2024, 1, 1, 15, 35, tzinfo=timezone(timedelta(hours=5.5))))


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("2019-07-01", datetime(2019, 7, 1, tzinfo=UTC)),
        ("2019-07-01T12:00:00Z", datetime(2019, 7, 1, 12, tzinfo=UTC)),
        ("2019-07-01T12:00:00+00:00", datetime(2019, 7, 1, 12, tzinfo=UTC)),
        ("2019-07-01T12:00:00.250000Z", datetime(2019, 7, 1, 12, 0, 0, 250000, tzinfo=UTC)),
        ("2019-07-01T14:00:00+02:00", datetime(2019, 7, 1, 12, tzinfo=UTC)),
        ("2019-07-01T12:00:00+0000", datetime(2019, 7, 1, 12, tzinfo=UTC)),
        ("2019-07-01T12:00:00", datetime(2019, 7, 1, 12, tzinfo=UTC)),
    ],
)
def test_parse_instant_forms(raw: str, expected: datetime) -> None:
    assert parse_instant(raw) == expected


@pytest.mark.parametrize("raw", ["", "yesterday", "2019-13-01", "2019-07-01T25:00:00Z", "1e9"])
def test_parse_instant_rejects(raw: str) -> None:
    with pytest.raises(BadParameter, match="start_time"):
        parse_instant(raw, name="start_time")


@pytest.mark.parametrize("raw", [
    "0001-01-01", "0001-01-01T00:00:00+01:00", "9999-12-31T23:55:00-01:00", "9999-12-31",
    "1899-12-31T23:59:59Z", "3000-01-01", "2999-12-31T23:59:59-00:01", "0001-01-01T00:00:00Z",
])
def test_parse_instant_outside_the_range_names_the_range(raw: str) -> None:
    """Well-formed but extreme instants (issue 11, finding 5): a BadParameter stating the
    accepted range, never an OverflowError (a 500 in the API)."""
    with pytest.raises(BadParameter, match="start_time: .* outside the accepted range "
                       "1900-01-01T00:00:00Z to 2999-12-31T23:59:59Z"):
        parse_instant(raw, name="start_time")


@pytest.mark.parametrize(("raw", "expected"), [
    ("1900-01-01", datetime(1900, 1, 1, tzinfo=UTC)),
    ("1900-01-01T01:00:00+01:00", datetime(1900, 1, 1, tzinfo=UTC)),
    ("2999-12-31T23:59:59Z", datetime(2999, 12, 31, 23, 59, 59, tzinfo=UTC)),
    ("3000-01-01T00:59:59+01:00", datetime(2999, 12, 31, 23, 59, 59, tzinfo=UTC)),
])
def test_parse_instant_range_ends_are_accepted(raw: str, expected: datetime) -> None:
    assert parse_instant(raw) == expected


def test_local_time_forms() -> None:
    t = datetime(2019, 7, 1, 0, 0, tzinfo=UTC)
    assert format_local(t, parse_local_time("America/New_York")) == "2019-06-30T20:00:00-0400"
    assert format_local(t, parse_local_time("-04:00")) == "2019-06-30T20:00:00-0400"
    assert format_local(t, parse_local_time("-25200")) == "2019-06-30T17:00:00-0700"
    # Flat offsets ignore DST; names follow it.
    winter = datetime(2019, 1, 1, tzinfo=UTC)
    assert winter.astimezone(parse_local_time("America/New_York")).utcoffset() == -5 * H
    assert winter.astimezone(parse_local_time("-04:00")).utcoffset() == -4 * H
    assert format_utc_z(t) == "2019-07-01T00:00:00Z"


@pytest.mark.parametrize(("raw", "expected"), [
    # The API's own colon-less form (issue 22: these were read as seconds, +1030 as 17:10).
    ("+0545", "2026-04-04T15:45:00+0545"),
    ("+1030", "2026-04-04T20:30:00+1030"),
    ("-0300", "2026-04-04T07:00:00-0300"),
    ("+1400", "2026-04-05T00:00:00+1400"),
    ("-0000", "2026-04-04T10:00:00+0000"),
    # Other digit strings stay seconds: HH > 14, MM >= 60, unsigned, or not four digits.
    ("-3600", "2026-04-04T09:00:00-0100"),
    ("+1500", "2026-04-04T10:25:00+0025"),
    ("+0160", "2026-04-04T10:02:40+000240"),
    ("1030", "2026-04-04T10:17:10+001710"),
    ("-25200", "2026-04-04T03:00:00-0700"),
])
def test_hhmm_is_an_offset_other_digits_are_seconds(raw: str, expected: str) -> None:
    t = datetime(2026, 4, 4, 10, 0, tzinfo=UTC)
    assert format_local(t, parse_local_time(raw)) == expected


@pytest.mark.parametrize("raw", ["Mars/Olympus", "UTC+5", "+25:00", "99999999", "../etc/passwd"])
def test_bad_zones_rejected(raw: str) -> None:
    with pytest.raises(BadParameter):
        parse_local_time(raw)


def test_zone_rejects_non_iana_names() -> None:
    with pytest.raises(BadParameter, match="Mars/Olympus"):
        zone("Mars/Olympus")
    assert zone("Asia/Kolkata").key == "Asia/Kolkata"


LOCAL_CASES = [
    (datetime(2019, 7, 1, tzinfo=UTC), "America/New_York"),
    (datetime(2024, 11, 3, 5, 30, tzinfo=UTC), "America/New_York"),  # repeated hour, EDT
    (datetime(2024, 11, 3, 6, 30, tzinfo=UTC), "America/New_York"),  # repeated hour, EST
    (datetime(2024, 4, 6, 15, 10, tzinfo=UTC), "Australia/Lord_Howe"),  # +10:30
    (datetime(2024, 6, 1, 0, 5, 0, 250000, tzinfo=UTC), "Asia/Kathmandu"),  # +05:45, .25 s
    (datetime(1900, 1, 1, tzinfo=UTC), "Europe/Amsterdam"),  # LMT +00:19:32
    (datetime(2024, 6, 1, tzinfo=UTC), "UTC"),
]


@pytest.mark.parametrize(("t", "zone_name"), LOCAL_CASES)
def test_sql_local_time_equals_the_python_rendering(conn, t: datetime, zone_name: str) -> None:
    """The CSV body's `sds_iso_time` (migration 0031) and the JSON body's format_local are
    one rule in two languages: same text for zones (DST, repeated hours, :30/:45 offsets,
    fractional seconds, a local-mean-time offset with seconds) and flat offsets."""
    assert conn.execute("SELECT sds_iso_time(%s, %s::text)", (t, zone_name)).fetchone()[0] \
        == format_local(t, parse_local_time(zone_name))
    for raw, seconds in (("-04:00", -14400), ("+05:45", 20700)):
        assert conn.execute("SELECT sds_iso_time(%s, make_interval(secs => %s))",
                            (t, seconds)).fetchone()[0] == format_local(t, parse_local_time(raw))


def test_lags_are_shown_for_people() -> None:
    from shared.timeutil import format_lag
    assert format_lag(timedelta(seconds=26.138358)) == "26 s"
    assert format_lag(timedelta(minutes=3, seconds=4)) == "3 min 4 s"
    assert format_lag(timedelta(hours=2, seconds=5)) == "2 h"
    assert format_lag(timedelta(hours=2, minutes=5, seconds=9)) == "2 h 5 min"
    assert format_lag(timedelta(days=3, hours=4, minutes=1)) == "3 d 4 h"
    assert format_lag(timedelta(0)) == "0 s"
    assert format_lag(timedelta(seconds=-1)) == "0 s"  # a clock a little behind the database
