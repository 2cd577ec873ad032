"""The app around the endpoints: /schemas, the OpenAPI document and docs page, CORS, and the
one JSON error body for every 4xx/5xx."""

from __future__ import annotations

from collections.abc import Iterator

import psycopg
import pytest
from flask import Flask
from flask.testing import FlaskClient

from serve.errors import Blueprint
from serve.pool import pool
from shared.columns import TABLES
from shared.errors import Conflict, TooManyRequests
from tests.support.apps import close_app, make_app
from tests.support.data_world import World


def assert_error(response, code: int, status: str) -> dict:  # type: ignore[no-untyped-def]
    assert response.status_code == code
    assert response.headers["Content-Type"] == "application/json"
    body = response.get_json()
    assert body["code"] == code and body["status"] == status and body["message"]
    assert list(body)[:3] == ["code", "status", "message"]
    return body


# ---- /schemas ----------------------------------------------------------------------------------

def test_schemas_lists_tables(client: FlaskClient, world: World) -> None:
    response = client.get("/api/v2/schemas", headers=world.headers())
    assert response.status_code == 200 and response.content_type == "application/json"
    assert response.get_json() == ["calibrated", "hourly", "local_hourly", "daily", "health",
                                   "water_balance"]


@pytest.mark.parametrize("table", list(TABLES))
def test_schema_of_each_table_in_registry_order_with_key_order(
        client: FlaskClient, world: World, table: str) -> None:
    response = client.get(f"/api/v2/schemas/{table}", headers=world.headers())
    text = response.get_data(as_text=True)
    assert text.startswith('[{"column_name":"time","data_type":"timestamp with time zone",'
                           '"description":')
    got = response.get_json()
    assert [c["column_name"] for c in got] == list(TABLES[table].column_names)
    # Exactly the spec's three keys by default: published clients assert them (issue 30).
    assert all(list(c) == ["column_name", "data_type", "description"] for c in got)


@pytest.mark.parametrize("query", ["include=precision,unit", "include=unit,precision",
                                   "include=precision&include=unit", "include=Precision, unit"])
def test_schema_precision_and_unit_are_opt_in(
        client: FlaskClient, world: World, query: str) -> None:
    got = client.get(f"/api/v2/schemas/hourly?{query}", headers=world.headers()).get_json()
    assert all(list(c) == ["column_name", "data_type", "description", "precision", "unit"]
               for c in got)
    one = client.get("/api/v2/schemas/hourly?include=unit", headers=world.headers()).get_json()
    assert [list(c) for c in one][0] == ["column_name", "data_type", "description", "unit"]


def test_schema_include_names_an_unknown_key(client: FlaskClient, world: World) -> None:
    body = assert_error(client.get("/api/v2/schemas/hourly?include=precision,scale",
                                   headers=world.headers()), 400, "Bad Request")
    assert "include" in body["message"] and "'scale'" in body["message"]


def test_daily_schema_has_the_documented_columns(client: FlaskClient, world: World) -> None:
    got = {c["column_name"]: c for c in client.get(
        "/api/v2/schemas/daily?include=precision,unit", headers=world.headers()).get_json()}
    assert got["create_time"]["data_type"] == "timestamp with time zone"
    assert got["crop_water_demand"]["data_type"] == "real"
    assert "mm/day" in got["crop_water_demand"]["description"]
    assert (got["crop_water_demand"]["precision"], got["crop_water_demand"]["unit"]) == (2, "mm")
    assert (got["mean_rh"]["precision"], got["mean_rh"]["unit"]) == (2, "pct")
    assert (got["maxt_time"]["precision"], got["maxt_time"]["unit"]) == (None, None)


def test_schemas_errors(client: FlaskClient, world: World) -> None:
    assert_error(client.get("/api/v2/schemas/nope", headers=world.headers()), 404, "Not Found")
    assert_error(client.get("/api/v2/schemas"), 401, "Unauthorized")
    assert_error(client.get("/api/v2/schemas", headers=world.headers("a_devices")), 403,
                 "Forbidden")


# ---- OpenAPI and docs ------------------------------------------------------------------------

def test_openapi_document_describes_the_data_endpoint(client: FlaskClient) -> None:
    response = client.get("/api/v2/openapi.json")
    assert response.status_code == 200
    spec = response.get_json()
    assert spec["openapi"].startswith("3.")
    path = spec["paths"]["/api/v2/data/{table}"]
    data = path["get"]
    names = {p["name"] for p in data["parameters"] + path.get("parameters", [])}
    assert {"device", "location", "select", "start_time", "end_time", "limit", "cursor",
            "order", "local_time", "temp", "pres", "size", "ratio", "speed", "table"} <= names
    assert "400" in data["responses"] and "422" not in data["responses"]
    assert set(data["responses"]["200"]["content"]) == {"application/json", "text/csv"}
    assert "/api/v2/schemas/{table}" in spec["paths"]


def test_docs_page_uses_local_assets(client: FlaskClient) -> None:
    page = client.get("/api/v2/doc")
    assert page.status_code == 200
    html = page.get_data(as_text=True)
    assert "/api/v2/doc/assets/swagger-ui-bundle.js" in html
    assert "http://" not in html and "https://" not in html  # nothing from a CDN
    for asset in ("swagger-ui-bundle.js", "swagger-ui.css", "swagger-ui-standalone-preset.js"):
        response = client.get(f"/api/v2/doc/assets/{asset}")
        assert response.status_code == 200 and len(response.data) > 1000
        response.close()


