"""`/data/calibrated?interval=|points=` (serve.aggregation) against an independent computation.

The world: one device per zone (Berlin and New York across their DST days, Kolkata +05:30,
Kathmandu +05:45, Lord Howe's 30-minute DST end), 5-minute readings with every rule's column
(means, totals, the highest gust, the wind's circular mean) and gaps; the real rollups
(aggregate.rollups) have run, and one device then got a late reading they have not seen.
Each expected bucket is computed here in Python from the readings as inserted (float32 as
stored), never by the service's SQL.
"""

from __future__ import annotations

import math
import struct
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, time, timedelta
from typing import Any
from uuid import UUID

import psycopg
import pytest
from flask.testing import FlaskClient

from people import accounts
from shared import places
from shared.columns import TABLES
from shared.timeutil import zone
from tests.support.data_world import csv_rows, error, rows
from tests.support.readings import insert_readings
from tests.support.rollups import run_all

FIVE = timedelta(minutes=5)
ZONES = {"E1": "Europe/Berlin", "E2": "Europe/Berlin", "R1": "Asia/Kolkata",
         "N1": "America/New_York",
         "K1": "Asia/Kolkata", "M1": "Asia/Kathmandu", "L1": "Australia/Lord_Howe"}


def _utc(text: str) -> datetime:
    return datetime.fromisoformat(text).replace(tzinfo=UTC)


SPANS = {
    "E1": [("2024-03-29T12:00", "2024-04-01T12:00"), ("2024-10-25T12:00", "2024-10-29T00:00")],
    "E2": [("2024-07-01T00:00", "2024-07-02T00:00")],
    "R1": [("2024-07-01T00:00", "2024-07-01T06:00")],
    "N1": [("2024-03-08T12:00", "2024-03-12T00:00"), ("2024-11-01T12:00", "2024-11-05T00:00")],
    "K1": [("2024-07-01T00:00", "2024-07-04T00:00")],
    "M1": [("2024-07-01T00:00", "2024-07-04T00:00")],
    "L1": [("2024-04-05T00:00", "2024-04-09T00:00")],
}
LATE = _utc("2024-07-01T10:02")  # E2: stored after the rollups ran (its hour is behind)
RETIRED = _utc("2024-07-01T02:00")  # R1: this hour's readings deleted after the rollups ran


def f32(value: float | None) -> float | None:
    """`value` as PostgreSQL's real stores it."""
    return None if value is None else struct.unpack("f", struct.pack("f", value))[0]


def reading(i: int, t: datetime) -> dict[str, Any]:
    """Reading i: every rule's column, varied; swdw missing in some readings."""
    return {"time": t, "tair": round(10 + (i * 37 % 200) / 10, 1),
            "rh": round((i * 13 % 100) / 100, 2), "p": round(100 + (i % 7) / 10, 1),
            "precip": 0.2 if i % 9 == 0 else 0.0, "wind_speed": (i * 3 % 100) / 10,
            "wind_gust": (i * 7 % 150) / 10, "wind_direction": float(i * 47 % 360),
            "lfw": float(i % 6), "swdw": None if i % 5 == 0 else float(i * 11 % 900)}


@dataclass
class AggWorld:
    """The seeded objects, and the readings as inserted per device."""

    url: str
    locations: dict[str, UUID]
    keys: dict[str, str]
    readings: dict[str, list[dict[str, Any]]] = field(default_factory=dict)

    def headers(self, who: str = "a") -> dict[str, str]:
        return {"Authorization": f"Apikey {self.keys[who]}"}


