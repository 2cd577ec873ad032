"""`/api/v2/annotations` against the real database: create, read, list with every filter and
paging, update, delete, CSV (formula-safe), scopes, another organisation's objects as 404, and
bad or hostile input as a 400 naming the field."""

from __future__ import annotations

import csv
import io
from typing import Any

import psycopg
import pytest
from flask.testing import FlaskClient

from people import accounts
from tests.support.data_world import T0, World

URL = "/api/v2/annotations"


@pytest.fixture(scope="module")
def keys(world: World) -> dict[str, str]:
    """API keys: org A read+write, read only, data only; org B read+write."""
    with psycopg.connect(world.url) as conn:
        users = dict(conn.execute("SELECT email, id FROM users").fetchall())
        a1, b1 = users["a1@a.example"], users["b1@b.example"]
        conn.execute("UPDATE users SET name = 'Ann Author' WHERE id = %s", (a1,))
        made = {
            "a": accounts.create_api_key(conn, user=a1, scopes=[
                "annotations:read", "annotations:write"])["apikey"],
            "a_read": accounts.create_api_key(conn, user=a1, scopes=["annotations:read"])["apikey"],
            "a_data": accounts.create_api_key(conn, user=a1, scopes=["data:read"])["apikey"],
            "b": accounts.create_api_key(conn, user=b1, scopes=[
                "annotations:read", "annotations:write"])["apikey"],
        }
        conn.commit()
    return made


def _h(keys: dict[str, str], who: str = "a", **extra: str) -> dict[str, str]:
    return {"Authorization": f"Apikey {keys[who]}", **extra}


def _post(client: FlaskClient, keys: dict[str, str], body: Any, who: str = "a") -> Any:
    return client.post(URL, json=body, headers=_h(keys, who))


def _created(client: FlaskClient, keys: dict[str, str], **body: Any) -> dict[str, Any]:
    response = _post(client, keys, body)
    assert response.status_code == 201, response.get_data(as_text=True)
    return dict(response.get_json())


def _error(response: Any, code: int) -> dict[str, Any]:
    assert response.status_code == code, response.get_data(as_text=True)
    assert response.content_type == "application/json"
    return dict(response.get_json())


def _listed(client: FlaskClient, keys: dict[str, str], who: str = "a", **params: Any
            ) -> dict[str, Any]:
    response = client.get(URL, query_string=params, headers=_h(keys, who))
    assert response.status_code == 200, response.get_data(as_text=True)
    return dict(response.get_json())


def test_create_read_update_delete(client: FlaskClient, keys: dict[str, str],
                                   world: World) -> None:
    made = _created(client, keys, device="D1", start_time="2024-07-01T06:00:00Z",
                    text="Sprayed copper", tags=["spray", "copper", "spray"])
    assert made["device"] == "D1" and made["location"] is None
    assert made["start_time"] == "2024-07-01T06:00:00.000000+00:00" and made["end_time"] is None
    assert made["tags"] == ["spray", "copper"]  # once each, in the order given
    assert made["author"] == "Ann Author" and made["author_id"]
    one = client.get(f"{URL}/{made['id']}", headers=_h(keys, "a_read"))
    assert one.status_code == 200 and one.get_json() == made

    changed = client.put(f"{URL}/{made['id']}", headers=_h(keys), json={
        "end_time": "2024-07-01T08:00:00Z", "text": "Sprayed copper, 2 h"})
    assert changed.status_code == 200, changed.get_data(as_text=True)
    body = changed.get_json()
    assert body["end_time"] == "2024-07-01T08:00:00.000000+00:00"
    assert body["text"] == "Sprayed copper, 2 h" and body["tags"] == ["spray", "copper"]
    assert body["updated"] >= made["updated"]
    # Back to an instant; then a range ending before its start is refused, naming the field.
    assert client.put(f"{URL}/{made['id']}", headers=_h(keys),
                      json={"end_time": None}).get_json()["end_time"] is None
    bad = _error(client.put(f"{URL}/{made['id']}", headers=_h(keys),
                            json={"end_time": "2024-07-01T05:00:00Z"}), 400)
    assert "end_time" in bad["message"]
    assert "device" in _error(client.put(f"{URL}/{made['id']}", headers=_h(keys),
                                         json={"device": "D2"}), 400)["message"]

    assert client.delete(f"{URL}/{made['id']}", headers=_h(keys)).status_code == 204
    _error(client.get(f"{URL}/{made['id']}", headers=_h(keys)), 404)
    _error(client.delete(f"{URL}/{made['id']}", headers=_h(keys)), 404)


