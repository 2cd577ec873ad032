"""The column registry is consistent with itself: sources exist, units match classes."""

from __future__ import annotations

import pytest

from shared.columns import CALIBRATED, ROLLUP_TABLES, TABLES, Measure, Rollup, describe

UNIT_OF_MEASURE = {
    Measure.TEMP: {"C"},
    Measure.TEMP_DELTA: {"C day"},
    Measure.PRES: {"kPa"},
    Measure.SIZE: {"mm", "mm/h"},
    Measure.RATIO: {"ratio"},
    Measure.SPEED: {"m/s"},
}


@pytest.mark.parametrize("name", list(TABLES))
def test_every_table_starts_with_the_key_columns(name: str) -> None:
    assert TABLES[name].column_names[:3] == ("time", "device", "location")


@pytest.mark.parametrize("name", list(TABLES))
def test_column_names_unique_and_described(name: str) -> None:
    cols = TABLES[name].columns
    assert len({c.name for c in cols}) == len(cols)
    for c in cols:
        assert c.description and c.dtype


@pytest.mark.parametrize("name", ROLLUP_TABLES)
def test_rollup_sources_exist_in_calibrated(name: str) -> None:
    raw = {c.name for c in CALIBRATED}
    for c in TABLES[name].columns:
        if c.source is not None:
            assert c.source in raw, f"{name}.{c.name} reads unknown {c.source}"
        if c.rollup in (Rollup.AT_MAX_OF, Rollup.AT_MIN_OF):
            assert c.param in raw


def test_measures_match_stored_units() -> None:
    for t in TABLES.values():
        for c in t.columns:
            if c.measure is not None:
                assert c.unit in UNIT_OF_MEASURE[c.measure], f"{t.name}.{c.name}"
                assert c.is_numeric


def test_schema_record_keys_in_served_order() -> None:
    rec = describe(TABLES["daily"].column("crop_water_demand"))
    assert list(rec) == ["column_name", "data_type", "description"]
    assert rec["description"] == "Crop water demand, precip - etc (mm/day)"


def test_reference_columns_present() -> None:
    # Column names clients select, from docs/spec/reference-facts.md part A.
    daily = set(TABLES["daily"].column_names)
    for name in ("meant", "maxt", "mint", "maxt_time", "rh_at_mint", "crop_water_demand",
                 "dli", "sunshine_duration", "gdd", "heat_stress_hours", "create_time"):
        assert name in daily
    hourly = set(TABLES["hourly"].column_names)
    for name in ("tair", "maxt", "slp", "precip", "prate", "et", "etc", "wind_heading",
                 "sample_pct", "low_quality"):
        assert name in hourly
