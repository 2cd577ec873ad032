"""Tenant filter bypass (reliability plan S3): org B's caller names org A's objects every way a
query string allows (foreign-key style parameters, repeated parameters mixing A and B, lists,
case and whitespace variants, ids in bodies) and sees nothing of A's: only B's own data, or a
400/404. The authorization matrix (tests/access/test_matrix.py) covers the plain forms.
"""

from __future__ import annotations

from typing import Any

import pytest
from flask.testing import FlaskClient

from shared.columns import TABLES
from tests.support.access_world import World, apikey, basic


def _a_markers(world: World) -> list[str]:
    return [world.dev_a, world.dev_a_idle, str(world.loc_a), str(world.org_a), str(world.a1),
            str(world.a2)]


def _assert_nothing_of_a(r: Any, world: World, what: str) -> None:
    assert r.status_code < 500, (what, r.status_code)
    assert r.status_code in (200, 400, 404), (what, r.status_code, r.get_data(as_text=True))
    text = r.get_data(as_text=True)
    sent = what.split(" ", 1)[-1]
    for marker in _a_markers(world):
        # An error message may quote what B sent; anything else of A's is a leak.
        if marker in text and marker not in sent:
            raise AssertionError(f"{what}: {marker} of org A in the answer: {text[:300]}")
    if r.status_code == 200 and r.is_json:
        body = r.get_json()
        rows = body if isinstance(body, list) else body.get("items", []) if isinstance(
            body, dict) else []
        for row in rows:
            if isinstance(row, dict):
                assert row.get("device") not in (world.dev_a, world.dev_a_idle), (what, row)
                assert row.get("location") != str(world.loc_a), (what, row)
                assert row.get("org_id") in (None, str(world.org_b)), (what, row)


@pytest.mark.parametrize("who", ["basic", "key"])
def test_collections_ignore_foreign_filters(client: FlaskClient, world: World, who: str) -> None:
    headers = basic("b1@b.example") if who == "basic" else apikey(world.keys["b_all"])
    a = {"org": str(world.org_a), "dev": world.dev_a, "loc": str(world.loc_a),
         "user": str(world.a1)}
    queries = [f"organization_id={a['org']}", f"org_id={a['org']}", f"org={a['org']}",
               f"owner_id={a['user']}", f"user_id={a['user']}", f"device_id={a['dev']}",
               f"device={a['dev']}", f"location_id={a['loc']}", f"location={a['loc']}",
               f"id={a['loc']}", f"ids={a['loc']},{world.loc_b}", f"name={a['dev']}"]
    for collection in ("/api/v2/devices", "/api/v2/locations", "/api/v2/locations/summary",
                       "/api/v2/apikeys"):
        for query in queries:
            r = client.get(f"{collection}?{query}", headers=headers)
            _assert_nothing_of_a(r, world, f"{collection}?{query}")
            if r.status_code == 200 and collection != "/api/v2/apikeys":
                # B's own objects are still there: the filter did not empty the answer.
                assert world.dev_b in r.get_data(as_text=True) or str(world.loc_b) in \
                    r.get_data(as_text=True), (collection, query)


@pytest.mark.parametrize("table", list(TABLES))
def test_data_with_mixed_and_repeated_ids(client: FlaskClient, world: World, table: str) -> None:
    headers = apikey(world.keys["b_all"])
    a_dev, b_dev, a_loc, b_loc = world.dev_a, world.dev_b, str(world.loc_a), str(world.loc_b)
    queries = [
        f"device={a_dev}&device={b_dev}", f"device={b_dev}&device={a_dev}",
        f"device={a_dev},{b_dev}", f"device={b_dev},{a_dev}", f"device={a_dev.lower()}",
        f"device=%20{a_dev}%20", f"device={a_dev}%00", f"device[]={a_dev}",
        f"location={a_loc}&location={b_loc}", f"location={b_loc}&location={a_loc}",
        f"location={a_loc},{b_loc}", f"location={a_loc.upper()}", f"location={{{a_loc}}}",
        "location=North%20field",  # A's location by name
        f"device={b_dev}&location={a_loc}", f"device={a_dev}&location={b_loc}",
        f"device={b_dev}&org_id={world.org_a}", f"device={b_dev}&device_id={a_dev}",
        f"location={b_loc}&location_id={a_loc}",
    ]
    for query in queries:
        r = client.get(f"/api/v2/data/{table}?{query}", headers=headers)
        _assert_nothing_of_a(r, world, f"data/{table} {query}")


def test_sequential_and_guessable_ids_show_nothing(client: FlaskClient, world: World) -> None:
    """B walking small integers, A's name pattern and nil/max UUIDs finds nothing of A's."""
    headers = apikey(world.keys["b_all"])
    for i in range(1, 21):
        for path in (f"/api/v2/devices/{i}", f"/api/v2/locations/{i}",
                     f"/api/v2/devices/A{i:06d}", f"/api/v2/devices/A0001{i:02d}"):
            r = client.get(path, headers=headers)
            _assert_nothing_of_a(r, world, path)
            assert r.status_code in (400, 404), (path, r.status_code)
    for uid in ("00000000-0000-0000-0000-000000000000", "ffffffff-ffff-ffff-ffff-ffffffffffff"):
        r = client.get(f"/api/v2/locations/{uid}", headers=headers)
        assert r.status_code == 404


def test_key_ids_in_bodies_do_not_reach_other_users(client: FlaskClient, world: World) -> None:
    """B's user changing its own key with A's ids in the body: refused, A untouched."""
    b = basic("b1@b.example")
    own = str(world.key_ids["b_all"])
    for body in ({"id": str(world.key_ids["all"])}, {"user_id": str(world.a1)},
                 {"org_id": str(world.org_a)}, {"created_by": str(world.a1)}):
        r = client.put(f"/api/v2/apikeys/{own}", headers=b, json=body)
        assert r.status_code == 400, (body, r.status_code)
    listed = client.get("/api/v2/apikeys", headers=apikey(world.keys["all"])).get_json()
    assert str(world.key_ids["all"]) in {k["id"] for k in listed}
    assert all(k["created_by"] == str(world.a1) for k in listed)
