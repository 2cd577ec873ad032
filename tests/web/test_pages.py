"""The dashboard's pages through Flask's test client: sign-in and its throttling, CSRF, the
session cookie's reach into the API (GET and HEAD only), tenancy, bad data and payloads,
locations, headers; and the pure parts (health badges, chart configuration)."""

from __future__ import annotations

import hashlib
import re
import shutil
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import psycopg
import pytest
from flask import Flask
from flask.testing import FlaskClient
from markupsafe import escape

from people.logins import change_password
from serve.web import charts, model
from shared import units
from shared.config import Settings
from shared.quarantinecodes import REASONS
from tests.support.apps import close_app, make_app
from tests.support.dashboard import (
    A_PAYLOAD,
    B_SECRET,
    PASSWORDS,
    World,
    csrf_of,
    shows,
    sign_in,
)


def text(response: Any) -> str:
    return str(response.get_data(as_text=True))


# ---- public pages ------------------------------------------------------------------------


def test_landing_page_links_the_dashboard_docs_and_openapi(client: FlaskClient) -> None:
    page = client.get("/")
    assert page.status_code == 200 and page.mimetype == "text/html"
    for href in ('href="/dashboard/"', 'href="/api/v2/doc"', 'href="/api/v2/openapi.json"'):
        assert href in text(page)


def test_api_root_is_a_json_index(client: FlaskClient) -> None:
    index = client.get("/api/v2/")
    assert index.status_code == 200 and index.mimetype == "application/json"
    body = index.get_json()
    assert body["openapi"] == "/api/v2/openapi.json" and body["documentation"] == "/api/v2/doc"
    for path in ("/api/v2/doc", "/api/v2/openapi.json", "/dashboard/", "/api/v2/health"):
        assert client.get(path).status_code in (200, 302), path
    # Swagger UI's "Try it out" sends the user's credentials: framed by another site, it could
    # be clickjacked. The same framing rule as the dashboard's pages (issue 30 item 6.5).
    for path in ("/api/v2/doc", "/api/v2/doc/"):
        swagger = client.get(path, follow_redirects=True)
        assert swagger.status_code == 200 and swagger.mimetype == "text/html", path
        assert swagger.headers["X-Frame-Options"] == "DENY"
        assert swagger.headers["Content-Security-Policy"] == "frame-ancestors 'none'"
    doc = client.get("/api/v2/openapi.json").get_json()
    assert "/api/v2/" in doc["paths"]  # documented like every operation
    assert client.get("/api/v2").status_code == 308  # the slash-less form is redirected


def test_signed_out_pages_send_to_the_form_and_back(client: FlaskClient) -> None:
    for path in ("/dashboard/", "/dashboard/devices/A1", "/dashboard/quarantine?device=A1",
                 "/dashboard/locations"):
        r = client.get(path)
        assert r.status_code == 302
        assert r.headers["Location"].startswith("/dashboard/login?next=")
    page = client.get("/dashboard/login?next=/dashboard/devices/A1")
    r = client.post("/dashboard/login", data={
        "email": "user@a.example", "password": PASSWORDS["user@a.example"],
        "csrf": csrf_of(text(page)), "next": "/dashboard/devices/A1"})
    assert r.status_code == 303 and r.headers["Location"] == "/dashboard/devices/A1"


@pytest.mark.parametrize("target", ["https://evil.example/", "//evil.example/dashboard/",
                                    "/api/v2/apikeys", "/\\evil.example", "javascript:alert(1)"])
def test_sign_in_never_redirects_off_the_dashboard(client: FlaskClient, target: str) -> None:
    page = client.get("/dashboard/login")
    r = client.post("/dashboard/login", data={
        "email": "user@a.example", "password": PASSWORDS["user@a.example"],
        "csrf": csrf_of(text(page)), "next": target})
    assert r.status_code == 303 and r.headers["Location"] == "/dashboard/"


# ---- sign-in, CSRF, the cookie -----------------------------------------------------------