def seed(url: str) -> AggWorld:
    with psycopg.connect(url) as conn:
        org_a = accounts.create_org(conn, name="Agg A")
        org_b = accounts.create_org(conn, name="Agg B")
        user_a = accounts.create_user(conn, org=org_a, email="a@agg.example", password="a" * 12)
        user_b = accounts.create_user(conn, org=org_b, email="b@agg.example", password="b" * 12)
        locations: dict[str, UUID] = {}
        world = AggWorld(url, locations, {})
        for device, tz in ZONES.items():
            loc = places.create_location(conn, org=org_a, loc=places.LocationInput(
                name=f"at {device}", tz_name=tz))
            locations[device] = loc
            places.register_device(conn, org=org_a, name=device)
            places.deploy_device(conn, device=device, location=loc,
                                   start=datetime(2024, 1, 1, tzinfo=UTC))
            got = []
            i = 0
            for lo, hi in SPANS[device]:
                t = _utc(lo)
                while t < _utc(hi):
                    if i % 97 != 5:  # gaps: some buckets are incomplete
                        got.append(reading(i, t))
                    t += FIVE
                    i += 1
            insert_readings(conn, device, loc, got, marks=True)
            world.readings[device] = got
        places.register_device(conn, org=org_b, name="X1")
        loc_b = places.create_location(conn, org=org_b, loc=places.LocationInput(
            name="B", tz_name="Europe/Berlin"))
        places.deploy_device(conn, device="X1", location=loc_b,
                               start=datetime(2024, 1, 1, tzinfo=UTC))
        insert_readings(conn, "X1", loc_b, [reading(i, _utc("2024-07-01T00:00") + i * FIVE)
                                            for i in range(24)], marks=True)
        run_all(conn)
        # As an organisation's reading retention does (migration 0060): readings go, the
        # rollups stay.
        conn.execute("DELETE FROM calibrated WHERE device = 'R1' AND time >= %s"
                     " AND time < %s", (RETIRED, RETIRED + timedelta(hours=1)))
        late = reading(7, LATE)
        insert_readings(conn, "E2", locations["E2"], [late], marks=True)
        world.readings["E2"].append(late)
        world.readings["E2"].sort(key=lambda r: r["time"])
        world.keys["a"] = accounts.create_api_key(conn, user=user_a, scopes=["data:read"])[
            "apikey"]
        world.keys["b"] = accounts.create_api_key(conn, user=user_b, scopes=["data:read"])[
            "apikey"]
        conn.commit()
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("ANALYZE calibrated")
    return world


@pytest.fixture(scope="module")
def world(module_db: str) -> AggWorld:
    """The aggregation world, shared by the module (tests must not change it)."""
    return seed(module_db)


# ---- the independent computation ---------------------------------------------------------

def bucket_start(t: datetime, interval: str, tz: str) -> datetime:
    """Start of the bucket holding t: UTC clock below a day, local midnight (Monday) above."""
    if interval in ("1d", "7d"):
        local = t.astimezone(zone(tz)).date()
        if interval == "7d":
            local -= timedelta(days=local.weekday())
        return datetime.combine(local, time(0), tzinfo=zone(tz)).astimezone(UTC)
    width = {"15m": 900, "30m": 1800, "1h": 3600, "3h": 10800, "6h": 21600}[interval]
    epoch = int(t.timestamp())
    return datetime.fromtimestamp(epoch - epoch % width, UTC)


def bucket_end(start: datetime, interval: str, tz: str) -> datetime:
    """Start of the next bucket (local days last 23 to 25 hours)."""
    if interval in ("1d", "7d"):
        local: date = start.astimezone(zone(tz)).date()
        local += timedelta(days=1 if interval == "1d" else 7)
        return datetime.combine(local, time(0), tzinfo=zone(tz)).astimezone(UTC)
    return start + {"15m": timedelta(minutes=15), "30m": timedelta(minutes=30),
                    "1h": timedelta(hours=1), "3h": timedelta(hours=3),
                    "6h": timedelta(hours=6)}[interval]


def _mean(values: list[float]) -> float | None:
    return sum(values) / len(values) if values else None


def _circular(values: list[float]) -> float | None:
    if not values:
        return None
    s = sum(math.sin(math.radians(v)) for v in values)
    c = sum(math.cos(math.radians(v)) for v in values)
    return (math.degrees(math.atan2(s, c)) + 360) % 360