def test_list_filters_overlap_and_paging(client: FlaskClient, keys: dict[str, str],
                                         world: World) -> None:
    loc = str(world.ny)
    ids = {
        "instant": _created(client, keys, device="D2", start_time="2024-07-02T12:00:00Z",
                            text="gate left open", tags=["visit"])["id"],
        "range": _created(client, keys, device="D2", start_time="2024-07-02T00:00:00Z",
                          end_time="2024-07-03T00:00:00Z", text="irrigation",
                          tags=["water", "visit"])["id"],
        "later": _created(client, keys, device="D2", start_time="2024-07-05T00:00:00Z",
                          text="harvest", tags=["harvest"])["id"],
        "place": _created(client, keys, location=loc, start_time="2024-07-02T18:00:00Z",
                          text="hail at the field", tags=["weather"])["id"],
    }
    every = _listed(client, keys, device="D2")
    assert [i["id"] for i in every["items"]] == [ids["range"], ids["instant"], ids["later"]]
    assert every["total"] == 3 and every["pages"] == 1
    # A window overlapping only the range's end: the range is listed, the later instant not.
    window = _listed(client, keys, device="D2", start_time="2024-07-02T23:00:00Z",
                     end_time="2024-07-04T00:00:00Z")
    assert [i["id"] for i in window["items"]] == [ids["range"]]
    # Ends inclusive: an instant exactly at the window's end is in it.
    edge = _listed(client, keys, device="D2", start_time="2024-07-04T00:00:00Z",
                   end_time="2024-07-05T00:00:00Z")
    assert [i["id"] for i in edge["items"]] == [ids["later"]]
    assert [i["id"] for i in _listed(client, keys, device="D2", tag="visit,water")["items"]
            ] == [ids["range"]]
    assert [i["id"] for i in _listed(client, keys, location=loc)["items"]] == [ids["place"]]
    first = _listed(client, keys, device="D2", limit=2, page=1)
    second = _listed(client, keys, device="D2", limit=2, page=2)
    assert first["pages"] == 2 and [i["id"] for i in first["items"] + second["items"]] == [
        ids["range"], ids["instant"], ids["later"]]
    _error(client.get(URL, query_string={"device": "D2", "limit": 2, "page": 3},
                      headers=_h(keys)), 404)
    _error(client.get(URL, query_string={"device": "nope"}, headers=_h(keys)), 404)
    _error(client.get(URL, query_string={"location": "not-a-uuid"}, headers=_h(keys)), 404)
    assert "start_time" in _error(client.get(URL, query_string={"start_time": "yesterday"},
                                             headers=_h(keys)), 400)["message"]


def test_csv_is_formula_safe(client: FlaskClient, keys: dict[str, str]) -> None:
    made = _created(client, keys, device="D3", start_time="2024-07-01T00:00:00Z",
                    end_time="2024-07-01T01:00:00Z", text='=HYPERLINK("http://x","y")',
                    tags=["@cmd", "ok"])
    for how in ({"query_string": {"device": "D3", "format": "csv"}},
                {"query_string": {"device": "D3"}, "headers": {"Accept": "text/csv"}}):
        headers = {**_h(keys), **how.get("headers", {})}
        response = client.get(URL, query_string=how["query_string"], headers=headers)
        assert response.status_code == 200, response.get_data(as_text=True)
        assert response.content_type.startswith("text/csv")
        assert "attachment" in response.headers["Content-Disposition"]
        assert response.headers["X-Total"] == "1"
        lines = list(csv.DictReader(io.StringIO(response.get_data(as_text=True))))
        assert len(lines) == 1
        row = lines[0]
        assert row["id"] == made["id"] and row["device"] == "D3"
        assert row["text"] == "'" + '=HYPERLINK("http://x","y")'
        assert row["tags"] == "'@cmd,ok"
        assert row["end_time"] == made["end_time"] and row["location"] == ""
    # JSON keeps the text exactly as written.
    assert _listed(client, keys, device="D3")["items"][0]["text"] == made["text"]


def test_scopes(client: FlaskClient, keys: dict[str, str]) -> None:
    assert "annotations:read" in _error(client.get(URL, headers=_h(keys, "a_data")),
                                        403)["message"]
    denied = _post(client, keys, {"device": "D1", "start_time": "2024-07-01", "text": "x"},
                   who="a_read")
    assert "annotations:write" in _error(denied, 403)["message"]
    _error(client.get(URL), 401)


