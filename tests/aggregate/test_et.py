"""FAO-56 worked examples (Allen et al. 1998) and the equations' building blocks, no services."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from tests.support import fao56_oracle as et

# Example 19, N'Diaye (Senegal): 16°13'N, 16°15'W, 8 m, 1 October. Clock times in the example
# are for Lz = 15° west (UTC-1), so local 14:00-15:00 is 15:00-16:00 UTC.
NDIAYE = {"lat": 16 + 13 / 60, "lon": -(16 + 15 / 60), "elevation": 8.0}


def test_daily_example_18_brussels() -> None:
    """6 July, 50°48'N, 100 m; Tmax 21.5, Tmin 12.3, RHmax 84 %, RHmin 63 %, wind 10 km/h at
    10 m, Rs 22.07 MJ/m2 (from 9.25 h of sunshine) -> ET0 3.9 mm/day."""
    value = et.daily_et(tmax=21.5, tmin=12.3, rh_max=0.84, rh_min=0.63, wind=10 / 3.6,
                        height=10.0, rs=22.07, lat=50.8, elevation=100.0, doy=187)
    assert value == pytest.approx(3.9, abs=0.1)


def test_daily_example_intermediate_values() -> None:
    assert et.wind_at_2m(10 / 3.6, 10.0) == pytest.approx(2.078, abs=0.005)
    assert et.daily_extraterrestrial(50.8, 187) == pytest.approx(41.09, abs=0.05)
    assert et.pressure_at(100.0) == pytest.approx(100.1, abs=0.05)
    assert et.sat_vapour_pressure(21.5) == pytest.approx(2.564, abs=0.002)


@pytest.mark.parametrize(("start_hour", "tair", "rh", "wind", "rs", "expected"), [
    pytest.param(15, 38.0, 0.52, 3.3, 2.450, 0.63, id="14-15h"),
    pytest.param(3, 28.0, 0.90, 1.9, 0.0, 0.0, id="02-03h"),
])
def test_hourly_example_19_ndiaye(start_hour, tair, rh, wind, rs, expected) -> None:
    start = datetime(2001, 10, 1, start_hour, tzinfo=UTC)
    value = et.period_et(start=start, end=start + timedelta(hours=1), tair=tair, rh=rh,
                         wind=wind, height=2.0, swdw=rs / et.W_TO_MJ_PER_HOUR, **NDIAYE)
    assert value == pytest.approx(expected, abs=0.1)
    assert value >= 0


def test_hourly_extraterrestrial_radiation_of_example_19() -> None:
    start = datetime(2001, 10, 1, 15, tzinfo=UTC)
    ra, sun = et.period_geometry(start, start + timedelta(hours=1), NDIAYE["lat"],
                                 NDIAYE["lon"])
    assert ra == pytest.approx(3.543, abs=0.005)
    assert sun > et.MIN_SUN_ELEVATION
    night, _ = et.period_geometry(start - timedelta(hours=12), start - timedelta(hours=11),
                                  NDIAYE["lat"], NDIAYE["lon"])
    assert night == 0.0


def test_half_hour_period_is_about_half_an_hour_of_et() -> None:
    start = datetime(2001, 10, 1, 15, tzinfo=UTC)
    args = dict(tair=38.0, rh=0.52, wind=3.3, height=2.0, swdw=2.45 / et.W_TO_MJ_PER_HOUR,
                **NDIAYE)
    full = et.period_et(start=start, end=start + timedelta(hours=1), **args)
    half = et.period_et(start=start, end=start + timedelta(minutes=30), **args)
    assert half == pytest.approx(full / 2, rel=0.05)
    with pytest.raises(ValueError):
        et.period_et(start=start, end=start, **args)