RULES: dict[str, Callable[[list[float]], float | None]] = {
    "mean": _mean, "min": lambda v: min(v) if v else None, "max": lambda v: max(v) if v else None,
    "total": lambda v: sum(v) if v else None, "circular": _circular}
# column served -> (reading column, rule): the registry's rules, written out here on purpose.
EXPECTED_RULES = {
    "tair": ("tair", "mean"), "tair_min": ("tair", "min"), "tair_max": ("tair", "max"),
    "rh": ("rh", "mean"), "rh_min": ("rh", "min"), "rh_max": ("rh", "max"),
    "p": ("p", "mean"), "precip": ("precip", "total"), "wind_speed": ("wind_speed", "mean"),
    "wind_gust": ("wind_gust", "max"), "wind_direction": ("wind_direction", "circular"),
    "lfw": ("lfw", "total"), "swdw": ("swdw", "mean"), "swdw_min": ("swdw", "min"),
    "swdw_max": ("swdw", "max")}
# unit factor per served column with default units (rh: fraction -> %, p: kPa -> mb)
SCALE = {"rh": 100.0, "rh_min": 100.0, "rh_max": 100.0, "p": 10.0}


def expected_buckets(world: AggWorld, device: str, interval: str, start: datetime,
                     end: datetime) -> dict[datetime, dict[str, Any]]:
    """The buckets of `device` starting in [start, end], computed from its readings."""
    tz = ZONES[device]
    out: dict[datetime, list[dict[str, Any]]] = {}
    for r in world.readings[device]:
        b = bucket_start(r["time"], interval, tz)
        if start <= b <= end:
            out.setdefault(b, []).append(r)
    result = {}
    for b, members in out.items():
        row: dict[str, Any] = {"samples": len(members)}
        slots = (bucket_end(b, interval, tz) - b) // FIVE
        row["expected"] = slots
        row["complete"] = len(members) >= slots
        for name, (source, rule) in EXPECTED_RULES.items():
            values = [f32(m[source]) for m in members if m[source] is not None]
            value = RULES[rule]([v for v in values if v is not None])
            row[name] = None if value is None else value * SCALE.get(name, 1.0)
        result[b] = row
    return result


def assert_bucket(got: dict[str, Any], want: dict[str, Any], *, where: str) -> None:
    """Every served column of `got` equals `want` to its last decimal (rounding aside)."""
    for name, value in want.items():
        if name not in got:
            continue
        if value is None or isinstance(value, bool | int):
            assert got[name] == value, (where, name, got[name], value)
            continue
        col = TABLES["calibrated"].column(name.removesuffix("_min").removesuffix("_max"))
        step = 10.0 ** -col.precision
        diff = abs(got[name] - value)
        if name == "wind_direction":
            diff = min(diff, 360 - diff)
        assert diff <= 0.51 * step + 1e-9, (where, name, got[name], value)


def ask(client: FlaskClient, world: AggWorld, who: str = "a", **params: Any) -> Any:
    return client.get("/api/v2/data/calibrated", query_string=params,
                      headers=world.headers(who))


def whole(client: FlaskClient, world: AggWorld, **params: Any) -> list[dict[str, Any]]:
    """Every page of a listing, following X-Cursor-Next."""
    out: list[dict[str, Any]] = []
    cursor = None
    while True:
        answer = ask(client, world, **params, **({"cursor": cursor} if cursor else {}))
        out += rows(answer)
        cursor = answer.headers.get("X-Cursor-Next")
        if not cursor:
            return out


