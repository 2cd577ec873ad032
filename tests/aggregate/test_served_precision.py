"""Rollup values are rounded at write: no value served by the API, in any unit, has more
decimals than its column's declared precision (docs/decisions.md), where the rollups used to
serve float noise such as 56.400143 mm or an ET of 4.1506653 mm."""

from __future__ import annotations

import itertools
import math
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import Any

import pytest

from shared import accounts, units
from shared.columns import TABLES
from tests.support.rollups import insert_readings, make_location, run_all, series

START = datetime(2024, 6, 28, tzinfo=UTC)
CHOICES = {param: tuple(units.UNITS[param]) for param in units.UNIT_PARAMS}


def _decimals(value: float) -> int:
    """Decimals of the shortest text of `value` (what JSON carries)."""
    exponent = Decimal(repr(value)).normalize().as_tuple().exponent
    assert isinstance(exponent, int)
    return max(0, -exponent)


def _noisy(i: int, t: datetime, base: float, amp: float) -> float:
    # Values with many decimals, as sensors and sums of float32 give them.
    return base + amp * math.sin(i / 7.3 + base) + 1e-4 * math.cos(i * 1.7)


@pytest.fixture
def served(db, database_url):  # type: ignore[no-untyped-def]
    from tests.support.apps import close_app, make_app

    loc = make_location(db, "Asia/Kathmandu", lat=27.7, lon=85.3, elev=1400.0, kc=0.83,
                        sensor_height=3.0)
    org = db.execute("SELECT org_id FROM locations WHERE id = %s", (loc,)).fetchone()[0]
    user = accounts.create_user(db, org=org, email="p@p.example", password="p-password-123")
    key = accounts.create_api_key(db, user=user, scopes=["data:read"])["apikey"]
    accounts.register_device(db, org=org, name="P1")
    fields = {c.name: (lambda lo, hi: lambda i, t: round(min(hi, max(lo, _noisy(
        i, t, (lo + hi) / 2, (hi - lo) / 3))), 6))(*c.valid_range)
        for c in TABLES["calibrated"].columns if c.valid_range is not None}
    fields["precip"] = lambda i, t: 0.254 if i % 9 == 0 else 0.0
    fields["tdew"] = lambda i, t: _noisy(i, t, 9.0, 3.0)
    fields["ea"] = lambda i, t: _noisy(i, t, 1.2, 0.3)
    fields["vpd"] = lambda i, t: _noisy(i, t, 0.8, 0.3)
    fields["slp"] = lambda i, t: _noisy(i, t, 101.0, 0.5)
    insert_readings(db, "P1", loc, series(START, START + timedelta(days=2), **fields))
    run_all(db)
    db.commit()
    app = make_app(database_url)
    try:
        yield app.test_client(), key
    finally:
        close_app(app)


def test_no_served_rollup_value_has_more_decimals_than_its_precision(served) -> None:
    client, key = served
    checked = 0
    worst: dict[str, Any] = {}
    for table in ("hourly", "local_hourly", "daily"):
        cols = [c for c in TABLES[table].columns if c.is_numeric]
        for combo in itertools.product(*CHOICES.values()):
            chosen = dict(zip(CHOICES, combo, strict=True))
            response = client.get(
                f"/api/v2/data/{table}", headers={"Authorization": f"Apikey {key}"},
                query_string={"device": "P1", "start_time": "2024-06-27",
                              "end_time": "2024-07-01", **chosen})
            assert response.status_code == 200, response.get_data(as_text=True)
            rows = response.get_json()
            assert len(rows) >= 2
            units_in_effect = {p: units.parse_unit(p, code) for p, code in chosen.items()}
            for col in cols:
                unit = (units_in_effect[units.param_for(col.measure)]
                        if col.measure is not None else None)
                allowed = units.decimals(col, unit)
                for r in rows:
                    v = r[col.name]
                    if v is None:
                        continue
                    checked += 1
                    if _decimals(v) > allowed:
                        worst.setdefault(f"{table}.{col.name} {chosen}", v)
    assert not worst, list(worst.items())[:10]
    assert checked > 10000
