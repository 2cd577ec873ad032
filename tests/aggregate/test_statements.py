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
    for col in TABLES[table].columns:
        if col.name in ("time", "device", "location"):
            continue
        if col.rollup in statements.PYTHON_RULES or col.rollup in (
                Rollup.CREATE_TIME, Rollup.UPDATE_TIME):
            continue
        text = statements.aggregate_expr(col).as_string(None)
        if col.source:
            assert f'"{col.source}"' in text, (col.name, text)


@pytest.mark.parametrize("table", ROLLUPS)
def test_statements_name_only_registry_columns(table: str) -> None:
    known = {c.name for t in TABLES.values() for c in t.columns}
    known |= {n for n, _ in statements.STAGE_EXTRA}
    known |= {"end", table, statements.stage_name(table), "calibrated"}
    for stmt in (statements.stage(table, by_location=table != "hourly"),
                 statements.upsert(table), statements.stage_update(table),
                 statements.delete_empty(table)):
        text = stmt.as_string(None)
        assert set(re.findall(r'"([a-z_]+)"', text)) <= known


def test_unit_scaling_follows_the_registry_units() -> None:
    lfw_daily = TABLES["daily"].column("lfw")
    lfw_hourly = TABLES["hourly"].column("lfw")
    assert lfw_daily.unit == "h" and lfw_hourly.unit == "min"
    assert "0.016666" in statements.aggregate_expr(lfw_daily).as_string(None)
    assert "*" not in statements.aggregate_expr(lfw_hourly).as_string(None)


def test_python_rules_are_the_water_columns() -> None:
    assert [c.name for c in statements.python_columns("daily")] == [
        "et", "etc", "kc", "crop_water_demand"]
    assert [c.name for c in statements.python_columns("hourly")] == ["et", "etc"]