# ---- CORS --------------------------------------------------------------------------------------

def test_cors_preflight_needs_no_credentials(client: FlaskClient) -> None:
    response = client.options("/api/v2/data/hourly", headers={
        "Origin": "https://example.org", "Access-Control-Request-Method": "GET",
        "Access-Control-Request-Headers": "Authorization"})
    assert response.status_code == 200
    assert response.headers["Access-Control-Allow-Origin"] == "*"
    assert "Authorization" in response.headers["Access-Control-Allow-Headers"]
    assert "GET" in response.headers["Access-Control-Allow-Methods"]


def test_cors_origin_comes_from_settings(world: World) -> None:
    app = make_app(world.url, cors_origin="https://farm.example")
    try:
        response = app.test_client().get("/api/v2/schemas", headers=world.headers())
        assert response.headers["Access-Control-Allow-Origin"] == "https://farm.example"
        assert "Origin" in response.headers["Vary"]
    finally:
        close_app(app)


# ---- errors ------------------------------------------------------------------------------------

def test_unknown_route_and_method(client: FlaskClient, world: World) -> None:
    assert_error(client.get("/api/v2/nothing-here", headers=world.headers()), 404, "Not Found")
    # `/` is the landing page (serve/web); other paths outside the API are JSON 404s too.
    assert_error(client.get("/nothing-here", headers=world.headers()), 404, "Not Found")
    # Under /dashboard/ the dashboard's own HTML 404 page (tests/web/test_pages.py).
    page = client.get("/dashboard/nothing-here")
    assert page.status_code == 404 and page.mimetype == "text/html"
    body = assert_error(client.delete("/api/v2/data/hourly", headers=world.headers()), 405,
                        "Method Not Allowed")
    assert body["message"]
    response = client.put("/api/v2/schemas", headers=world.headers())
    assert_error(response, 405, "Method Not Allowed")
    assert "GET" in response.headers["Allow"]


def test_401_carries_a_challenge(client: FlaskClient) -> None:
    response = client.get("/api/v2/data/hourly?device=D1")
    assert_error(response, 401, "Unauthorized")
    assert response.headers["WWW-Authenticate"].startswith("Basic")
    assert response.headers["Access-Control-Allow-Origin"] == "*"


@pytest.fixture(scope="module")
def faulty_app(world: World) -> Iterator[Flask]:
    """The app plus a blueprint whose views fail in the ways the handlers must cover."""
    from serve.auth import public

    app = make_app(world.url)
    blp = Blueprint("faults", __name__, url_prefix="/faults")

    @blp.route("/boom")
    @public
    def boom():  # type: ignore[no-untyped-def]
        raise RuntimeError("secret internal detail")

    @blp.route("/timeout")
    @public
    def timeout():  # type: ignore[no-untyped-def]
        with pool(app).connection() as conn:
            conn.execute("SET LOCAL statement_timeout = 10")
            conn.execute("SELECT pg_sleep(1)")

    @blp.route("/conflict")
    @public
    def conflict():  # type: ignore[no-untyped-def]
        raise Conflict("already there")

    @blp.route("/busy")
    @public
    def busy():  # type: ignore[no-untyped-def]
        raise TooManyRequests("slow down", retry_after=7)

    app.register_blueprint(blp)
    try:
        yield app
    finally:
        close_app(app)


def test_unexpected_exception_is_a_json_500_without_details(faulty_app: Flask) -> None:
    response = faulty_app.test_client().get("/faults/boom")
    body = assert_error(response, 500, "Internal Server Error")
    assert "secret" not in response.get_data(as_text=True) and "Traceback" not in body["message"]


def test_statement_timeout_is_a_503(faulty_app: Flask) -> None:
    response = faulty_app.test_client().get("/faults/timeout")
    assert_error(response, 503, "Service Unavailable")
    assert response.headers["Retry-After"]


def test_service_errors_map_to_statuses(faulty_app: Flask) -> None:
    client = faulty_app.test_client()
    assert_error(client.get("/faults/conflict"), 409, "Conflict")
    response = client.get("/faults/busy")
    assert_error(response, 429, "Too Many Requests")
    assert response.headers["Retry-After"] == "7"


@pytest.mark.parametrize("exc", [
    psycopg.OperationalError("connection refused"),
    __import__("psycopg_pool").PoolTimeout("couldn't get a connection after 30.00 sec"),
], ids=["operational", "pool_timeout"])
def test_database_unavailable_is_a_503(faulty_app: Flask, exc: Exception) -> None:
    from serve import errors

    with faulty_app.test_request_context("/"):
        response = errors.handle_unexpected(exc)
    assert response.status_code == 503 and response.headers["Retry-After"]
    assert "refused" not in response.get_data(as_text=True)


def test_health_is_constant_and_public(client: FlaskClient) -> None:
    response = client.get("/api/v2/health")
    assert response.status_code == 200 and response.get_json() == {"status": "ok"}
    assert response.headers["Access-Control-Allow-Origin"] == "*"