def test_wrong_password_is_refused_and_the_session_cookie_is_safe(client: FlaskClient) -> None:
    r = sign_in(client, "user@a.example", "not-the-password")
    assert r.status_code == 401 and "Wrong email or password." in text(r)
    assert "not-the-password" not in text(r)
    r = sign_in(client, "nobody@a.example", "whatever-password")
    assert r.status_code == 401 and "Wrong email or password." in text(r)
    r = sign_in(client, "user@a.example")
    cookie = r.headers["Set-Cookie"]
    assert cookie.startswith("sds_session=") and "HttpOnly" in cookie
    assert "SameSite=Lax" in cookie and "Path=/" in cookie and "Secure" not in cookie


def test_secure_cookie_setting(world: World) -> None:
    app = make_app(world.url, dashboard_cookie_secure=True)
    try:
        r = sign_in(app.test_client(), "user@a.example")
        assert "Secure" in r.headers["Set-Cookie"]
    finally:
        close_app(app)


def test_sign_in_is_throttled_with_the_apis_counts(world: World) -> None:
    """Failed dashboard sign-ins count against the account like the API's logins: past the
    limit both the form and Basic credentials get 429 with Retry-After."""
    app = make_app(world.url, login_max_failures=3, login_window=60)
    try:
        client = app.test_client()
        for _ in range(3):
            assert sign_in(client, "admin@a.example", "wrong-password-1").status_code == 401
        r = sign_in(client, "admin@a.example")  # even the right password waits now
        assert r.status_code == 429 and int(r.headers["Retry-After"]) > 0
        assert "too many failed logins" in text(r)
        import base64
        basic = base64.b64encode(f"admin@a.example:{PASSWORDS['admin@a.example']}".encode())
        api = client.get("/api/v2/devices", headers={"Authorization": f"Basic {basic.decode()}"})
        assert api.status_code == 429
    finally:
        with psycopg.connect(world.url) as conn:
            conn.execute("DELETE FROM login_failures")
        close_app(app)


def test_forms_need_the_sessions_csrf_value(client: FlaskClient) -> None:
    page = client.get("/dashboard/login")
    good = csrf_of(text(page))
    creds = {"email": "user@a.example", "password": PASSWORDS["user@a.example"]}
    for form in (creds, {**creds, "csrf": ""}, {**creds, "csrf": good[:-1] + "x"}):
        r = client.post("/dashboard/login", data=form)
        assert r.status_code == 400 and "CSRF" in text(r)
        assert "Set-Cookie" not in r.headers or "token" not in r.headers["Set-Cookie"]
    r = client.post("/dashboard/login", data={**creds, "csrf": good},
                    headers={"Origin": "https://evil.example"})
    assert r.status_code == 400
    # A fresh browser (no session) cannot replay another session's value either.
    other = client.application.test_client()
    assert other.post("/dashboard/login", data={**creds, "csrf": good}).status_code == 400
    assert sign_in(client, "user@a.example").status_code == 303
    # Signing out without the value keeps the session.
    assert client.post("/dashboard/logout").status_code == 400
    assert client.get("/dashboard/").status_code == 200


def test_the_cookie_reads_the_api_but_never_writes(client: FlaskClient) -> None:
    sign_in(client, "user@a.example")
    assert client.get("/api/v2/devices").status_code == 200
    assert client.head("/api/v2/devices/A1").status_code == 200
    csv = client.get("/api/v2/data/calibrated?device=A1&start_time=2026-03-07&limit=3",
                     headers={"Accept": "text/csv"})
    assert csv.status_code == 200 and csv.mimetype == "text/csv"
    for method, path, body in (("POST", "/api/v2/apikeys", {"scopes": ["data:read"]}),
                               ("DELETE", "/api/v2/auth/token", None),
                               ("PUT", "/api/v2/apikeys/00000000-0000-0000-0000-000000000000",
                                {"name": "x"})):
        r = client.open(path, method=method, json=body)
        assert r.status_code == 401, (method, path, r.status_code)
    # An Authorization header wins over the cookie (API clients are unaffected).
    r = client.get("/api/v2/devices", headers={"Authorization": "Bearer sdst_nonsense"})
    assert r.status_code == 401


