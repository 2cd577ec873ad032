"""The column registry is consistent with itself: sources exist, units match classes."""

from __future__ import annotations

import pytest

from shared import units
from shared.columns import CALIBRATED, ROLLUP_TABLES, TABLES, Measure, Rollup
from shared.units import EXTRA_KEYS, describe

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


def test_schema_record_is_the_three_spec_keys_by_default() -> None:
    """The interface spec's record is exactly these three keys (issue 30 item 6.1)."""
    rec = describe(TABLES["daily"].column("crop_water_demand"))
    assert list(rec) == ["column_name", "data_type", "description"]


def test_schema_record_keys_in_served_order() -> None:
    rec = describe(TABLES["daily"].column("crop_water_demand"), ("unit", "precision"))
    # The three keys in the order clients read them; precision and unit after them.
    assert list(rec) == ["column_name", "data_type", "description", "precision", "unit"]
    assert rec["description"] == "Crop water demand, precip - etc (mm/day)"
    assert (rec["precision"], rec["unit"]) == (2, "mm")


@pytest.mark.parametrize(("table", "name", "precision", "unit"), [
    ("hourly", "tair", 2, "C"),
    ("hourly", "rh", 2, "pct"),  # stored 0..1, served in % by default
    ("hourly", "ea", 3, "mb"),  # stored kPa, served in mb
    ("hourly", "wind_speed", 2, "mps"),
    ("daily", "swdw", 3, "MJ/m2"),
    ("daily", "precip_hours", 0, "h"),
    ("daily", "gdd", 2, "C"),
    ("daily", "sample_pct", 1, "pct"),
    ("daily", "kc", 3, None),
    ("daily", "maxt_time", None, None),
    ("hourly", "wind_heading", None, None),
    ("daily", "low_quality", None, None),
    ("health", "fw", None, None),
])
def test_schema_precision_and_unit(table: str, name: str, precision: int | None,
                                   unit: str | None) -> None:
    rec = describe(TABLES[table].column(name), EXTRA_KEYS)
    assert (rec["precision"], rec["unit"]) == (precision, unit)


def test_schema_precision_is_the_served_decimals_in_the_unit() -> None:
    """`precision` is what the API rounds a value to in `unit` (shared.units.decimals)."""
    for t in TABLES.values():
        for c in t.columns:
            rec = describe(c, EXTRA_KEYS)
            if not c.is_numeric:
                assert rec["precision"] is None, f"{t.name}.{c.name}"
                continue
            unit = (units.parse_unit(units.param_for(c.measure), None) if c.measure else None)
            assert rec["precision"] == units.decimals(c, unit), f"{t.name}.{c.name}"
            assert rec["unit"] == (unit.label if unit else c.unit), f"{t.name}.{c.name}"


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
