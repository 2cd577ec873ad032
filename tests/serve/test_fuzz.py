"""Arbitrary query strings on /data never produce a 5xx or a non-JSON error (plan S18)."""

from __future__ import annotations

from flask import Flask
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.support.data_world import World

PARAMS = ["device", "location", "select", "start_time", "end_time", "limit", "cursor", "order",
          "local_time", "temp", "pres", "size", "ratio", "speed", "interval", "points"]
TEXT = st.text(alphabet=st.characters(blacklist_categories=("Cs",)), max_size=40)
VALUE = st.one_of(TEXT, st.sampled_from([
    "D1", "NY field", "2024-07-01", "2024-07-01T00:00:00Z", "0", "10000", "-1", "desc",
    "America/New_York", "+05:30", "F", "time,tair", "'; DROP TABLE calibrated; --",
    "\x00", "%", "1e309", "9" * 40, "1h", "1d", "7d", "15m", "1000"]))


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(table=st.sampled_from(["calibrated", "hourly", "daily", "health", "nope", "%00"]),
       query=st.dictionaries(st.sampled_from(PARAMS), VALUE, max_size=6))
def test_any_query_is_answered_without_a_server_error(app: Flask, world: World, table: str,
                                                      query: dict[str, str]) -> None:
    query.setdefault("device", "D1")
    response = app.test_client().get(f"/api/v2/data/{table}", query_string=query,
                                     headers=world.headers())
    assert response.status_code in (200, 400, 404), (query, response.get_data(as_text=True))
    if response.status_code != 200:
        body = response.get_json()
        assert response.content_type == "application/json" and body["message"]
        assert "Traceback" not in body["message"] and "psycopg" not in body["message"]


def test_nul_characters_are_a_client_error(app: Flask, world: World) -> None:
    client = app.test_client()
    for name in ("device", "location", "select", "start_time", "local_time", "cursor", "temp"):
        query = {"device": "D1", name: "D\x001"}
        response = client.get("/api/v2/data/hourly", query_string=query, headers=world.headers())
        assert response.status_code in (400, 404), (name, response.get_data(as_text=True))
        assert response.get_json()["message"]