def check_against_python(client: FlaskClient, world: AggWorld, device: str, interval: str,
                         start: str, end: str, **extra: Any) -> list[dict[str, Any]]:
    got = whole(client, world, device=device, interval=interval, start_time=start,
                end_time=end, limit=50, **extra)
    want = expected_buckets(world, device, interval, _utc(start.rstrip("Z")),
                            _utc(end.rstrip("Z")))
    assert [_utc(r["time"].rstrip("Z")) for r in got] == sorted(want)
    for r in got:
        assert_bucket(r, want[_utc(r["time"].rstrip("Z"))], where=f"{device} {r['time']}")
    return got


# ---- each rule, each zone ---------------------------------------------------------------

@pytest.mark.parametrize("interval", ["15m", "1h", "3h", "1d"])
def test_each_rule_equals_the_readings_computed_here(
        client: FlaskClient, world: AggWorld, interval: str) -> None:
    got = check_against_python(client, world, "E1", interval, "2024-03-29T12:00:00Z",
                               "2024-04-01T11:59:00Z")
    assert got and all(set(EXPECTED_RULES) <= set(r) for r in got)
    # The gaps leave some buckets incomplete, and the answer says which (every day has one).
    assert any(not r["complete"] for r in got)
    assert any(r["complete"] for r in got) == (interval != "1d")


@pytest.mark.parametrize(("device", "short", "long"), [
    ("E1", "2024-03-31", "2024-10-27"), ("N1", "2024-03-10", "2024-11-03")])
def test_dst_days_last_23_and_25_hours(client: FlaskClient, world: AggWorld, device: str,
                                       short: str, long: str) -> None:
    tz = zone(ZONES[device])
    for day, hours in ((short, 23), (long, 25)):
        local = date.fromisoformat(day)
        start = datetime.combine(local, time(0), tzinfo=tz).astimezone(UTC)
        got = rows(ask(client, world, device=device, interval="1d",
                       start_time=start.isoformat(), end_time=start.isoformat(),
                       local_time=ZONES[device]))
        assert len(got) == 1
        assert got[0]["local_time"].startswith(f"{day}T00:00:00")
        assert got[0]["expected"] == hours * 12
        want = expected_buckets(world, device, "1d", start, start)[start]
        assert_bucket(got[0], want, where=f"{device} {day}")
    # and every day of the spans, through a cursor
    span = SPANS[device][1]
    check_against_python(client, world, device, "1d", span[0] + ":00Z", span[1] + ":00Z")


@pytest.mark.parametrize(("device", "day_start"), [
    ("K1", "2024-07-01T18:30:00Z"), ("M1", "2024-07-01T18:15:00Z")])
def test_half_and_quarter_hour_zones(client: FlaskClient, world: AggWorld, device: str,
                                     day_start: str) -> None:
    days = check_against_python(client, world, device, "1d", "2024-07-01T00:00:00Z",
                                "2024-07-03T23:59:00Z")
    assert days[0]["time"] == day_start
    # Buckets shorter than a day keep the UTC clock (docs/decisions.md): 1h starts on the hour.
    hours = check_against_python(client, world, device, "1h", "2024-07-01T00:00:00Z",
                                 "2024-07-01T12:00:00Z", local_time=ZONES[device])
    assert all(r["time"].endswith(":00:00Z") for r in hours)
    assert hours[0]["local_time"][14:16] in ("30", "45")


def test_lord_howe_half_hour_dst_end(client: FlaskClient, world: AggWorld) -> None:
    got = check_against_python(client, world, "L1", "1d", "2024-04-05T00:00:00Z",
                               "2024-04-08T23:59:00Z", local_time="Australia/Lord_Howe")
    by_day = {r["local_time"][:10]: r for r in got}
    assert by_day["2024-04-07"]["expected"] == 294  # 24.5 hours
    assert by_day["2024-04-06"]["expected"] == 288


def test_weeks_start_on_local_monday(client: FlaskClient, world: AggWorld) -> None:
    got = check_against_python(client, world, "N1", "7d", "2024-10-28T00:00:00Z",
                               "2024-11-05T00:00:00Z", local_time="America/New_York")
    assert [r["local_time"][:10] for r in got] == ["2024-10-28", "2024-11-04"]
    # The first week holds the fall-back night (7 days and an hour), the second does not.
    assert [r["expected"] for r in got] == [7 * 288 + 12, 7 * 288]


