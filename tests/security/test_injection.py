"""Injection surfaces (reliability plan S18): hostile strings in every parameter that reaches SQL
or a parser never give a 5xx, never show database or Python error text, and never widen what
the caller sees.

Each parameter of `/api/v2/data/{table}` (device, location, select, order, local_time,
start_time, end_time, cursor, limit, the unit parameters), the path parameters of the object
routes and the paging parameters of the collections get Hypothesis-generated text (any code
point, NUL included) mixed with classic SQL, path and format-string payloads. Org B's caller
sends A's identifiers wrapped in the same payloads and must see none of A's rows.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import quote, urlsplit

import pytest
from flask.testing import FlaskClient
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.support.access_world import World, apikey
from tests.support.figures import Figures

EXAMPLES = 60
PAYLOADS = [
    "' OR '1'='1", "' OR 1=1--", "\" OR \"\"=\"", "A000101' --",
    "A000101'; DROP TABLE calibrated;--",
    "1; SELECT pg_sleep(5)--", "') UNION SELECT password_hash FROM users--", "$$; SELECT 1; $$",
    "%", "_", "%%", "\\", "\\'", "'", "\"", ";", "--", "/*", "*/", "\x00", "A000101\x00",
    "../../../../etc/passwd", "%s%s%s%n", "{0.__class__}", "${jndi:ldap://x}", "<script>",
    "NaN", "Infinity", "-0", "1e309", "99999999999999999999999", "-1", "0x7fffffff",
    "time", "time desc", "time; DROP", "tair,(SELECT 1)", "*", "tair,*", "device,location",
    "pg_catalog.pg_user", "America/../../etc", "Etc/GMT+99", "+99:99", "UTC'--", "posix/UTC",
    "2024-07-01T00:00:00Z' OR '1'='1", "2024-13-45", "0000-00-00", "9999-12-31T23:59:59Z",
    "x" * 5000, "é" * 300, "\u202e", "\ud7ff", "\U0010ffff",
]
HOSTILE = st.one_of(st.sampled_from(PAYLOADS), st.text(max_size=60),
                    st.builds(lambda a, b: a + b, st.sampled_from(PAYLOADS), st.text(max_size=20)))
# Text only the database driver or Python would put in a body: must never reach a client.
LEAK_MARKERS = [
    "syntax error", "LINE 1", "psycopg", "Traceback", "File \"", "pg_catalog", "relation \"",
    "column \"", "current transaction is aborted", "unterminated quoted", "NUL (0x00)",
    "invalid input syntax", "SQLSTATE", "sqlalchemy", "KeyError", "TypeError", "ValueError",
    "AttributeError", "UnicodeEncodeError", "Internal Server Error",
]
DATA_PARAMS = ["device", "location", "select", "order", "local_time", "start_time", "end_time",
               "cursor", "limit", "temp", "pres", "size", "ratio", "speed"]
_seen: dict[str, int] = {"requests": 0, "server_errors": 0}


def _check(response: Any, sent: str, what: str) -> None:
    _seen["requests"] += 1
    if response.status_code >= 500:
        _seen["server_errors"] += 1
    assert response.status_code < 500, (what, repr(sent)[:200],
                                        response.get_data(as_text=True)[:300])
    if 300 <= response.status_code < 400:
        # werkzeug's trailing-slash redirect (an empty last segment): never off this host.
        location = urlsplit(response.headers["Location"])
        assert location.netloc in ("", "localhost"), (what, response.headers["Location"])
        return
    assert response.mimetype == "application/json", (what, response.mimetype)
    text = response.get_data(as_text=True)
    for marker in LEAK_MARKERS:
        if marker.lower() in text.lower() and marker.lower() not in sent.lower():
            raise AssertionError(f"{what}: {marker!r} in the answer to {sent!r:.100}: {text[:300]}")


def _rows(response: Any) -> list[dict[str, Any]]:
    body = response.get_json()
    return body if isinstance(body, list) else []


SUPPRESS = settings(max_examples=EXAMPLES, deadline=None, database=None, derandomize=True,
                    suppress_health_check=[HealthCheck.function_scoped_fixture,
                                           HealthCheck.too_slow])


@pytest.mark.parametrize("param", DATA_PARAMS)
def test_data_parameters(client: FlaskClient, world: World, param: str) -> None:
    key = apikey(world.keys["all"])

    @SUPPRESS
    @given(value=HOSTILE)
    def probe(value: str) -> None:
        query = {"device": world.dev_a, param: value}
        r = client.get("/api/v2/data/calibrated", query_string=query, headers=key)
        _check(r, value, f"data?{param}")
        # Whatever the value, rows are A's own device's.
        if r.status_code == 200:
            assert {row.get("device", world.dev_a) for row in _rows(r)} <= {world.dev_a}

    probe()


@pytest.mark.parametrize("template", [
    "/api/v2/devices/{}", "/api/v2/locations/{}", "/api/v2/schemas/{}", "/api/v2/data/{}",
    "/api/v2/apikeys/{}"])
def test_path_parameters(client: FlaskClient, world: World, template: str) -> None:
    from tests.support.access_world import basic

    headers = basic("a1@a.example") if "apikeys" in template else apikey(world.keys["all"])

    @SUPPRESS
    @given(value=HOSTILE)
    def probe(value: str) -> None:
        path = template.format(quote(value, safe=""))
        if "apikeys" in template:
            r = client.put(path, headers=headers, json={"name": "x"})
        else:
            r = client.get(path + ("?device=" + world.dev_a if "data" in template else ""),
                           headers=headers)
        _check(r, value, template)

    probe()


@pytest.mark.parametrize("collection", ["/api/v2/devices", "/api/v2/locations",
                                        "/api/v2/locations/summary"])
def test_paging_parameters(client: FlaskClient, world: World, collection: str) -> None:
    key = apikey(world.keys["all"])

    @SUPPRESS
    @given(limit=HOSTILE, page=HOSTILE)
    def probe(limit: str, page: str) -> None:
        r = client.get(collection, query_string={"limit": limit, "page": page}, headers=key)
        _check(r, limit + page, collection)

    probe()


def test_org_b_cannot_widen_its_view_with_payloads(client: FlaskClient, world: World) -> None:
    """B's key with A's device and location inside injection payloads: never A's rows."""
    key = apikey(world.keys["b_all"])
    a_ids = [world.dev_a, str(world.loc_a)]
    wrappers = ["{}", "{}'--", "{}' OR '1'='1", "' OR device='{}", "{},B000201", "{}%",
                "{}\x00", "{} ", " {}", "{}'||'", "B000201' UNION SELECT * FROM calibrated "
                "WHERE device='{}"]
    for table in ("calibrated", "hourly", "local_hourly", "daily", "health"):
        for param, ident in (("device", a_ids[0]), ("location", a_ids[1])):
            for wrapper in wrappers:
                value = wrapper.format(ident)
                r = client.get(f"/api/v2/data/{table}", query_string={param: value},
                               headers=key)
                _check(r, value, f"B data/{table}?{param}")
                assert r.status_code in (400, 404), (table, param, value, r.status_code)
                body = r.get_data(as_text=True).replace(value, "")
                if param == "device" and "," in value:
                    # A device list's 404 names the listed device it could not find, as the
                    # one-device 404 does: the caller's own input, answered like B alone.
                    alone = client.get(f"/api/v2/data/{table}", headers=key,
                                       query_string={param: value.split(",")[0]})
                    assert r.get_data(as_text=True) == alone.get_data(as_text=True)
                    continue
                assert ident not in body


def test_sql_metacharacters_are_data_not_code(client: FlaskClient, world: World) -> None:
    """A LIKE wildcard or a quote is matched literally: '%' is not 'every device'."""
    key = apikey(world.keys["all"])
    for value in ("%", "A00010_", "A%", "*"):
        r = client.get("/api/v2/data/calibrated", query_string={"device": value}, headers=key)
        assert r.status_code == 404, (value, r.status_code)
        r = client.get(f"/api/v2/devices/{quote(value, safe='')}", headers=key)
        assert r.status_code == 404, (value, r.status_code)


def test_record_figures(figures: Figures) -> None:
    """Runs last in this module (pytest keeps file order): the totals of the probes above."""
    if not _seen["requests"]:
        pytest.skip("run with the probes above to record their totals")
    figures.record("s18_requests", _seen["requests"], section="security",
                   title="Injection probes sent (S18)", target="recorded",
                   source="tests/security/test_injection.py")
    figures.record("s18_5xx", _seen["server_errors"], section="security",
                   title="Injection probes answered 5xx", target="0",
                   source="tests/security/test_injection.py")
    assert _seen["server_errors"] == 0
