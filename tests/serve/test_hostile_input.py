"""Well-formed but hostile input to /data (issue 11, finding 5): extreme dates are a 400 that
states the accepted range, never a 500."""

from __future__ import annotations

import pytest
from flask.testing import FlaskClient

from shared.columns import TABLES
from tests.support.data_world import World
from tests.support.figures import Figures

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


def test_extreme_times_anywhere_figure(client: FlaskClient, world: World,
                                       figures: Figures) -> None:
    """Every table x both bounds x every extreme x JSON/CSV, plus local_time and order: the
    count of answers and of 5xx, recorded."""
    answers = five_xx = 0
    for table in TABLES:
        for param in ("start_time", "end_time"):
            for value in EXTREMES:
                for extra in ({}, {"local_time": "+14:00", "order": "desc"}):
                    for fmt in ("application/json", "text/csv"):
                        resp = client.get(f"/api/v2/data/{table}", query_string={
                            "device": "D1", param: value, **extra},
                            headers=world.headers(Accept=fmt))
                        answers += 1
                        five_xx += resp.status_code >= 500
                        assert resp.status_code == 400
    figures.record("extreme_times_5xx", f"{five_xx}/{answers}", section="security",
                   title="Extreme but well-formed start_time/end_time (year 1, 9999 with "
                         "offsets, just outside 1900..2999) on every /data table: 5xx / answers",
                   target="0 (each a 400 naming the range)",
                   source="tests/serve/test_hostile_input.py::test_extreme_times_anywhere_figure")
    assert five_xx == 0


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


# ---- CSV injection (OWASP): text cells that would start a formula ------------------------------

FORMULAS = ["=HYPERLINK(\"http://x\",\"y\")", "+1+1", "-2+3", "@SUM(A1)", "\tx", "\rx",
            "1.2.3", "a=b"]


@pytest.fixture(scope="module")
def formula_device(world: World) -> str:
    """D6: health reports whose firmware text looks like formulas, with negative numbers."""
    import psycopg

    from shared import places
    from tests.support.data_world import T0

    with psycopg.connect(world.url) as conn:
        places.register_device(conn, org=world.org_a, name="D6")
        for i, fw in enumerate(FORMULAS):
            conn.execute("INSERT INTO health (time, device, batt_pct, fw) VALUES"
                         " (%s + %s * interval '5 minutes', 'D6', %s, %s)",
                         (T0, i, -5.5 - i, fw))
        conn.commit()
    return "D6"


def test_csv_text_cells_cannot_start_a_formula(client: FlaskClient, world: World,
                                               formula_device: str, figures: Figures) -> None:
    import csv
    import io

    query = {"device": formula_device, "start_time": "2024-07-01", "select": "fw,batt_pct"}
    resp = client.get("/api/v2/data/health", query_string=query,
                      headers=world.headers(Accept="text/csv"))
    assert resp.status_code == 200
    rows = list(csv.reader(io.StringIO(resp.get_data(as_text=True), newline="")))
    assert rows[0] == ["fw", "batt_pct"]
    cells = [r[0] for r in rows[1:]]
    for cell, original in zip(cells, FORMULAS, strict=True):
        if original[0] in "=+-@\t\r":
            assert cell == "'" + original, (cell, original)
        else:
            assert cell == original
        assert cell[0] not in "=+-@\t\r"
    inert = sum(1 for c, o in zip(cells, FORMULAS, strict=True)
                if o[0] in "=+-@\t\r" and c == "'" + o)
    figures.record("csv_formula_cells_inert", f"{inert}/6", section="security",
                   title="CSV text cells starting with = + - @ tab CR served with a leading ' "
                         "(negative numbers unchanged)", target="6/6",
                   source="tests/serve/test_hostile_input.py::"
                          "test_csv_text_cells_cannot_start_a_formula")
    # Numbers, negative ones included, are left as numbers.
    assert [r[1] for r in rows[1:]] == [f"{-5.5 - i:g}" for i in range(len(FORMULAS))]
    # JSON is not a spreadsheet format: values are served as stored.
    resp = client.get("/api/v2/data/health", query_string=query, headers=world.headers())
    assert [r["fw"] for r in resp.get_json()] == FORMULAS