# ---- units, CSV, cursors, several devices, location ---------------------------------------

def test_units_convert_each_aggregate(client: FlaskClient, world: AggWorld) -> None:
    params = {"device": "E1", "interval": "3h", "start_time": "2024-03-30T00:00:00Z",
              "end_time": "2024-03-30T12:00:00Z", "select": "time,tair,precip,p,rh"}
    base = rows(ask(client, world, **params))
    answer = ask(client, world, **params, temp="f", size="in", pres="kp", ratio="dec")
    converted = rows(answer)
    assert answer.headers["X-Units"] == "F,kp,dec,in"
    for b, c in zip(base, converted, strict=True):
        want = expected_buckets(world, "E1", "3h", _utc(b["time"][:19]), _utc(b["time"][:19]))
        w = next(iter(want.values()))
        for name in ("tair", "tair_min", "tair_max"):
            assert c[name] == pytest.approx(w[name] * 1.8 + 32, abs=0.0051)
        assert c["precip"] == pytest.approx(w["precip"] / 25.4, abs=0.00051)
        assert c["p"] == pytest.approx(w["p"] / 10, abs=0.00051)
        assert c["rh"] == pytest.approx(w["rh"] / 100, abs=0.000051)


def test_csv_holds_the_json_values(client: FlaskClient, world: AggWorld) -> None:
    params = {"device": "K1", "interval": "6h", "start_time": "2024-07-01T00:00:00Z",
              "end_time": "2024-07-02T00:00:00Z", "local_time": "Asia/Kolkata"}
    as_json = rows(ask(client, world, **params))
    answer = ask(client, world, **params, format="csv")
    assert answer.content_type.startswith("text/csv")
    lines = csv_rows(answer)
    head, body = lines[0], lines[1:]
    assert head[:4] == ["time", "device", "location", "tair"]
    assert head[-4:] == ["samples", "expected", "complete", "local_time"]
    assert len(body) == len(as_json) == 5
    for line, obj in zip(body, as_json, strict=True):
        record = dict(zip(head, line, strict=True))
        assert record["time"] == obj["time"].replace("Z", "+0000")
        assert record["local_time"] == obj["local_time"]
        assert record["complete"] == str(obj["complete"]).lower()
        for name in ("tair", "tair_max", "precip", "wind_direction", "swdw_min", "samples"):
            assert float(record[name]) == pytest.approx(obj[name])


@pytest.mark.parametrize("order", ["asc", "desc"])
def test_cursor_pages_buckets_of_several_devices(client: FlaskClient, world: AggWorld,
                                                 order: str) -> None:
    params = {"device": "K1,M1", "interval": "1h", "start_time": "2024-07-01T00:00:00Z",
              "end_time": "2024-07-02T00:00:00Z", "order": order, "select": "time,device,tair"}
    one_page = rows(ask(client, world, **params, limit=1000))
    assert len(one_page) == 2 * 25
    keys = [(r["time"], r["device"]) for r in one_page]
    assert keys == sorted(keys, reverse=order == "desc") and len(set(keys)) == len(keys)
    paged = whole(client, world, **params, limit=7)
    assert paged == one_page
    # A cursor belongs to its aggregation: with another interval it is a 400.
    cursor = ask(client, world, **params, limit=7).headers["X-Cursor-Next"]
    body = error(ask(client, world, **{**params, "interval": "3h"}, limit=7, cursor=cursor), 400)
    assert "cursor" in body["message"]