def test_another_organisation_is_404(client: FlaskClient, keys: dict[str, str],
                                     world: World) -> None:
    mine = _created(client, keys, device="D1", start_time="2024-07-01T03:00:00Z", text="mine")
    for method in ("get", "delete"):
        theirs = getattr(client, method)(f"{URL}/{mine['id']}", headers=_h(keys, "b"))
        missing = getattr(client, method)(f"{URL}/00000000-0000-0000-0000-000000000000",
                                          headers=_h(keys, "b"))
        assert _error(theirs, 404)["message"].replace(mine["id"], "X") == _error(
            missing, 404)["message"].replace("00000000-0000-0000-0000-000000000000", "X")
    _error(client.put(f"{URL}/{mine['id']}", headers=_h(keys, "b"), json={"text": "theirs"}),
           404)
    assert mine["id"] not in {i["id"] for i in _listed(client, keys, who="b")["items"]}
    # B cannot annotate A's device or location: the same 400 as for one that does not exist.
    foreign = _error(_post(client, keys, {"device": "D1", "start_time": "2024-07-01",
                                          "text": "x"}, who="b"), 400)
    absent = _error(_post(client, keys, {"device": "ZZ9", "start_time": "2024-07-01",
                                         "text": "x"}, who="b"), 400)
    assert foreign["message"].replace("D1", "X") == absent["message"].replace("ZZ9", "X")
    _error(_post(client, keys, {"location": str(world.ny), "start_time": "2024-07-01",
                                "text": "x"}, who="b"), 400)
    _error(client.get(URL, query_string={"device": "D1"}, headers=_h(keys, "b")), 404)
    assert client.get(f"{URL}/{mine['id']}", headers=_h(keys)).get_json()["text"] == "mine"


@pytest.mark.parametrize(("body", "field"), [
    ({"start_time": "2024-07-01", "text": "no subject"}, "device"),
    ({"device": "D1", "location": "00000000-0000-0000-0000-000000000000",
      "start_time": "2024-07-01", "text": "both"}, "device"),
    ({"device": "D1", "text": "no time"}, "start_time"),
    ({"device": "D1", "start_time": "soon", "text": "bad time"}, "start_time"),
    ({"device": "D1", "start_time": "3024-01-01", "text": "far"}, "start_time"),
    ({"device": "D1", "start_time": "2024-07-02", "end_time": "2024-07-01", "text": "x"},
     "end_time"),
    ({"device": "D1", "start_time": "2024-07-01"}, "text"),
    ({"device": "D1", "start_time": "2024-07-01", "text": ""}, "text"),
    ({"device": "D1", "start_time": "2024-07-01", "text": "x" * 2001}, "text"),
    ({"device": "D1", "start_time": "2024-07-01", "text": "nul\x00"}, "text"),
    ({"device": "D1", "start_time": "2024-07-01", "text": "x", "tags": ["t"] * 21}, "tags"),
    ({"device": "D1", "start_time": "2024-07-01", "text": "x", "tags": ["a,b"]}, "tags"),
    ({"device": "D1", "start_time": "2024-07-01", "text": "x", "tags": ["y" * 65]}, "tags"),
    ({"device": "D1", "start_time": "2024-07-01", "text": "x", "tags": "frost"}, "tags"),
    ({"device": "D1", "start_time": "2024-07-01", "text": "x", "author": "me"}, "author"),
    ({"device": "D1", "start_time": "2024-07-01", "text": "x", "colour": "red"}, "colour"),
    ({"location": "nope", "start_time": "2024-07-01", "text": "x"}, "location"),
    ({"device": 7, "start_time": "2024-07-01", "text": "x"}, "device"),
])
def test_bad_input_names_the_field(client: FlaskClient, keys: dict[str, str],
                                   body: dict[str, Any], field: str) -> None:
    found = _error(_post(client, keys, body), 400)
    assert field in found["message"], found


def test_bad_bodies(client: FlaskClient, keys: dict[str, str]) -> None:
    assert client.post(URL, data="text=x", headers=_h(keys, **{
        "Content-Type": "application/x-www-form-urlencoded"})).status_code == 415
    _error(client.post(URL, data=b"[1]", headers=_h(keys, **{
        "Content-Type": "application/json"})), 400)
    _error(client.post(URL, data=b"{", headers=_h(keys, **{
        "Content-Type": "application/json"})), 400)
    # A body past the app's 1 MiB limit is refused before it is parsed.
    huge = client.post(URL, data=b'{"text": "' + b"x" * (2 << 20) + b'"}',
                       headers=_h(keys, **{"Content-Type": "application/json"}))
    assert huge.status_code == 413
    assert "limit" in _error(client.get(URL, query_string={"limit": 10001},
                                        headers=_h(keys)), 400)["message"]
    assert "tag" in _error(client.get(URL, query_string={"tag": ",".join(
        str(i) for i in range(30))}, headers=_h(keys)), 400)["message"]


def test_table_bounds_hold_without_the_api(world: World) -> None:
    """The table's CHECKs refuse hostile sizes even from a writer that skips the API."""
    with psycopg.connect(world.url) as conn:
        org, dev = conn.execute("SELECT org_id, id FROM devices WHERE name = 'D1'").fetchone()
    for text, tags in (("x" * 2001, []), ("ok", ["t"] * 21), ("", [])):
        with psycopg.connect(world.url) as conn, pytest.raises(psycopg.errors.CheckViolation):
            conn.execute("INSERT INTO annotations (org_id, device_id, start_time, text, tags)"
                         " VALUES (%s, %s, %s, %s, %s)", (org, dev, T0, text, tags))
