"""Swagger UI at /api/v2/doc works the first time, in headless Debian Chromium against gunicorn:
the getting-started text is there, `table` is the first parameter, a bare API key pasted into
Authorize works, and a request without a key shows the JSON 401 instead of the browser taking
over with a Basic password dialog. The server side of the last two is also checked directly."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
import requests
from flask.testing import FlaskClient
from selenium.webdriver.common.by import By

from testbed.apiserver import gunicorn_api
from testbed.browser import chromium, console_errors, wait_for
from tests.support.data_world import World

DATA_OP = "#operations-data-get_api_v2_data__table_"


@pytest.fixture(scope="module")
def api_url(world: World, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    with gunicorn_api(world.url, tmp_path_factory.mktemp("swagger")) as base:
        yield base


def _param_input(driver, name: str):  # type: ignore[no-untyped-def]
    return driver.find_element(
        By.CSS_SELECTOR, f'{DATA_OP} tr[data-param-name="{name}"] input, '
                         f'{DATA_OP} tr[data-param-name="{name}"] select')


def _execute_and_read(driver) -> tuple[int, str]:  # type: ignore[no-untyped-def]
    """Click Execute (after Clear, so the answer read is the new one): (status, body)."""
    status_cell = f"{DATA_OP} .live-responses-table tr.response td.response-col_status"
    for clear in driver.find_elements(By.CSS_SELECTOR, f"{DATA_OP} button.btn-clear"):
        clear.click()
    wait_for(driver, f"!document.querySelector('{status_cell}')")
    driver.find_element(By.CSS_SELECTOR, f"{DATA_OP} button.execute").click()
    wait_for(driver, f"document.querySelector('{status_cell}')")
    status = driver.find_element(By.CSS_SELECTOR, status_cell).text
    body = driver.find_element(
        By.CSS_SELECTOR, f"{DATA_OP} .live-responses-table tr.response "
                         ".response-col_description .highlight-code pre").text
    return int(status.split()[0]), body


def test_try_it_out_first_time_with_a_bare_key(api_url: str, world: World,
                                               tmp_path: Path) -> None:
    with chromium(log_dir=tmp_path) as driver:
        driver.get(f"{api_url}/api/v2/doc")
        wait_for(driver, "document.querySelector('.swagger-ui .info .description')")
        intro = driver.find_element(By.CSS_SELECTOR, ".swagger-ui .info .description").text
        assert "Getting started" in intro and "paste your API key as it is" in intro

        # The data operation, opened: `table` is its first parameter, "Try it out" is on.
        driver.find_element(By.CSS_SELECTOR, f"{DATA_OP} .opblock-summary").click()
        wait_for(driver, f"document.querySelector('{DATA_OP} tr[data-param-name]')")
        names = [row.get_attribute("data-param-name") for row in driver.find_elements(
            By.CSS_SELECTOR, f"{DATA_OP} tr[data-param-name]")]
        assert names[:3] == ["table", "device", "location"], names
        _param_input(driver, "table").send_keys("hourly")
        _param_input(driver, "device").send_keys("D1")
        _param_input(driver, "start_time").send_keys("2024-07-01")
        _param_input(driver, "limit").send_keys("2")

        # No key yet: the page shows the JSON 401 (a Basic challenge would have put up the
        # browser's password dialog and the request would never come back to the page).
        status, body = _execute_and_read(driver)
        assert status == 401 and json.loads(body)["code"] == 401

        # Authorize with the key pasted as it is, no "Apikey " in front.
        driver.find_element(By.CSS_SELECTOR, ".swagger-ui button.authorize").click()
        wait_for(driver, "document.querySelector('.modal-ux .auth-container input')")
        container = driver.find_elements(By.CSS_SELECTOR, ".modal-ux .auth-container")[0]
        assert "apikey" in container.text
        container.find_element(By.CSS_SELECTOR, "input").send_keys(world.keys["a"])
        container.find_element(By.CSS_SELECTOR, "button.authorize").click()
        driver.find_element(By.CSS_SELECTOR, ".modal-ux button.btn-done").click()

        status, body = _execute_and_read(driver)
        assert status == 200, body
        rows = json.loads(body)
        assert [r["time"] for r in rows] == ["2024-07-01T00:00:00Z", "2024-07-01T01:00:00Z"]
        assert [r["device"] for r in rows] == ["D1", "D1"]
        # The page's own errors: none but the 401 above (and the browser's favicon probe).
        errors = [m for m in console_errors(driver) if "401" not in m and "favicon" not in m]
        assert not errors, errors


def test_bare_key_in_the_authorization_header(client: FlaskClient, world: World) -> None:
    answer = client.get("/api/v2/data/hourly?device=D1&limit=1&start_time=2024-07-01",
                        headers={"Authorization": world.keys["a"]})
    assert answer.status_code == 200 and len(answer.get_json()) == 1
    wrong = client.get("/api/v2/data/hourly?device=D1",
                       headers={"Authorization": world.keys["a"][:-2] + "xx"})
    assert wrong.status_code == 401
    assert client.get("/api/v2/data/hourly?device=D1",
                      headers={"Authorization": "notakey"}).status_code == 401
    joined = f"{world.keys['a']},{world.keys['a']}"  # two headers joined by a proxy
    assert client.get("/api/v2/data/hourly?device=D1",
                      headers={"Authorization": joined}).status_code == 400


@pytest.mark.parametrize("headers", [{"Sec-Fetch-Dest": "empty", "Sec-Fetch-Mode": "cors"},
                                     {"X-Requested-With": "XMLHttpRequest"}])
def test_script_requests_get_no_basic_challenge(api_url: str, headers: dict[str, str]) -> None:
    for auth in (None, "Basic !!!", "Token x"):
        sent = dict(headers, **({"Authorization": auth} if auth else {}))
        answer = requests.get(f"{api_url}/api/v2/data/hourly?device=D1", headers=sent,
                              timeout=30)
        assert answer.status_code == 401
        assert answer.headers["WWW-Authenticate"].startswith('Apikey realm="sds"')


def test_other_clients_keep_the_basic_challenge(api_url: str) -> None:
    answer = requests.get(f"{api_url}/api/v2/data/hourly?device=D1", timeout=30)
    assert answer.status_code == 401
    assert answer.headers["WWW-Authenticate"].startswith('Basic realm="sds"')
    navigate = requests.get(f"{api_url}/api/v2/data/hourly?device=D1", timeout=30,
                            headers={"Sec-Fetch-Dest": "document"})
    assert navigate.headers["WWW-Authenticate"].startswith("Basic")


def test_openapi_lists_path_parameters_first(client: FlaskClient) -> None:
    spec = client.get("/api/v2/openapi.json").get_json()
    for path, item in spec["paths"].items():
        assert "parameters" not in item, path
        for operation in item.values():
            names = [(p["in"], p["name"]) for p in operation.get("parameters", [])]
            ins = [where for where, _ in names]
            assert ins == sorted(ins, key=lambda w: w != "path"), (path, names)
    data = spec["paths"]["/api/v2/data/{table}"]["get"]["parameters"]
    assert [p["name"] for p in data[:2]] == ["table", "device"]
    assert spec["security"][0] == {"apikey": []}


def test_doc_with_a_trailing_slash_leads_to_the_doc(client: FlaskClient) -> None:
    # Was a 404 (issue 26); no credentials are needed, as for the page itself.
    answer = client.get("/api/v2/doc/")
    assert answer.status_code == 308
    assert answer.headers["Location"] == "/api/v2/doc"
    page = client.get("/api/v2/doc/", follow_redirects=True)
    assert page.status_code == 200 and page.content_type.startswith("text/html")
    assert "swagger-ui" in page.get_data(as_text=True)
