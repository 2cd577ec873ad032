"""GET /api/v2/data/{table}: filters, windows, select, units, local time, formats, errors."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import orjson
import pytest
from flask import Flask
from flask.testing import FlaskClient

from serve.pool import pool as pool_of
from shared.columns import TABLES
from tests.support.data_world import (
    D4_ROWS,
    DAILY_DAYS,
    DAILY_FIRST,
    FALL_BACK,
    STEPS,
    T0,
    URL,
    World,
    csv_rows,
    error,
    get,
    rows,
)
from tests.support.readings import stepped_tair

# ---- filters ---------------------------------------------------------------------------------

def test_device_rows_in_time_order_with_all_columns(client: FlaskClient, world: World) -> None:
    got = rows(get(client, world, "calibrated", device="D1", start_time="2024-07-01", limit=5))
    assert [r["time"] for r in got] == [
        "2024-07-01T00:00:00Z", "2024-07-01T00:05:00Z", "2024-07-01T00:10:00Z",
        "2024-07-01T00:15:00Z", "2024-07-01T00:20:00Z"]
    assert list(got[0]) == list(TABLES["calibrated"].column_names)
    assert {r["device"] for r in got} == {"D1"}
    assert got[0]["location"] == str(world.ny)
    assert got[0]["swdw"] is None


def test_location_joins_every_device_ordered_by_time_then_device(
        client: FlaskClient, world: World) -> None:
    got = rows(get(client, world, "calibrated", location=str(world.ny), select="time,device",
                   start_time="2024-07-01", limit=6))
    assert [(r["time"][11:16], r["device"]) for r in got] == [
        ("00:00", "D1"), ("00:00", "D2"), ("00:05", "D1"), ("00:05", "D2"),
        ("00:10", "D1"), ("00:10", "D2")]


def test_location_by_name_is_accepted(client: FlaskClient, world: World) -> None:
    by_name = rows(get(client, world, "calibrated", location="NY field", select="time,device",
                       start_time="2024-07-01", limit=4))
    by_id = rows(get(client, world, "calibrated", location=str(world.ny), select="time,device",
                     start_time="2024-07-01", limit=4))
    assert by_name == by_id


def test_device_and_location_gives_rows_while_it_stood_there(
        client: FlaskClient, world: World) -> None:
    at_la = rows(get(client, world, "calibrated", device="D1", location=str(world.la),
                     select="time,location", start_time="2024-07-01",
                     end_time="2024-07-03", limit=10000))
    assert len(at_la) == STEPS // 2
    assert at_la[0]["time"] == "2024-07-02T00:00:00Z"
    assert {r["location"] for r in at_la} == {str(world.la)}
    none = rows(get(client, world, "calibrated", device="D2", location=str(world.la),
                    start_time="2024-07-01"))
    assert none == []


def test_device_or_location_required(client: FlaskClient, world: World) -> None:
    body = error(get(client, world, "calibrated"), 400)
    assert "device or location is required" in body["message"]


@pytest.mark.parametrize("params", [
    {"device": "NOPE"},
    {"device": "B1"},  # another organisation's device answers like a missing one
    {"location": "00000000-0000-0000-0000-000000000000"},
    {"location": "not-a-location"},
])
def test_unknown_or_foreign_device_or_location_is_404(
        client: FlaskClient, world: World, params: dict[str, str]) -> None:
    body = error(get(client, world, "calibrated", **params), 404)
    assert "unknown" in body["message"]


def test_foreign_location_is_exactly_like_a_missing_one(client: FlaskClient, world: World) -> None:
    foreign = get(client, world, "calibrated", location=str(world.bl))
    missing = get(client, world, "calibrated", location="11111111-1111-1111-1111-111111111111")
    assert foreign.status_code == missing.status_code == 404
    assert foreign.get_json()["message"].replace(str(world.bl), "X") == \
        missing.get_json()["message"].replace("11111111-1111-1111-1111-111111111111", "X")


def test_other_organisation_sees_its_own_data(client: FlaskClient, world: World) -> None:
    got = rows(get(client, world, "calibrated", who="b", device="B1", select="device",
                   start_time="2024-07-01", limit=3))
    assert got == [{"device": "B1"}] * 3
    error(get(client, world, "calibrated", who="b", device="D1"), 404)


def test_unknown_table_is_404_naming_the_tables(client: FlaskClient, world: World) -> None:
    body = error(get(client, world, "nope", device="D1"), 404)
    assert "nope" in body["message"] and "calibrated" in body["message"]


def test_credentials_and_scope_are_required(client: FlaskClient, world: World) -> None:
    error(client.get(f"{URL}/calibrated?device=D1"), 401)
    error(get(client, world, "calibrated", who="a_devices", device="D1"), 403)


# ---- select ------------------------------------------------------------------------------------

def test_select_keeps_request_order_and_local_time_is_last(
        client: FlaskClient, world: World) -> None:
    got = rows(get(client, world, "calibrated", device="D1", start_time="2024-07-01", limit=1,
                   select="rh,local_time,time,tair", local_time="America/New_York"))
    assert list(got[0]) == ["rh", "time", "tair", "local_time"]
    text = get(client, world, "calibrated", accept="text/csv", device="D1", limit=1,
               start_time="2024-07-01", select="rh,time,tair", local_time="UTC")
    assert csv_rows(text)[0] == ["rh", "time", "tair", "local_time"]


def test_select_tolerates_spaces_case_and_duplicates(client: FlaskClient, world: World) -> None:
    got = rows(get(client, world, "calibrated", device="D1", start_time="2024-07-01", limit=1,
                   select=" TAIR, time ,tair,"))
    assert list(got[0]) == ["tair", "time"]


def test_unknown_column_is_400_naming_it_and_listing_valid_ones(
        client: FlaskClient, world: World) -> None:
    body = error(get(client, world, "hourly", device="D1", select="time,bogus,tair"), 400)
    assert "bogus" in body["message"]
    for name in TABLES["hourly"].column_names:
        assert name in body["message"]
    assert body["errors"] == {"select": ["unknown column: bogus"]}


def test_local_time_in_select_needs_the_parameter(client: FlaskClient, world: World) -> None:
    body = error(get(client, world, "hourly", device="D1", select="time,local_time"), 400)
    assert "local_time" in body["message"]


# ---- time window -------------------------------------------------------------------------------

def test_end_time_is_inclusive_and_cursor_continues(client: FlaskClient, world: World) -> None:
    # docs/spec/reference-facts.md (cursor): start 2019-07-01, end 08:00, limit 5 -> 00..04
    # and a cursor for 05:00.
    first = get(client, world, "hourly", device="D1", start_time="2024-07-01",
                end_time="2024-07-01T08:00:00Z", limit=5, select="time")
    assert [r["time"][11:13] for r in rows(first)] == ["00", "01", "02", "03", "04"]
    nxt = first.headers["X-Cursor-Next"]
    second = get(client, world, "hourly", device="D1", start_time="2024-07-01",
                 end_time="2024-07-01T08:00:00Z", limit=5, select="time", cursor=nxt)
    assert [r["time"][11:13] for r in rows(second)] == ["05", "06", "07", "08"]
    assert "X-Cursor-Next" not in second.headers


@pytest.mark.parametrize("start,end,expected", [
    ("2024-07-01T01:00:00Z", "2024-07-01T03:00:00Z", ["01", "02", "03"]),
    ("2024-07-01T01:00:00+00:00", "2024-07-01T03:00:00.000000Z", ["01", "02", "03"]),
    ("2024-06-30T22:00:00-03:00", "2024-07-01T05:00:00+02:00", ["01", "02", "03"]),
    ("2024-07-01T00:30:00.5Z", "2024-07-01T02:59:59.999999Z", ["01", "02"]),
    ("2024-07-01T01:00:00", "2024-07-01T01:00:00Z", ["01"]),  # no offset: UTC
], ids=["z", "offset_and_micro", "other_offsets", "fractions", "equal_bounds"])
def test_time_forms(client: FlaskClient, world: World, start: str, end: str,
                    expected: list[str]) -> None:
    got = rows(get(client, world, "hourly", device="D1", start_time=start, end_time=end,
                   select="time"))
    assert [r["time"][11:13] for r in got] == expected


def test_time_echoed_from_a_response_is_accepted(client: FlaskClient, world: World) -> None:
    first = rows(get(client, world, "hourly", device="D1", start_time="2024-07-01", limit=3,
                     select="time"))
    again = rows(get(client, world, "hourly", device="D1", start_time=first[2]["time"], limit=1,
                     select="time"))
    assert again == [first[2]]


def test_default_window_is_the_tables_window_before_end_time(
        client: FlaskClient, world: World) -> None:
    end = T0 + timedelta(days=8)  # calibrated: 7 days back reaches T0 + 1 day
    got = rows(get(client, world, "calibrated", device="D2", select="time",
                   end_time=end.isoformat(), limit=10000))
    assert got[0]["time"] == "2024-07-02T00:00:00Z"
    assert len(got) == STEPS // 2


def test_default_end_is_now(client: FlaskClient, world: World) -> None:
    # The seeded rows are in 2024: more than 7 days before now, so outside the default window.
    assert rows(get(client, world, "calibrated", device="D1")) == []
    got = rows(get(client, world, "calibrated", device="D1", start_time="2024-07-01",
                   select="time", limit=10000))
    assert len(got) == STEPS


def test_default_page_is_the_tables_row_cap(client: FlaskClient, world: World) -> None:
    response = get(client, world, "calibrated", device="D4", select="time",
                   start_time="2024-07-01")
    got = rows(response)
    assert len(got) == TABLES["calibrated"].row_cap == 2050
    assert "X-Cursor-Next" in response.headers
    rest = rows(get(client, world, "calibrated", device="D4", select="time",
                    start_time="2024-07-01", cursor=response.headers["X-Cursor-Next"]))
    assert len(rest) == D4_ROWS - 2050


def test_start_after_end_is_400(client: FlaskClient, world: World) -> None:
    body = error(get(client, world, "hourly", device="D1", start_time="2024-07-02",
                     end_time="2024-07-01"), 400)
    assert "start_time" in body["message"] and "end_time" in body["message"]


@pytest.mark.parametrize("param,value", [
    ("start_time", "yesterday"), ("end_time", "2024-13-01"), ("start_time", "2024-07-01T25:00Z"),
    ("end_time", "07/01/2024"),
])
def test_bad_time_is_400_naming_the_parameter(client: FlaskClient, world: World, param: str,
                                              value: str) -> None:
    body = error(get(client, world, "hourly", device="D1", **{param: value}), 400)
    assert body["message"].startswith(f"{param}:")
    assert param in body["errors"]


def test_daily_dates_name_local_days(client: FlaskClient, world: World) -> None:
    got = rows(get(client, world, "daily", device="D1", start_time="2024-06-22",
                   end_time="2024-06-24", select="time", local_time="America/New_York"))
    # New York days start at 04:00Z in summer; the three local days are all there.
    assert [r["time"] for r in got] == [
        "2024-06-22T04:00:00Z", "2024-06-23T04:00:00Z", "2024-06-24T04:00:00Z"]
    assert [r["local_time"] for r in got] == [
        "2024-06-22T00:00:00-0400", "2024-06-23T00:00:00-0400", "2024-06-24T00:00:00-0400"]
    # A datetime bound stays an instant: midnight UTC excludes the 24th's 04:00Z row.
    got = rows(get(client, world, "daily", device="D1", start_time="2024-06-22",
                   end_time="2024-06-24T00:00:00Z", select="time"))
    assert len(got) == 2
    everything = rows(get(client, world, "daily", device="D1", start_time="2024-01-01",
                          end_time="2024-12-31", select="time"))
    assert len(everything) == DAILY_DAYS
    assert everything[0]["time"].startswith(DAILY_FIRST.isoformat())


# ---- limit and order ---------------------------------------------------------------------------

@pytest.mark.parametrize("value", ["0", "-1", "10001", "abc", "1.5", " ", "1e3", "99999999999999"])
def test_bad_limit_is_400(client: FlaskClient, world: World, value: str) -> None:
    body = error(get(client, world, "hourly", device="D1", limit=value), 400)
    assert body["message"].startswith("limit:")
    assert "limit" in body["errors"]


def test_empty_parameters_count_as_absent(client: FlaskClient, world: World) -> None:
    got = rows(get(client, world, "calibrated", device="D4", start_time="2024-07-01", limit="",
                   end_time="", order="", select="", local_time="", temp=""))
    assert len(got) == 2050 and list(got[0]) == list(TABLES["calibrated"].column_names)


@pytest.mark.parametrize("value,count", [("1", 1), ("10000", STEPS), ("48", 48)])
def test_limit_bounds(client: FlaskClient, world: World, value: str, count: int) -> None:
    table = "calibrated" if value == "10000" else "hourly"
    got = rows(get(client, world, table, device="D1", start_time="2024-07-01", limit=value,
                   select="time"))
    assert len(got) == count


def test_order_desc_returns_newest_first(client: FlaskClient, world: World) -> None:
    got = rows(get(client, world, "hourly", device="D1", start_time="2024-07-01",
                   end_time="2024-07-01T05:00:00Z", order="DESC", select="time"))
    assert [r["time"][11:13] for r in got] == ["05", "04", "03", "02", "01", "00"]


def test_bad_order_is_400(client: FlaskClient, world: World) -> None:
    assert error(get(client, world, "hourly", device="D1", order="up"), 400)["message"] \
        .startswith("order:")


# ---- values and units --------------------------------------------------------------------------

def test_values_have_no_float_noise(client: FlaskClient, world: World) -> None:
    got = rows(get(client, world, "calibrated", device="D1", start_time="2024-07-01", limit=40,
                   select="tair,rh,p,wind_speed,tdew"))
    assert [r["tair"] for r in got] == [stepped_tair(i) for i in range(40)]
    assert got[13] == {"tair": 21.3, "rh": 65.3, "p": 1013.25, "wind_speed": 3.2, "tdew": 15.1}
    raw = get(client, world, "calibrated", device="D1", start_time="2024-07-01", limit=1,
              select="tair,precip").get_data(as_text=True)
    assert raw == '[{"tair":20.0,"precip":0.2}]'  # floats print as floats, 0.2 not 0.200000003


def test_units_convert_every_column_of_a_class(client: FlaskClient, world: World) -> None:
    response = get(client, world, "hourly", device="D1", start_time="2024-07-01", limit=1,
                   select="tair,maxt,mint,rh,p,precip,wind_speed",
                   temp="F", pres="KP", size="in", ratio="Dec", speed="kph")
    got = rows(response)[0]
    assert got == {"tair": 70.34, "maxt": 77.0, "mint": 64.4, "rh": 0.5, "p": 101.3,
                   "precip": 0.039, "wind_speed": 12.96}
    assert response.headers["X-Units"] == "F,kp,dec,in,kph"


def test_default_units_and_x_units_lists_present_classes(client: FlaskClient,
                                                         world: World) -> None:
    response = get(client, world, "hourly", device="D1", start_time="2024-07-01", limit=1,
                   select="tair,rh,p,precip,wind_speed")
    assert rows(response)[0] == {"tair": 21.3, "rh": 50.0, "p": 1013.0, "precip": 1.0,
                                 "wind_speed": 3.6}
    assert response.headers["X-Units"] == "C,mb,pct,mm,mps"
    only_temp = get(client, world, "hourly", device="D1", start_time="2024-07-01", limit=1,
                    select="time,tair", temp="c")
    assert only_temp.headers["X-Units"] == "C"
    none = get(client, world, "hourly", device="D1", start_time="2024-07-01", limit=1,
               select="time,device")
    assert none.headers["X-Units"] == ""


def test_temperature_difference_converts_by_scale_only(client: FlaskClient,
                                                       world: World) -> None:
    got = rows(get(client, world, "daily", device="D1", start_time="2024-06-20", limit=1,
                   select="meant,gdd", temp="f"))
    assert got == [{"meant": 68.0, "gdd": 18.0}]  # 10 C day -> 18 F day, not 50


@pytest.mark.parametrize("param,value", [
    ("temp", "k"), ("pres", "psi"), ("size", "cm"), ("ratio", "percent"), ("speed", "knots")])
def test_bad_unit_is_400(client: FlaskClient, world: World, param: str, value: str) -> None:
    body = error(get(client, world, "hourly", device="D1", **{param: value}), 400)
    assert body["message"].startswith(f"{param}:") and value in body["message"]


def test_unknown_parameters_are_ignored(client: FlaskClient, world: World) -> None:
    plain = rows(get(client, world, "hourly", device="D1", start_time="2024-07-01", limit=2))
    extra = rows(get(client, world, "hourly", device="D1", start_time="2024-07-01", limit=2,
                     vol="l", volumetric_soil_moisture_unit="pct", foo="bar"))
    assert plain == extra


# ---- local time --------------------------------------------------------------------------------

def test_local_time_zone_is_dst_aware_offsets_are_flat(client: FlaskClient,
                                                      world: World) -> None:
    common = dict(device="D3", start_time=FALL_BACK.isoformat(), select="time")
    zone = rows(get(client, world, "hourly", local_time="America/New_York", **common))
    assert [r["local_time"] for r in zone] == [
        "2024-11-03T00:00:00-0400", "2024-11-03T01:00:00-0400",
        "2024-11-03T01:00:00-0500", "2024-11-03T02:00:00-0500"]
    flat = rows(get(client, world, "hourly", local_time="-04:00", **common))
    assert [r["local_time"] for r in flat] == [
        "2024-11-03T00:00:00-0400", "2024-11-03T01:00:00-0400",
        "2024-11-03T02:00:00-0400", "2024-11-03T03:00:00-0400"]
    seconds = rows(get(client, world, "hourly", local_time="-25200", **common))
    assert seconds[0]["local_time"] == "2024-11-02T21:00:00-0700"
    half = rows(get(client, world, "hourly", local_time="Asia/Kolkata", **common))
    assert half[0]["local_time"] == "2024-11-03T09:30:00+0530"


@pytest.mark.parametrize(("value", "first"), [
    ("+0545", "2024-11-03T09:45:00+0545"),
    ("+1030", "2024-11-03T14:30:00+1030"),
    ("-0300", "2024-11-03T01:00:00-0300"),
    ("-3600", "2024-11-03T03:00:00-0100"),  # digits that are no HHMM stay seconds
])
def test_local_time_hhmm_is_a_flat_offset(client: FlaskClient, world: World, value: str,
                                          first: str) -> None:
    """The colon-less offset the API writes is read back as that offset, in JSON and CSV
    (issue 22: `+1030` was 1030 seconds)."""
    common = dict(device="D3", start_time=FALL_BACK.isoformat(), select="time",
                  local_time=value)
    assert rows(get(client, world, "hourly", **common))[0]["local_time"] == first
    assert csv_rows(get(client, world, "hourly", accept="text/csv", **common))[1][1] == first


def test_local_time_without_time_selected(client: FlaskClient, world: World) -> None:
    got = rows(get(client, world, "hourly", device="D1", start_time="2024-07-01", limit=1,
                   select="tair", local_time="+02:00"))
    assert got == [{"tair": 21.3, "local_time": "2024-07-01T02:00:00+0200"}]


@pytest.mark.parametrize("value", ["Mars/Olympus", "UTC+5", "+25:00", "99999", "-04:61"])
def test_bad_local_time_is_400(client: FlaskClient, world: World, value: str) -> None:
    body = error(get(client, world, "hourly", device="D1", local_time=value), 400)
    assert body["message"].startswith("local_time:")


# ---- formats -----------------------------------------------------------------------------------

def test_csv_with_accept_header(client: FlaskClient, world: World) -> None:
    response = get(client, world, "hourly", accept="text/csv", device="D1",
                   start_time="2024-07-01", limit=2,
                   select="time,tair,low_quality,et,location", local_time="America/New_York")
    assert response.headers["Content-Type"] == "text/csv; charset=utf-8"
    assert response.get_data(as_text=True) == (
        "time,tair,low_quality,et,location,local_time\n"
        f"2024-07-01T00:00:00+0000,21.3,true,,{world.ny},2024-06-30T20:00:00-0400\n"
        f"2024-07-01T01:00:00+0000,21.3,false,,{world.ny},2024-06-30T21:00:00-0400\n")


def test_json_booleans_nulls_and_uuid(client: FlaskClient, world: World) -> None:
    got = rows(get(client, world, "hourly", device="D1", start_time="2024-07-01", limit=1,
                   select="low_quality,et,location,time"))
    assert got == [{"low_quality": True, "et": None, "location": str(world.ny),
                    "time": "2024-07-01T00:00:00Z"}]


@pytest.mark.parametrize("accept,csv_expected", [
    (None, False), ("*/*", False), ("application/json", False), ("text/csv", True),
    ("text/csv, application/json;q=0.5", True), ("application/json, text/csv;q=0.5", False),
    ("application/xml", False), ("text/*", False), ("TEXT/CSV", True),
])
def test_content_negotiation(client: FlaskClient, world: World, accept: str | None,
                             csv_expected: bool) -> None:
    response = get(client, world, "hourly", accept=accept, device="D1",
                   start_time="2024-07-01", limit=1)
    assert response.status_code == 200
    assert response.mimetype == ("text/csv" if csv_expected else "application/json")
    assert "Accept" in response.headers.get("Vary", "")


def test_errors_are_json_even_when_csv_is_asked_for(client: FlaskClient, world: World) -> None:
    error(get(client, world, "hourly", accept="text/csv", device="D1", limit=0), 400)


def test_cors_header_on_data_and_errors(client: FlaskClient, world: World) -> None:
    ok = get(client, world, "hourly", device="D1", start_time="2024-07-01", limit=1)
    assert ok.headers["Access-Control-Allow-Origin"] == "*"
    assert "X-Cursor-Next" in ok.headers["Access-Control-Expose-Headers"]
    bad = get(client, world, "hourly", device="D1", limit=0)
    assert bad.headers["Access-Control-Allow-Origin"] == "*"


def test_empty_result(client: FlaskClient, world: World) -> None:
    response = get(client, world, "hourly", device="D1", start_time="2020-01-01",
                   end_time="2020-01-02")
    assert rows(response) == [] and "X-Cursor-Next" not in response.headers
    text = get(client, world, "hourly", accept="text/csv", device="D1", select="time,tair",
               start_time="2020-01-01", end_time="2020-01-02")
    assert text.get_data(as_text=True) == "time,tair\n"


def test_head_request_frees_its_connection(client: FlaskClient, world: World,
                                           app: Flask) -> None:
    pool = pool_of(app)
    for _ in range(pool.max_size + 2):
        # buffered: the client closes the body as a WSGI server does; nothing is iterated.
        response = client.head(f"{URL}/hourly?device=D1&start_time=2024-07-01",
                               headers=world.headers(), buffered=True)
        assert response.status_code == 200 and response.data == b""
    assert pool.get_stats().get("requests_errors", 0) == 0
    assert rows(get(client, world, "hourly", device="D1", start_time="2024-07-01", limit=1))


def test_every_table_serves_every_column(client: FlaskClient, world: World) -> None:
    for name, table in TABLES.items():
        got = rows(get(client, world, name, device="D1", start_time="2024-06-01", limit=2))
        for row in got:
            assert list(row) == list(table.column_names)


def test_statement_timeout_is_set_on_api_connections(app: Flask) -> None:
    with pool_of(app).connection() as conn:
        assert conn.execute("SHOW statement_timeout").fetchone()[0] == "30s"
        assert conn.execute("SHOW TimeZone").fetchone()[0] == "UTC"


def test_rows_are_utc_instants(client: FlaskClient, world: World) -> None:
    got = rows(get(client, world, "calibrated", device="D1", start_time="2024-07-01", limit=1,
                   select="time"))
    parsed = datetime.fromisoformat(got[0]["time"].replace("Z", "+00:00"))
    assert parsed == T0 and parsed.tzinfo == UTC


@pytest.mark.parametrize("local_time", [
    "America/New_York", "Australia/Lord_Howe", "Asia/Kathmandu", "America/St_Johns", "UTC",
    "-04:00", "+05:45", "-25200", "3600", "-25201"])
def test_csv_and_json_agree_on_local_time(client: FlaskClient, world: World,
                                          local_time: str) -> None:
    params = dict(device="D3", start_time="2024-11-03", select="time", local_time=local_time)
    as_json = [r["local_time"] for r in rows(get(client, world, "hourly", **params))]
    as_csv = [line[1] for line in csv_rows(get(client, world, "hourly", accept="text/csv",
                                               **params))[1:]]
    assert as_csv == as_json and len(as_json) == 4


def test_csv_values_match_json_values(client: FlaskClient, world: World) -> None:
    params = dict(device="D1", start_time="2024-07-01", limit=50, temp="f", pres="kp",
                  ratio="dec")
    as_json = rows(get(client, world, "calibrated", **params))
    lines = csv_rows(get(client, world, "calibrated", accept="text/csv", **params))
    header = lines[0]
    for obj, line in zip(as_json, lines[1:], strict=True):
        for name, text in zip(header, line, strict=True):
            value = obj[name]
            if value is None:
                assert text == ""
            elif isinstance(value, float):
                assert float(text) == value
            elif name == "time":
                assert text == value.replace("Z", "+0000")
            else:
                assert text == str(value)


def test_csv_body_not_read_frees_its_connection(client: FlaskClient, world: World,
                                                app: Flask) -> None:
    """A CSV page whose COPY is abandoned (HEAD, or a client gone) ends the COPY cleanly."""
    pool = pool_of(app)
    for _ in range(pool.max_size + 2):
        response = client.head(f"{URL}/calibrated?device=D4&start_time=2024-07-01&limit=10000",
                               headers=world.headers(Accept="text/csv"), buffered=True)
        assert response.status_code == 200 and response.data == b""
    streamed = client.get(f"{URL}/calibrated?device=D4&start_time=2024-07-01&limit=10000",
                          headers=world.headers(Accept="text/csv"))
    first = next(streamed.response)  # read one piece, then walk away
    assert first.startswith(b"time,device,location,")
    streamed.close()
    assert len(csv_rows(get(client, world, "calibrated", accept="text/csv", device="D4",
                            start_time="2024-07-01", limit=10000))) == 2501


def test_long_json_page_abandoned_frees_its_connection(client: FlaskClient, world: World,
                                                      app: Flask) -> None:
    """A JSON page longer than one chunk streams the rest of its rows from one statement; a
    body never read (HEAD) or left half-read (a client gone) ends that statement, and the
    connection goes back to the pool idle, as it came."""
    pool = pool_of(app)
    # No end_time: the window ends now, so the page is streamed (not built whole for an ETag).
    url = f"{URL}/calibrated?device=D4&start_time=2024-07-01&limit=10000"
    for _ in range(pool.max_size + 2):
        response = client.head(url, headers=world.headers(), buffered=True)
        assert response.status_code == 200 and response.data == b""
    streamed = client.get(url, headers=world.headers())
    assert streamed.status_code == 200 and "ETag" not in streamed.headers
    pieces = [next(streamed.response) for _ in range(3)]  # "[", the first chunk, a second
    assert pieces[0] == b"[" and pieces[2].startswith(b',{"time":')
    streamed.close()
    conns = [pool.getconn() for _ in range(pool.get_stats()["pool_size"])]
    try:
        for conn in conns:
            assert conn.autocommit is False
            assert conn.info.transaction_status == conn.info.transaction_status.IDLE
            assert conn.execute("SELECT 1").fetchone() == (1,)
            conn.rollback()
    finally:
        for conn in conns:
            pool.putconn(conn)
    whole = client.get(url, headers=world.headers())
    assert len(orjson.loads(whole.get_data())) == D4_ROWS
    assert pool.get_stats().get("requests_errors", 0) == 0


@pytest.mark.parametrize("params,accept", [
    ({"device": "D1", "start_time": "2024-07-01", "limit": 5}, None),
    ({"device": "D4", "start_time": "2024-07-01", "limit": 2200}, None),
    ({"device": "D1", "start_time": "2024-07-01", "limit": 5}, "text/csv"),
    ({"device": "B1"}, None),
    ({"location": "NY field", "start_time": "2024-07-01", "limit": 5}, None),
], ids=["small", "large", "csv", "foreign_device", "location_name"])
def test_connections_go_back_to_the_pool_as_they_came(
        client: FlaskClient, world: World, app: Flask, params: dict[str, Any],
        accept: str | None) -> None:
    """JSON pages run in autocommit; the pool (and the other endpoints) must never see that."""
    get(client, world, "calibrated", accept=accept, **params).close()
    pool = pool_of(app)
    conns = [pool.getconn() for _ in range(pool.get_stats()["pool_size"])]
    try:
        for conn in conns:
            assert conn.autocommit is False
            assert conn.info.transaction_status == conn.info.transaction_status.IDLE
    finally:
        for conn in conns:
            pool.putconn(conn)