def test_signing_out_revokes_the_token(client: FlaskClient, world: World) -> None:
    page = sign_in(client, "user@a.example")
    assert page.status_code == 303
    devices = client.get("/dashboard/")
    cookie = client.get_cookie("sds_session")
    assert cookie is not None
    r = client.post("/dashboard/logout", data={"csrf": csrf_of(text(devices))})
    assert r.status_code == 303 and r.headers["Location"] == "/dashboard/login?out=1"
    replay = client.application.test_client()
    replay.set_cookie("sds_session", cookie.value)
    assert replay.get("/dashboard/").headers["Location"].startswith("/dashboard/login")
    assert replay.get("/api/v2/devices").status_code == 401


def test_a_password_change_ends_dashboard_sessions(world: World) -> None:
    app = make_app(world.url)
    try:
        client = app.test_client()
        sign_in(client, "admin@a.example")
        assert client.get("/dashboard/").status_code == 200
        with psycopg.connect(world.url) as conn:
            user = conn.execute("SELECT id FROM users WHERE email = 'admin@a.example'"
                                ).fetchone()[0]  # type: ignore[index]
            change_password(conn, user=user, password=PASSWORDS["admin@a.example"])
        r = client.get("/dashboard/")
        assert r.status_code == 302 and "ended=1" in r.headers["Location"]
        assert "session has ended" in text(client.get(r.headers["Location"]))
    finally:
        close_app(app)


def test_pages_send_protective_headers(client: FlaskClient) -> None:
    sign_in(client, "user@a.example")
    page = client.get("/dashboard/devices/A1")
    csp = page.headers["Content-Security-Policy"]
    assert "script-src 'self'" in csp and "frame-ancestors 'none'" in csp
    assert page.headers["X-Frame-Options"] == "DENY"
    assert page.headers["Cache-Control"] == "no-store"
    assert "<script>" not in text(page)  # no inline script (the CSP would refuse it)
    api = client.get("/api/v2/devices")
    assert "Content-Security-Policy" not in api.headers  # the API's answers are unchanged
    assert "Set-Cookie" not in api.headers
    asset = client.get("/dashboard/static/device.js")
    asset.close()  # a file response: close it, as a server would
    assert asset.status_code == 200 and "max-age=3600" in asset.headers["Cache-Control"]
    assert client.get("/dashboard/static/../views.py").status_code == 404


# ---- pages and tenancy -------------------------------------------------------------------


def test_static_files_have_versioned_urls_cached_for_a_year(client: FlaskClient) -> None:
    """Every script and style of a page is under one /static/v-<version>/ prefix (the modules'
    relative imports inherit it), answered with a year's immutable caching; an old version
    gets today's file uncached; old unversioned links still work, for an hour."""
    from serve.web import assets

    sign_in(client, "user@a.example")
    page = text(client.get("/dashboard/devices/A1"))
    urls = re.findall(r'(?:src|href)="(/dashboard/static/[^"]+)"', page)
    version = assets.version()
    assert len(urls) > 5 and all(u.startswith(f"/dashboard/static/v-{version}/") for u in urls)
    for url in urls:
        asset = client.get(url)
        asset.close()
        assert asset.status_code == 200, url
        assert asset.headers["Cache-Control"] == "public, max-age=31536000, immutable", url
    old = client.get("/dashboard/static/v-000000000000/device.js")
    old.close()
    assert old.status_code == 200 and old.headers["Cache-Control"] == "no-cache"
    assert client.get(f"/dashboard/static/v-{version}/../views.py").status_code == 404
    assert client.get(f"/dashboard/static/v-{version}/nope.js").status_code == 404
    assert re.fullmatch(r"[0-9a-f]{12}", version)


def test_device_page_embeds_the_chart_configuration(client: FlaskClient) -> None:
    sign_in(client, "user@a.example")
    page = text(client.get("/dashboard/devices/A1?temp=f&speed=bogus"))
    assert 'id="sds-config"' in page and '"device": "A1"' in page
    assert '"zone": "America/Chicago"' in page and '"end": "2026-03-08T00:00:00Z"' in page
    assert '"temp": "f"' in page and '"speed": "mps"' in page  # stale unit: the default
    assert 'vendor/uPlot.iife.min.js' in page


