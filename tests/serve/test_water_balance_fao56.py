"""FAO-56 Example 37 (chapter 8, p. 168: "Effect of water stress on crop evapotranspiration")
through the whole path: daily rows in the database, the `water_balance_dirty` marks of the
`daily` trigger, aggregate/water.py's recompute in the rollups' run, and the stored table read
back through `GET /api/v2/data/water_balance` (issue 35). The pure equations on the same
example: tests/waterbalance/test_fao56_examples.py (which explains the p fed here)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

import psycopg
import pytest
from flask.testing import FlaskClient

from people import accounts
from shared import places
from tests.support.fao56 import EX37, table_p
from tests.support.rollups import run_all

DAY0 = datetime(2024, 6, 30, tzinfo=UTC)


@dataclass(frozen=True)
class World:
    """The module's database, location and API key."""

    url: str
    loc: str
    key: str


@pytest.fixture(scope="module")
def world(module_db: str) -> World:
    """Location "Example 37" (UTC): silty soil 0.32/0.12, tomato roots 0.8 m, the p that is
    0.40 at ETc 6 mm/day; device EX37 with a start day whose ETc is the example's initial
    depletion (55 mm), then the example's ten days of ET0 5 mm and Kc 1.2, no rain."""
    with psycopg.connect(module_db) as conn:
        org = accounts.create_org(conn, name="FAO-56 Org")
        admin = accounts.create_user(conn, org=org, email="admin@fao.example",
                                     password="fao56-admin-pw-1", role="admin")
        loc = places.create_location(conn, org=org, loc=places.LocationInput(
            name="Example 37", tz_name="UTC", lat=40.0, lon=-3.0))
        places.register_device(conn, org=org, name="EX37")
        conn.execute("INSERT INTO water_settings (location_id, theta_fc, theta_wp, root_depth,"
                     " p) VALUES (%s, 0.32, 0.12, 0.8, %s)", (loc, table_p(0.40, 6.0)))
        days = [(DAY0, 55.0, 1.0)] + [(DAY0 + timedelta(days=i), 5.0, 1.2)
                                      for i in range(1, 11)]
        conn.cursor().executemany(
            "INSERT INTO daily (time, device, location, et, kc, etc, precip, sample_pct,"
            " low_quality) VALUES (%s, 'EX37', %s, %s, %s, %s, 0.0, 1.0, false)",
            [(t, loc, et, kc, et * kc) for t, et, kc in days])
        run_all(conn)
        key = accounts.create_api_key(conn, user=admin, scopes=["data:read"])["apikey"]
        conn.commit()
    return World(module_db, str(loc), key)


def test_example_37_served_by_data(client: FlaskClient, world: World) -> None:
    got = client.get("/api/v2/data/water_balance", headers={
        "Authorization": f"Apikey {world.key}"}, query_string={
        "location": world.loc, "start_time": "2024-07-01T00:00:00Z",
        "end_time": "2024-07-11T00:00:00Z"})
    assert got.status_code == 200, got.get_data(as_text=True)
    rows = got.get_json()
    assert len(rows) == len(EX37)
    for row, (_, pub_ks, pub_adj, pub_end) in zip(rows, EX37, strict=True):
        assert row["taw"] == pytest.approx(160.0) and row["raw"] == pytest.approx(64.0)
        assert row["etc"] == pytest.approx(6.0) and row["deep_percolation"] == 0.0
        assert abs(row["ks"] - pub_ks) <= 0.005 + 1e-6, row
        assert abs(row["etc_adj"] - pub_adj) <= 0.05 + 1e-6, row
        assert abs(row["depletion"] - pub_end) <= 0.05 + 1e-6, row
