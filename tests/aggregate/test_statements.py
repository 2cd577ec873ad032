"""Rollup SQL comes from the column registry: every rollup column has exactly one rule, read
from shared.columns; no statement names a column the registry does not list. No services."""

from __future__ import annotations

import re

import pytest

from aggregate import statements
from shared.columns import TABLES, Rollup

ROLLUPS = ("hourly", "local_hourly", "daily")


@pytest.mark.parametrize("table", ROLLUPS)
def test_every_column_has_a_rule(table: str) -> None:
    per_cell = {s.name: s.per_cell.as_string(None) for s in statements.stats()}
    for col in TABLES[table].columns:
        if col.name in ("time", "device", "location"):
            continue
        if col.rollup in statements.WATER_RULES or col.rollup in (
                Rollup.CREATE_TIME, Rollup.UPDATE_TIME):
            continue
        text = statements.aggregate_expr(col).as_string(None)
        if col.rollup is Rollup.HOURS_WITH_ANY:
            # Counted at the first cell of each local hour with any amount (a window over the
            # cells' maxima of the source, in the table's write).
            assert f'"first_any_{col.source}"' in text
            text += statements.write(table, scope="pairs").as_string(None)
        if col.source:
            # The merge reads partial statistics; those read the source column from the rows.
            used = [n for n in per_cell if f'"{n}"' in text]
            assert any(f'"{col.source}"' in per_cell[n] for n in used), (col.name, text)


@pytest.mark.parametrize("table", ROLLUPS)
def test_statements_name_only_registry_columns(table: str) -> None:
    known = {c.name for t in TABLES.values() for c in t.columns}
    known |= {s.name for s in statements.stats()}
    known |= {f"first_any_{c.source}" for c in TABLES[table].columns
              if c.rollup is Rollup.HOURS_WITH_ANY}
    known |= {table, statements.PARTIALS, statements.SEGMENTS, statements.CELLS, "calibrated",
              "end", "lh_start", "lh_end", "day_start", "day_end"}
    for stmt in (statements.load_partials_buckets(table),
                 statements.load_partials_range(), statements.write(table, scope="pairs"),
                 statements.write(table, scope="range"), statements.create_temp()):
        text = stmt.as_string(None)
        assert set(re.findall(r'"([a-z_0-9.]+)"', text)) <= known, table


def test_unit_scaling_follows_the_registry_units() -> None:
    lfw_daily = TABLES["daily"].column("lfw")
    lfw_hourly = TABLES["hourly"].column("lfw")
    assert lfw_daily.unit == "h" and lfw_hourly.unit == "min"
    assert "0.016666" in statements.aggregate_expr(lfw_daily).as_string(None)
    assert "*" not in statements.aggregate_expr(lfw_hourly).as_string(None)


def test_water_rules_are_computed_in_the_write() -> None:
    for table in ROLLUPS:
        text = statements.write(table, scope="pairs").as_string(None)
        fn = "sds_fao56_daily_et" if table == "daily" else "sds_fao56_period_et"
        assert fn in text
        water = [c.name for c in TABLES[table].columns if c.rollup in statements.WATER_RULES]
        assert water == (["et", "etc", "kc", "crop_water_demand"] if table == "daily"
                         else ["et", "etc"])


def test_every_value_is_rounded_to_its_precision_at_write() -> None:
    from shared.units import stored_decimals

    for table in ROLLUPS:
        text = statements.write(table, scope="pairs").as_string(None)
        for col in TABLES[table].columns:
            if col.is_numeric:
                power = float(10 ** stored_decimals(col))
                assert f"* {power})" in text, (table, col.name)
