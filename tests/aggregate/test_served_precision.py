"""Values are rounded at write: no value served by the API, in any unit, has more decimals than
its column's declared precision (docs/decisions.md), where the rollups used to serve float noise
such as 56.400143 mm or an ET of 4.1506653 mm, and `calibrated` sensor values and derived dew
points carried whatever the device or the float arithmetic gave them. Readings go through the
ingester's own decoding and writer (`ingest.handler.handle`, `ingest.writer.write_batch`)."""

from __future__ import annotations

import itertools
import json
import math
import random
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import Any

import psycopg
import pytest

from ingest import writer
from ingest.handler import handle
from people import accounts
from shared import places, units
from shared.columns import HEALTH_INPUTS, READING_INPUTS, TABLES
from tests.support.ingesting import iso, now_slot
from tests.support.readings import insert_readings, series
from tests.support.rollups import make_location, run_all

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
    places.register_device(db, org=org, name="P1")
    fields = {c.name: (lambda lo, hi: lambda i, t: round(min(hi, max(lo, _noisy(
        i, t, (lo + hi) / 2, (hi - lo) / 3))), 6))(*c.valid_range)
        for c in TABLES["calibrated"].columns if c.valid_range is not None}
    fields["precip"] = lambda i, t: 0.254 if i % 9 == 0 else 0.0
    fields["tdew"] = lambda i, t: _noisy(i, t, 9.0, 3.0)
    fields["ea"] = lambda i, t: _noisy(i, t, 1.2, 0.3)
    fields["vpd"] = lambda i, t: _noisy(i, t, 0.8, 0.3)
    fields["slp"] = lambda i, t: _noisy(i, t, 101.0, 0.5)
    insert_readings(db, "P1", loc, series(START, START + timedelta(days=2), **fields), marks=True)
    run_all(db)
    db.commit()
    app = make_app(database_url)
    try:
        yield app.test_client(), key
    finally:
        close_app(app)


def _excess(client: Any, key: str, tables: tuple[str, ...], device: str, start: str, end: str,
            ) -> tuple[dict[str, Any], int]:
    """Served values with more decimals than their column's precision, in every combination
    of units (first offender per table, column and units), and how many values were checked."""
    checked = 0
    worst: dict[str, Any] = {}
    for table in tables:
        cols = [c for c in TABLES[table].columns if c.is_numeric]
        for combo in itertools.product(*CHOICES.values()):
            chosen = dict(zip(CHOICES, combo, strict=True))
            response = client.get(
                f"/api/v2/data/{table}", headers={"Authorization": f"Apikey {key}"},
                query_string={"device": device, "start_time": start, "end_time": end,
                              "limit": 5000, **chosen})
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
    return worst, checked


def test_no_served_rollup_value_has_more_decimals_than_its_precision(served) -> None:
    client, key = served
    worst, checked = _excess(client, key, ("hourly", "local_hourly", "daily"), "P1",
                             "2024-06-27", "2024-07-01")
    assert not worst, list(worst.items())[:10]
    assert checked > 10000


# ---- readings, through the ingester ------------------------------------------------------------

HOURS = 6


def _many_decimals(rng: random.Random, lo: float, hi: float) -> float:
    # A value well inside the range with 10+ decimals, as a float32 sensor or a calibration
    # polynomial gives them (never a short decimal by chance: the tail is random).
    return lo + (hi - lo) * (0.05 + 0.9 * rng.random()) + rng.random() * 1e-9


def _ingest(conn: psycopg.Connection, device: str, start: datetime) -> dict[str, list[float]]:
    """Publish-equivalent: HOURS of readings and health reports with many decimals, decoded and
    written by the ingester's own functions; returns the sent values by field."""
    rng = random.Random(12)
    sent: dict[str, list[float]] = {}
    readings, reports = [], []
    for i in range(HOURS * 12):
        t = start + timedelta(minutes=5 * i)
        r: dict[str, Any] = {"time": iso(t)}
        for c in READING_INPUTS:
            assert c.valid_range is not None
            r[c.name] = _many_decimals(rng, *c.valid_range)
        r["tair"] = _many_decimals(rng, 5.0, 35.0)  # dew point and VPD in a sensible range
        r["p"] = _many_decimals(rng, 84.0, 88.0)  # at 1400 m
        readings.append(r)
        h: dict[str, Any] = {"time": iso(t)}
        for c in HEALTH_INPUTS:
            if c.is_numeric:
                assert c.valid_range is not None
                h[c.name] = _many_decimals(rng, *c.valid_range)
        reports.append(h)
        for k, v in (r | h).items():
            if k != "time":
                sent.setdefault(k, []).append(v)
    messages = [handle(f"sensors/{device}/readings", json.dumps(readings[i:i + 12]).encode())
                for i in range(0, len(readings), 12)]
    messages.append(handle(f"sensors/{device}/health", json.dumps(reports).encode()))
    assert all(not m.decoded.rejections for m in messages)
    writer.prepare(conn)
    with conn.transaction():
        result = writer.write_batch(conn, messages)
    assert (result.stored, result.health_stored) == (len(readings), len(reports))
    return sent