def test_another_organisations_objects_answer_like_missing_ones(client: FlaskClient,
                                                               world: World) -> None:
    sign_in(client, "user@b.example")
    assert not shows(text(client.get("/dashboard/")), "A1")
    for mine, missing in (("/dashboard/devices/A1", "/dashboard/devices/NOPE"),
                          ("/dashboard/quarantine?device=A1", "/dashboard/quarantine?device=NOPE"),
                          (f"/dashboard/quarantine/{world.quarantine_a[0]}",
                           "/dashboard/quarantine/999999"),
                          (f"/dashboard/quarantine/{world.quarantine_a[0]}/payload",
                           "/dashboard/quarantine/999999/payload")):
        a, b = client.get(mine), client.get(missing)
        assert a.status_code == b.status_code == 404, mine
        said = [re.search(r'id="error-message">(.*?)</p>', text(r)).group(1)  # type: ignore[union-attr]
                for r in (a, b)]
        assert said[0].replace("A1", "NOPE").replace(
            str(world.quarantine_a[0]), "999999") == said[1], mine
        assert len(text(a)) - len(said[0]) == len(text(b)) - len(said[1]), mine
    for page in ("/dashboard/quarantine", "/dashboard/locations", "/dashboard/"):
        body = text(client.get(page))
        assert "North field" not in body and "sensors/A1" not in body and A_PAYLOAD not in body


def test_the_bad_data_page_explains_every_reason_code(client: FlaskClient) -> None:
    """Issue 34: the page sent people to docs/ingest.md for what a code means; it explains
    them itself, from the one place the codes are defined."""
    sign_in(client, "user@a.example")
    page = text(client.get("/dashboard/quarantine?device=A1&days=30"))
    listed = re.search(r'<dl class="reasons" id="reason-list">(.*?)</dl>', page, re.S)
    assert listed, page
    for code, meaning in REASONS.items():
        assert f"<dt><code>{code}</code></dt><dd>{escape(meaning)}</dd>" in listed.group(1)
    totals = re.search(r'id="reason-totals">(.*?)</table>', page, re.S)
    assert totals and escape(REASONS["out_of_range"]) in totals.group(1)
    assert f'class="reason" title="{escape(REASONS["out_of_range"])}"' in page


def test_bad_data_pages(client: FlaskClient, world: World) -> None:
    sign_in(client, "admin@a.example")
    page = text(client.get("/dashboard/quarantine?device=A1&days=30"))
    assert "4 in all" in page and "out_of_range" in page and "rh: 1.7 is outside 0..1" in page
    assert page.count('class="payload-link"') == 4
    assert B_SECRET not in page and not shows(page, "ZZ")
    counts = re.search(r'id="sds-counts">(.*?)</script>', page, re.S)
    assert counts and '"out_of_range": [' in counts.group(1)
    row = text(client.get(f"/dashboard/quarantine/{world.quarantine_a[0]}"))
    assert "rh&#34;: 1.7" in row or '"rh": 1.7' in row.replace("&#34;", '"')
    raw = client.get(f"/dashboard/quarantine/{world.quarantine_a[0]}/payload")
    assert raw.get_data() == A_PAYLOAD.encode() and raw.mimetype == "application/octet-stream"
    assert raw.headers["Content-Disposition"].startswith("attachment;")
    older = text(client.get(f"/dashboard/quarantine?device=A1&before={world.quarantine_a[2]}"))
    assert older.count('class="payload-link"') == 2  # paged by id: the two stored before
    for bad in ("days=0", "days=abc", "before=-1", "days=100000"):
        r = client.get(f"/dashboard/quarantine?{bad}")
        assert r.status_code == 400 and r.mimetype == "text/html", bad


