"""Well-formed but hostile input to /data (issue 11, finding 5): extreme dates are a 400 that
states the accepted range, never a 500."""

from __future__ import annotations

import pytest
from flask.testing import FlaskClient

from shared.columns import TABLES
from tests.serve.conftest import World

RANGE = "1900-01-01T00:00:00Z to 2999-12-31T23:59:59Z"
EXTREMES = ["0001-01-01", "0001-01-01T00:00:00+01:00", "9999-12-31T23:55:00-01:00",
            "9999-12-31", "1899-12-31T23:59:59Z", "3000-01-01T00:00:00Z"]


@pytest.mark.parametrize("table", list(TABLES))
@pytest.mark.parametrize("param", ["start_time", "end_time"])
@pytest.mark.parametrize("value", EXTREMES)
def test_extreme_times_are_a_400_naming_the_range(client: FlaskClient, world: World, table: str,
                                                  param: str, value: str) -> None:
    for fmt in ("application/json", "text/csv"):
        resp = client.get(f"/api/v2/data/{table}", query_string={"device": "D1", param: value},
                          headers=world.headers(Accept=fmt))
        assert resp.status_code == 400, (resp.status_code, resp.data[:300])
        body = resp.get_json()
        assert body["message"].startswith(f"{param}: ") and RANGE in body["message"], body
        assert param in body["errors"]


@pytest.mark.parametrize("value", ["1900-01-01", "2999-12-31T23:59:59Z"])
def test_the_range_ends_are_served(client: FlaskClient, world: World, value: str) -> None:
    for table in TABLES:
        resp = client.get(f"/api/v2/data/{table}", query_string={
            "device": "D1", "start_time": value, "end_time": value},
            headers=world.headers())
        assert resp.status_code == 200 and resp.get_json() == [], (table, resp.data[:300])
    resp = client.get("/api/v2/data/hourly", query_string={"device": "D1", "end_time": "1900-01-01",
                                                           "local_time": "+14:00"},
                      headers=world.headers())
    assert resp.status_code == 200