@pytest.fixture
def ingested(db, database_url):  # type: ignore[no-untyped-def]
    from tests.support.apps import close_app, make_app

    loc = make_location(db, "Asia/Kathmandu", lat=27.7, lon=85.3, elev=1400.0)
    org = db.execute("SELECT org_id FROM locations WHERE id = %s", (loc,)).fetchone()[0]
    user = accounts.create_user(db, org=org, email="q@q.example", password="q-password-123")
    key = accounts.create_api_key(db, user=user, scopes=["data:read"])["apikey"]
    places.register_device(db, org=org, name="Q1")
    start = now_slot(60 * (HOURS + 1))
    places.deploy_device(db, device="Q1", location=loc, start=start - timedelta(days=1))
    sent = _ingest(db, "Q1", start)
    run_all(db)
    db.commit()
    app = make_app(database_url)
    try:
        yield app.test_client(), key, start, sent
    finally:
        close_app(app)


def test_no_served_reading_has_more_decimals_than_its_precision(ingested) -> None:
    client, key, start, sent = ingested
    # The values sent really carry more decimals than any column keeps.
    for name, values in sent.items():
        places = units.stored_decimals(TABLES["health" if name in {
            c.name for c in HEALTH_INPUTS} else "calibrated"].column(name))
        assert sum(_decimals(v) > places + 2 for v in values) > len(values) * 0.9, name
    window = (start - timedelta(hours=1)).strftime("%Y-%m-%dT%H:%M:%SZ"), \
        (start + timedelta(hours=HOURS + 1)).strftime("%Y-%m-%dT%H:%M:%SZ")
    worst, checked = _excess(client, key, ("calibrated", "health"), "Q1", *window)
    assert not worst, list(worst.items())[:10]
    # Every column of both tables, the derived ones included, was served (in 48 combinations).
    numeric = sum(c.is_numeric for t in ("calibrated", "health") for c in TABLES[t].columns)
    assert checked == HOURS * 12 * numeric * len(list(itertools.product(*CHOICES.values())))
    # What is stored is the value sent, rounded (not a value that lost more than rounding).
    rows = client.get("/api/v2/data/calibrated", headers={"Authorization": f"Apikey {key}"},
                      query_string={"device": "Q1", "start_time": window[0],
                                    "end_time": window[1], "ratio": "dec", "pres": "kp",
                                    "limit": 5000}).get_json()
    for i, row in enumerate(sorted(rows, key=lambda r: r["time"])):
        for c in READING_INPUTS:
            assert row[c.name] == round(sent[c.name][i], units.stored_decimals(c)), c.name
    # The rollups built from these readings are rounded too.
    worst, checked = _excess(client, key, ("hourly",), "Q1", *window)
    assert not worst, list(worst.items())[:10]


def test_range_checks_see_the_value_as_sent(db) -> None:
    """Rounding comes after validation: 70.004 C is out of range although it would round to
    70.0; 69.996 C is in range and stored as 70.0 (docs/decisions.md)."""
    loc = make_location(db, "UTC", elev=10.0)
    org = db.execute("SELECT org_id FROM locations WHERE id = %s", (loc,)).fetchone()[0]
    places.register_device(db, org=org, name="R1")
    t1, t2 = now_slot(20), now_slot(15)
    message = handle("sensors/R1/readings", json.dumps(
        [{"time": iso(t1), "tair": 70.004}, {"time": iso(t2), "tair": 69.996}]).encode())
    assert [r.code for r in message.decoded.rejections] == ["out_of_range"]
    assert "70.004" in message.decoded.rejections[0].detail
    writer.prepare(db)
    with db.transaction():
        writer.write_batch(db, [message])
    stored = db.execute("SELECT time, tair::text FROM calibrated WHERE device = 'R1'").fetchall()
    assert stored == [(t2, "70")]