def test_points_pick_the_interval_and_page_like_it(client: FlaskClient,
                                                   world: AggWorld) -> None:
    params = {"device": "N1", "start_time": "2024-11-01T12:00:00Z",
              "end_time": "2024-11-04T23:59:00Z"}
    answer = ask(client, world, **params, points=30)
    got = rows(answer)
    assert answer.headers["X-Aggregation-Interval"] == "3h"  # 2h would give up to 42
    # A browser page of another origin may read both headers (CORS).
    exposed = answer.headers["Access-Control-Expose-Headers"]
    assert "X-Aggregation-Interval" in exposed and "X-Aggregated-From" in exposed
    assert 0 < len(got) <= 30
    assert got == rows(ask(client, world, **params, interval="3h"))
    assert whole(client, world, **params, points=30, limit=4) == got


def test_location_listing_and_one_device_agree(client: FlaskClient, world: AggWorld) -> None:
    params = {"interval": "1h", "start_time": "2024-07-01T00:00:00Z",
              "end_time": "2024-07-01T06:00:00Z"}
    by_device = rows(ask(client, world, device="M1", **params))
    by_location = rows(ask(client, world, location=str(world.locations["M1"]), **params))
    assert by_location == by_device and len(by_device) == 7


def test_stored_rollups_answer_where_exact(client: FlaskClient, world: AggWorld) -> None:
    hourly = ask(client, world, device="K1", interval="1h", start_time="2024-07-01T00:00:00Z",
                 end_time="2024-07-02T00:00:00Z", select="time,tair,precip,wind_direction,lfw")
    assert hourly.headers["X-Aggregated-From"] == "hourly"
    check_against_python(client, world, "K1", "1h", "2024-07-01T00:00:00Z",
                         "2024-07-02T00:00:00Z", select="time,tair,precip,wind_direction,lfw")
    daily = ask(client, world, device="K1", interval="1d", start_time="2024-07-01T00:00:00Z",
                end_time="2024-07-03T00:00:00Z", select="time,tair,precip,wind_direction")
    assert daily.headers["X-Aggregated-From"] == "daily"
    check_against_python(client, world, "K1", "1d", "2024-07-01T00:00:00Z",
                         "2024-07-03T00:00:00Z", select="time,tair,precip,wind_direction")
    # A column the rollup does not keep (p's band; daily lfw is in hours) reads the readings.
    for interval, select in (("1h", "time,p"), ("1d", "time,lfw")):
        answer = ask(client, world, device="K1", interval=interval, select=select,
                     start_time="2024-07-01T00:00:00Z", end_time="2024-07-02T00:00:00Z")
        assert answer.headers["X-Aggregated-From"] == "calibrated"


def test_a_bucket_the_rollup_has_not_seen_is_computed_from_the_readings(
        client: FlaskClient, world: AggWorld) -> None:
    select = "time,tair,precip,wind_direction"
    got = check_against_python(client, world, "E2", "1h", "2024-07-01T08:00:00Z",
                               "2024-07-01T12:00:00Z", select=select)
    assert next(r for r in got if r["time"] == "2024-07-01T10:00:00Z")["samples"] == 13
    assert ask(client, world, device="E2", interval="1h", select=select,
               start_time="2024-07-01T08:00:00Z").headers["X-Aggregated-From"] == "hourly"


# ---- tenancy and bad values ---------------------------------------------------------------

def test_another_organisations_device_is_the_unknown_404(client: FlaskClient,
                                                         world: AggWorld) -> None:
    params = {"interval": "1h", "start_time": "2024-07-01T00:00:00Z",
              "end_time": "2024-07-01T02:00:00Z"}
    theirs = error(ask(client, world, device="X1", **params), 404)
    unknown = error(ask(client, world, device="NOPE", **params), 404)
    assert theirs["message"].replace("X1", "?") == unknown["message"].replace("NOPE", "?")
    assert len(rows(ask(client, world, "b", device="X1", **params))) == 2
    assert error(ask(client, world, device="X1,K1", **params), 404)