def test_truncated_payload_says_so(client: FlaskClient, world: World) -> None:
    """A payload the quarantine kept only a prefix of (issue 30: larger than
    SDS_INGEST_QUARANTINE_PAYLOAD_MAX) shows its size as received, the kept bytes, the SHA-256
    of the whole, and says it is cut; the download is the kept prefix."""
    big = b'[{"time": "2026-03-07T12:05:00Z", "tair": 99}' + b", 1" * 5000 + b"]"
    kept = big[:4096]
    with psycopg.connect(world.url, autocommit=True) as conn:
        row = conn.execute(
            "INSERT INTO quarantine (received_at, topic, device, reason, detail, payload,"
            " payload_bytes, payload_sha256) VALUES (now() - interval '40 days',"
            " 'sensors/A1/readings', 'A1', 'bad_shape', 'reading 1: expected an object', %s,"
            " %s, %s) RETURNING id", (kept, len(big), hashlib.sha256(big).digest())).fetchone()
        assert row is not None
    try:
        sign_in(client, "admin@a.example")
        page = text(client.get(f"/dashboard/quarantine/{row[0]}"))
        assert 'id="payload-truncated"' in page and 'id="truncated-note"' in page
        assert f"{len(big)} bytes as received; the quarantine kept only the first 4096" in page
        assert f"(the first 4096 of {len(big)} bytes)" in page
        assert hashlib.sha256(big).hexdigest() in page
        raw = client.get(f"/dashboard/quarantine/{row[0]}/payload")
        assert raw.get_data() == kept
        whole = text(client.get(f"/dashboard/quarantine/{world.quarantine_a[0]}"))
        assert "payload-truncated" not in whole and "download as received" in whole
    finally:
        with psycopg.connect(world.url, autocommit=True) as conn:
            conn.execute("DELETE FROM quarantine WHERE id = %s", (row[0],))


def test_plain_users_see_no_payloads(client: FlaskClient, world: World) -> None:
    sign_in(client, "user@a.example")
    page = text(client.get("/dashboard/quarantine"))
    assert "payload-link" not in page and "Raw payloads are shown to administrators." in page
    for path in (f"/dashboard/quarantine/{world.quarantine_a[0]}",
                 f"/dashboard/quarantine/{world.quarantine_a[0]}/payload"):
        r = client.get(path)
        assert r.status_code == 403 and A_PAYLOAD.encode() not in r.get_data()


def test_locations_page_follows_the_units(client: FlaskClient, world: World) -> None:
    sign_in(client, "user@a.example")
    page = text(client.get("/dashboard/locations"))
    assert "North field" in page and "America/Chicago" in page
    assert ">A1</a>" in page and ">A2</a>" in page
    assert ">21.5<" in page and ">50.0<" in page  # A3's reading, C and %
    fahrenheit = text(client.get("/dashboard/locations?temp=f&ratio=dec"))
    assert "Air temperature (°F)" in fahrenheit and ">70.7<" in fahrenheit
    assert ">0.5<" in fahrenheit


# ---- pure parts --------------------------------------------------------------------------

NOW = datetime(2026, 3, 8, 12, tzinfo=UTC)
SETTINGS = Settings(dashboard_silent_intervals=3, dashboard_low_battery_pct=20.0)


def _record(**fields: Any) -> dict[str, Any]:
    base: dict[str, Any] = {"sync_interval": 300, "last_seen": NOW.isoformat(), "batt_pct": 90}
    base.update(fields)
    return base


@pytest.mark.parametrize("fields, quarantined, labels", [
    ({}, 0, ["ok"]),
    ({"last_seen": (NOW - timedelta(minutes=14)).isoformat()}, 0, ["ok"]),
    ({"last_seen": (NOW - timedelta(minutes=16)).isoformat()}, 0, ["silent 16 min"]),
    ({"last_seen": (NOW - timedelta(hours=5)).isoformat(), "sync_interval": 3600}, 0,
     ["silent 5 h"]),
    ({"last_seen": (NOW - timedelta(hours=2)).isoformat(), "sync_interval": 3600}, 0, ["ok"]),
    ({"last_seen": None}, 0, ["never seen"]),
    ({"batt_pct": 19.6}, 0, ["battery 20%"]),
    ({"batt_pct": 20.0}, 0, ["ok"]),
    ({"batt_pct": None}, 2, ["2 quarantined"]),
    ({"last_seen": (NOW - timedelta(days=3)).isoformat(), "batt_pct": 5}, 1,
     ["silent 3 d", "battery 5%", "1 quarantined"]),
])
def test_health_badges(fields: dict[str, Any], quarantined: int, labels: list[str]) -> None:
    found = model.badges(_record(**fields), quarantined, SETTINGS, NOW)
    assert [b.label for b in found] == labels
    assert all(b.level in ("ok", "warn", "bad") and b.why for b in found)


