"""The SQL FAO-56 functions (migration 0061) against the reference in
tests/support/fao56_oracle.py: equal within 0.001 mm over random inputs, and on FAO-56
Examples 18 and 19."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import psycopg
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.support import fao56_oracle as et

TOLERANCE = 0.001  # mm
PERIOD = ("SELECT sds_fao56_period_et(%s, %s, %s, %s, %s, %s, %s, %s, %s, %s)")
DAILY = ("SELECT sds_fao56_daily_et(%s, %s, %s, %s, %s, %s, %s, %s, %s, %s)")
NDIAYE = {"lat": 16 + 13 / 60, "lon": -(16 + 15 / 60), "elevation": 8.0}


def _period_sql(conn: psycopg.Connection, start: datetime, end: datetime, *, tair: float,
                rh: float, wind: float, height: float, swdw: float, lat: float, lon: float,
                elevation: float) -> float | None:
    row = conn.execute(PERIOD, (start, end, tair, rh, wind, height, swdw, lat, lon,
                                elevation)).fetchone()
    return row[0]


def _daily_sql(conn: psycopg.Connection, **kw: float) -> float | None:
    row = conn.execute(DAILY, (kw["tmax"], kw["tmin"], kw["rh_max"], kw["rh_min"], kw["wind"],
                               kw["height"], kw["rs"], kw["lat"], kw["elevation"],
                               kw["doy"])).fetchone()
    return row[0]


def test_example_18_brussels_daily(conn) -> None:
    args = dict(tmax=21.5, tmin=12.3, rh_max=0.84, rh_min=0.63, wind=10 / 3.6, height=10.0,
                rs=22.07, lat=50.8, elevation=100.0, doy=187)
    value = _daily_sql(conn, **args)
    assert value == pytest.approx(3.9, abs=0.1)
    assert value == pytest.approx(et.daily_et(**args), abs=TOLERANCE)  # type: ignore[arg-type]


@pytest.mark.parametrize(("start_hour", "tair", "rh", "wind", "rs", "expected"), [
    pytest.param(15, 38.0, 0.52, 3.3, 2.450, 0.63, id="14-15h"),
    pytest.param(3, 28.0, 0.90, 1.9, 0.0, 0.0, id="02-03h"),
])
def test_example_19_ndiaye_hourly(conn, start_hour, tair, rh, wind, rs, expected) -> None:
    start = datetime(2001, 10, 1, start_hour, tzinfo=UTC)
    args = dict(tair=tair, rh=rh, wind=wind, height=2.0, swdw=rs / et.W_TO_MJ_PER_HOUR,
                **NDIAYE)
    value = _period_sql(conn, start, start + timedelta(hours=1), **args)
    assert value == pytest.approx(expected, abs=0.1)
    assert value == pytest.approx(et.period_et(start=start, end=start + timedelta(hours=1),
                                               **args), abs=TOLERANCE)


def test_missing_input_is_null_not_a_guess(conn) -> None:
    start = datetime(2024, 7, 1, 12, tzinfo=UTC)
    assert conn.execute(PERIOD, (start, start + timedelta(hours=1), 20.0, None, 2.0, 2.0,
                                 300.0, 45.0, 7.0, 0.0)).fetchone()[0] is None
    assert conn.execute(DAILY, (25.0, 12.0, 0.9, 0.4, 2.0, 2.0, 20.0, None, 0.0,
                                180)).fetchone()[0] is None


times = st.datetimes(min_value=datetime(2020, 1, 1), max_value=datetime(2030, 12, 31),
                     timezones=st.just(UTC)).map(lambda t: t.replace(second=0, microsecond=0))
lengths = st.sampled_from([timedelta(minutes=15), timedelta(minutes=30),
                           timedelta(minutes=45), timedelta(hours=1),
                           timedelta(minutes=90)])
# PostgreSQL refuses subnormal float8 literals ("out of range"): real inputs never are.
tair = st.floats(-30, 48, allow_subnormal=False)
fraction = st.floats(0.02, 1.0, allow_subnormal=False)
wind = st.floats(0.0, 20.0, allow_subnormal=False)
height = st.sampled_from([2.0, 3.0, 10.0]) | st.floats(1.0, 12.0, allow_subnormal=False)
lat = st.floats(-89.9, 89.9, allow_subnormal=False)  # polar days and nights too (issue 22)
lon = st.floats(-180.0, 180.0, allow_subnormal=False)
elev = st.floats(-50.0, 4000.0, allow_subnormal=False)


@settings(max_examples=300, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(start=times, length=lengths, tair=tair, rh=fraction, wind=wind, height=height,
       swdw=st.floats(0.0, 1300.0, allow_subnormal=False), lat=lat, lon=lon, elevation=elev)
def test_period_et_sql_equals_python(conn, start, length, tair, rh, wind, height, swdw, lat,
                                     lon, elevation) -> None:
    args = dict(tair=tair, rh=rh, wind=wind, height=height, swdw=swdw, lat=lat, lon=lon,
                elevation=elevation)
    want = et.period_et(start=start, end=start + length, **args)
    got = _period_sql(conn, start, start + length, **args)
    assert got == pytest.approx(want, abs=TOLERANCE)


@settings(max_examples=300, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(t1=tair, spread=st.floats(0.0, 25.0, allow_subnormal=False), rh1=fraction,
       rh2=fraction, wind=wind, height=height, rs=st.floats(0.0, 35.0, allow_subnormal=False),
       lat=lat, elevation=elev,       doy=st.integers(1, 366))
def test_daily_et_sql_equals_python(conn, t1, spread, rh1, rh2, wind, height, rs, lat,
                                    elevation, doy) -> None:
    args = dict(tmax=t1 + spread, tmin=t1, rh_max=max(rh1, rh2), rh_min=min(rh1, rh2),
                wind=wind, height=height, rs=rs, lat=lat, elevation=elevation, doy=doy)
    want = et.daily_et(**args)  # type: ignore[arg-type]
    got = _daily_sql(conn, **args)
    assert got == pytest.approx(want, abs=TOLERANCE)