@pytest.mark.parametrize(("params", "named"), [
    ({"interval": "7m"}, "interval"), ({"interval": "1 fortnight"}, "interval"),
    ({"interval": "0h"}, "interval"), ({"points": "0"}, "points"), ({"points": "many"}, "points"),
    ({"points": "10001"}, "points"), ({"interval": "1h", "points": "10"}, "interval"),
    ({"points": "1", "start_time": "2020-01-01T00:00:00Z"}, "points"),
])
def test_bad_values_are_400s_naming_the_parameter(client: FlaskClient, world: AggWorld,
                                                  params: dict[str, str], named: str) -> None:
    base = {"device": "K1", "end_time": "2024-07-02T00:00:00Z"}
    body = error(ask(client, world, **{**base, **params}), 400)
    assert named in body["message"]


def test_rollup_tables_are_served_as_stored(client: FlaskClient, world: AggWorld) -> None:
    answer = client.get("/api/v2/data/hourly", headers=world.headers(),
                        query_string={"device": "K1", "interval": "1d"})
    assert "interval" in error(answer, 400)["message"]


def test_documented_in_openapi(client: FlaskClient, world: AggWorld) -> None:
    spec = client.get("/api/v2/openapi.json").get_json()
    params = {p["name"] for p in spec["paths"]["/api/v2/data/{table}"]["get"]["parameters"]}
    assert {"interval", "points"} <= params
    headers = spec["paths"]["/api/v2/data/{table}"]["get"]["responses"]["200"]["headers"]
    assert "X-Aggregated-From" in headers


def test_a_stored_row_whose_readings_retention_deleted_is_served(
        client: FlaskClient, world: AggWorld) -> None:
    select = "time,tair,precip,wind_direction"
    answer = ask(client, world, device="R1", interval="1h", select=select,
                 start_time="2024-07-01T00:00:00Z", end_time="2024-07-01T05:00:00Z")
    assert answer.headers["X-Aggregated-From"] == "hourly"
    got = check_against_python(client, world, "R1", "1h", "2024-07-01T00:00:00Z",
                               "2024-07-01T05:00:00Z", select=select)
    assert [r["time"][11:13] for r in got] == ["00", "01", "02", "03", "04", "05"]
    # From the readings alone (p needs them), the retired hour is gone.
    from_readings = rows(ask(client, world, device="R1", interval="1h", select="time,p",
                             start_time="2024-07-01T00:00:00Z",
                             end_time="2024-07-01T05:00:00Z"))
    assert [r["time"][11:13] for r in from_readings] == ["00", "01", "03", "04", "05"]


def test_the_page_statement_is_never_prepared(world: AggWorld) -> None:
    """psycopg prepares a statement after its fifth run on a connection, and PostgreSQL then
    plans it generically (no chunk exclusion at plan time): measured a third more CPU for a
    year (docs/benchmarks.md). Seven pages on one connection leave it unprepared."""
    from serve import aggregation, queries
    from shared import units

    table = TABLES["calibrated"]
    with psycopg.connect(world.url, autocommit=True) as conn:
        org = conn.execute("SELECT org_id FROM devices WHERE name = 'K1'").fetchone()[0]
        scan = queries.Scan(
            table=table, columns=table.columns,
            units={p: units.parse_unit(p, None) for p in units.UNIT_PARAMS}, org=org,
            device="K1", location=None, start=_utc("2024-07-01T00:00"),
            end=_utc("2024-07-03T00:00"), limit=1000)
        for _ in range(7):
            page = aggregation.read_page(conn, scan, aggregation.Bucketing(None, 100),
                                         scan.start, scan.end, None)
            assert page.headers == {"X-Aggregated-From": "calibrated",
                                    "X-Aggregation-Interval": "30m"}
            assert b"".join(page.body).count(b'"samples"') == 97  # both ends' buckets
        prepared = conn.execute("SELECT statement FROM pg_prepared_statements").fetchall()
        assert not [s for (s,) in prepared if "calibrated" in s], prepared