def test_chart_configuration_covers_every_unit_and_table() -> None:
    assert {p: set(c) for p, c in charts.UNIT_TEXT.items()} == \
        {p: set(c) for p, c in units.UNITS.items()}
    cfg = charts.config(device="X", zone="UTC", end="2026-01-01T00:00:00Z",
                        chosen=charts.chosen_units({"temp": "F", "pres": "nope"}))
    assert cfg["chosen"] == {"temp": "f", "pres": "mb", "size": "mm", "ratio": "pct",
                             "speed": "mps"}
    for name, table in cfg["tables"].items():
        names = [c["name"] for c in table["columns"]]
        assert set(table["defaults"]) <= set(names), name
        assert "time" not in names and "low_quality" not in names
    gdd = next(c for c in cfg["water"]["columns"] if c["name"] == "gdd")
    assert gdd["param"] == "temp" and gdd["delta"] is True
    dli = next(c for c in cfg["tables"]["daily"]["columns"] if c["name"] == "dli")
    assert dli["param"] is None and dli["unit"] == "mol/m2"


def test_app_without_the_chart_library_says_how_to_install_it(
        client: FlaskClient, monkeypatch: pytest.MonkeyPatch, app: Flask, tmp_path: Path) -> None:
    from serve.web import views

    # The page's own scripts without the vendored libraries (what deploy/setup.sh installs).
    # It pointed STATIC at a missing folder and passed only after another test had cached the
    # page's module list (views._modules); alone, or first on an xdist worker, it failed.
    static = tmp_path / "static"
    shutil.copytree(views.STATIC, static, ignore=shutil.ignore_patterns("vendor"))
    monkeypatch.setattr(views, "STATIC", static)
    views._modules.cache_clear()
    try:
        sign_in(client, "user@a.example")
        page = text(client.get("/dashboard/devices/A1"))
    finally:
        views._modules.cache_clear()
    assert 'id="no-chart-library"' in page and "deploy/setup.sh" in page


@pytest.mark.parametrize("path", ["/dashboard/nope", "/dashboard/devices/A1/extra",
                                  "/dashboard/quarantine/not-a-number", "/dashboard/a/b/c"])
def test_unknown_dashboard_addresses_get_the_dashboards_404_page(client: FlaskClient,
                                                                 path: str) -> None:
    # Was the API's raw JSON 404 (issue 26); signed in or not, the same HTML page.
    for signed in (False, True):
        if signed:
            sign_in(client, "user@a.example")
        page = client.get(path)
        assert page.status_code == 404 and page.content_type.startswith("text/html"), path
        assert 'id="error-message">There is no such page in the dashboard.<' in text(page)
        assert page.headers["X-Frame-Options"] == "DENY"
    assert client.get("/dashboard/devices/A1").status_code == 200  # real pages still win
    assert client.get("/api/v2/nope").content_type == "application/json"  # the API unchanged


def test_the_device_page_preloads_exactly_the_modules_it_imports(client: FlaskClient) -> None:
    from serve.web import views

    found = views._modules("device.js")
    assert {"api.js", "readings.js", "water.js", "facts.js"} <= set(found)
    assert "map.js" not in found and "compare.js" not in found  # other pages' views
    assert all((views.STATIC / "js" / name).is_file() for name in found)
    sign_in(client, "user@a.example")
    page = text(client.get("/dashboard/devices/A1"))
    preloaded = re.findall(
        r'<link rel="modulepreload" href="/dashboard/static/v-[0-9a-f]{12}/js/([\w-]+\.js)">', page)
    assert preloaded == found
