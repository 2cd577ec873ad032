"""Route inventory (reliability plan S15, OWASP API9): what the app serves is what it documents.

The Flask url_map, less the documentation itself (the OpenAPI document, the Swagger UI page and
its static assets) and the dashboard's pages (listed here one by one: they are HTML for people,
not API operations), must equal the OpenAPI document's paths and methods, rule for rule, with
no undocumented endpoint, no older API version, and no debug, test or admin route.
"""

from __future__ import annotations

import re

from flask import Flask
from flask.testing import FlaskClient

from tests.support.apps import plain_rule

# The documentation endpoints: served, public, and not operations of the API.
DOC_ENDPOINTS = {"static", "api-docs.openapi_json", "api-docs.openapi_swagger_ui", "doc_slash"}
DOC_RULES = {"/api/v2/openapi.json", "/api/v2/doc", "/api/v2/doc/assets/<path:filename>",
             "/api/v2/doc/"}  # the last redirects to the one before
# The dashboard (serve/web, docs/dashboard.md): the landing page and /dashboard/ pages, exactly.
DASHBOARD_RULES = {
    ("/", "GET"), ("/dashboard/", "GET"), ("/dashboard/login", "GET"),
    ("/dashboard/login", "POST"), ("/dashboard/logout", "POST"),
    ("/dashboard/devices/<name>", "GET"), ("/dashboard/quarantine", "GET"),
    ("/dashboard/quarantine/<int:row_id>", "GET"),
    ("/dashboard/quarantine/<int:row_id>/payload", "GET"), ("/dashboard/locations", "GET"),
    ("/dashboard/static/<path:filename>", "GET"),
    ("/dashboard/static/v-<version>/<path:filename>", "GET"),  # versioned (serve/web/assets.py)
    # The accept page of invitation and reset links (serve/web/acceptpage.py): public.
    ("/dashboard/accept/<secret>", "GET"), ("/dashboard/accept/<secret>", "POST"),
    ("/dashboard/preferences", "GET"), ("/dashboard/preferences", "PUT"),  # the user's own
    ("/dashboard/compare", "GET"),
    ("/dashboard/<path:rest>", "GET"),  # any other address: the dashboard's 404 page
    # The alert pages (serve/web/alertpages.py): every POST checks the CSRF value.
    ("/dashboard/alerts", "GET"), ("/dashboard/alerts", "POST"),
    ("/dashboard/alerts/<rule_id>/delete", "POST"), ("/dashboard/notifications", "GET"),
    ("/dashboard/notifications/<event_id>/ack", "POST"), ("/dashboard/annotations", "POST"),
    # Issue 33: edit, pause, the preview (alertpreview.py), bulk acknowledge (inboxpages.py).
    ("/dashboard/alerts/<rule_id>/edit", "GET"), ("/dashboard/alerts/<rule_id>", "POST"),
    ("/dashboard/alerts/<rule_id>/active", "POST"), ("/dashboard/alerts/preview", "POST"),
    ("/dashboard/notifications/ack", "POST"),
    # The channel pages (issue 33; serve/web/channelpages.py): through the API, CSRF checked.
    ("/dashboard/channels", "GET"), ("/dashboard/channels", "POST"),
    ("/dashboard/channels/<channel_id>", "GET"), ("/dashboard/channels/<channel_id>", "POST"),
    ("/dashboard/channels/<channel_id>/active", "POST"),
    ("/dashboard/channels/<channel_id>/test", "POST"),
    ("/dashboard/channels/<channel_id>/delete", "GET"),
    ("/dashboard/channels/<channel_id>/delete", "POST"),
    ("/dashboard/channels/email-settings", "POST"),
    ("/dashboard/channels/email-settings/delete", "POST"),
    # Issue 33: silences from the inbox (silencepages.py), through the API, CSRF checked.
    ("/dashboard/silences", "POST"), ("/dashboard/silences/<silence_id>/expire", "POST"),
    # Issue 33: quiet hours, the digest (policypages.py) and the rule's repeat interval.
    ("/dashboard/notifications/policy", "GET"),
    ("/dashboard/notifications/policy/quiet-hours", "POST"),
    ("/dashboard/notifications/policy/digest", "POST"),
    ("/dashboard/silences/<silence_id>/delete", "POST"),
    # The people pages (issue 23; serve/web/peoplepages.py, placepages.py): through the API.
    ("/dashboard/keys", "GET"), ("/dashboard/keys", "POST"),
    ("/dashboard/keys/<key_id>/active", "POST"), ("/dashboard/keys/<key_id>/delete", "POST"),
    ("/dashboard/members", "GET"), ("/dashboard/members/<user_id>/role", "POST"),
    ("/dashboard/members/<user_id>/remove", "GET"),
    ("/dashboard/members/<user_id>/remove", "POST"),
    ("/dashboard/account", "GET"), ("/dashboard/account", "POST"),
    ("/dashboard/account/invitations/<invitation_id>/accept", "POST"),
    ("/dashboard/account/sign-out-everywhere", "POST"),
    ("/dashboard/locations/<location_id>", "GET"),
    ("/dashboard/locations/<location_id>", "POST"),
    ("/dashboard/audit", "GET"),
    # Invitations and teams (issue 23; peoplepages.py, teampages.py): through the API.
    ("/dashboard/invitations", "POST"), ("/dashboard/invitations/<invitation_id>/revoke", "POST"),
    ("/dashboard/members/<user_id>/reset-link", "POST"),
    ("/dashboard/teams", "GET"), ("/dashboard/teams", "POST"),
    ("/dashboard/teams/<team_id>", "GET"), ("/dashboard/teams/<team_id>/rename", "POST"),
    ("/dashboard/teams/<team_id>/delete", "POST"),
    ("/dashboard/teams/<team_id>/members/add", "POST"),
    ("/dashboard/teams/<team_id>/devices/add", "POST"),
    ("/dashboard/teams/<team_id>/locations/add", "POST"),
    ("/dashboard/teams/<team_id>/members/<user_id>/remove", "POST"),
    ("/dashboard/teams/<team_id>/devices/<device_name>/remove", "POST"),
    ("/dashboard/teams/<team_id>/locations/<location_id>/remove", "POST"),
    ("/dashboard/teams/<team_id>/<kind>/add", "POST"),  # any other list: 404
    ("/dashboard/teams/<team_id>/<kind>/<name>/remove", "POST"),
    # The water balance page (issue 35; serve/web/waterpages.py): through the API, CSRF checked.
    ("/dashboard/locations/<location_id>/water", "GET"),
    ("/dashboard/locations/<location_id>/water", "POST"),
    # The fleet pages (issue 34; serve/web/fleetpages.py): through the API, CSRF checked.
    ("/dashboard/fleet/add", "GET"), ("/dashboard/fleet/add", "POST"),
    ("/dashboard/fleet/<name>", "GET"), ("/dashboard/fleet/<name>/password", "POST"),
    ("/dashboard/fleet/<name>/move", "POST"), ("/dashboard/fleet/<name>/retire", "POST"),
    ("/dashboard/locations/new", "GET"), ("/dashboard/locations/new", "POST"),
    ("/dashboard/zone", "GET"),
}
# Methods Flask adds to every rule by itself (HEAD answers as GET; OPTIONS is the CORS preflight).
IMPLICIT = {"HEAD", "OPTIONS"}
SUSPICIOUS = re.compile(r"debug|test|admin|internal|console|shell|phpinfo|actuator|metrics|"
                        r"/api/v1|/api/v3|/_", re.IGNORECASE)
# Rules and endpoints whose suspicious-looking word is the product's own, with why.
SANCTIONED = {
    "/api/v2/channels/<channel_id>/test": "issue 24's 'send test' of a delivery channel",
    "channels.send_test": "the view of that route",
    "/dashboard/channels/<channel_id>/test": "the channel page's Send a test (issue 33)",
    "web.channel_test": "the view of that route",
}


def served(app: Flask) -> set[tuple[str, str]]:
    """(OpenAPI-style path, method) of every API rule of the app."""
    out = set()
    for rule in app.url_map.iter_rules():
        if rule.endpoint in DOC_ENDPOINTS or rule.endpoint.startswith("web."):
            continue
        path = re.sub(r"<(?:[^:<>]+:)?([^<>]+)>", r"{\1}", rule.rule)
        out |= {(path, m) for m in (rule.methods or set()) - IMPLICIT}
    return out


def documented(client: FlaskClient) -> set[tuple[str, str]]:
    """(path, method) of every operation in the served OpenAPI document."""
    doc = client.get("/api/v2/openapi.json").get_json()
    return {(path, method.upper()) for path, item in doc["paths"].items()
            for method in item if method in ("get", "put", "post", "delete", "patch", "head",
                                             "options", "trace")}


def test_url_map_equals_the_openapi_operations(app: Flask, client: FlaskClient) -> None:
    have, doc = served(app), documented(client)
    assert have - doc == set(), f"served but undocumented: {sorted(have - doc)}"
    assert doc - have == set(), f"documented but not served: {sorted(doc - have)}"
    assert len(have) >= 15  # the inventory is not vacuous


def test_documentation_endpoints_are_exactly_the_known_ones(app: Flask) -> None:
    rules = {r.rule for r in app.url_map.iter_rules() if r.endpoint in DOC_ENDPOINTS}
    assert rules == DOC_RULES
    docs = [r for r in app.url_map.iter_rules() if r.endpoint in DOC_ENDPOINTS]
    assert all((r.methods or set()) - IMPLICIT == {"GET"} for r in docs)


def test_dashboard_routes_are_exactly_the_known_ones(app: Flask) -> None:
    pages = {(plain_rule(r.rule), m) for r in app.url_map.iter_rules()
             if r.endpoint.startswith("web.")
             for m in (r.methods or set()) - IMPLICIT}
    assert pages == DASHBOARD_RULES


def test_no_debug_test_or_other_version_routes(app: Flask) -> None:
    for rule in app.url_map.iter_rules():
        if rule.endpoint.startswith("web."):
            assert (rule.rule == "/" or rule.rule.startswith("/dashboard/")), rule.rule
        else:
            assert rule.rule.startswith("/api/v2/"), f"route outside /api/v2: {rule.rule}"
        if plain_rule(rule.rule) not in SANCTIONED:
            assert not SUSPICIOUS.search(rule.rule), f"suspicious route {rule.rule}"
        if rule.endpoint not in SANCTIONED:
            assert not SUSPICIOUS.search(rule.endpoint), f"suspicious endpoint {rule.endpoint}"


def test_inventory_check_catches_an_extra_route(app: Flask, client: FlaskClient) -> None:
    """Negative control: a route added behind the document's back shows up as a difference."""
    from tests.support.apps import close_app, make_app

    extra = make_app(app.extensions["settings"].database_url)
    try:
        extra.add_url_rule("/api/v2/debug/<name>", "debug_probe", lambda name: name,
                           methods=["GET", "POST"])
        diff = served(extra) - documented(client)
        assert diff == {("/api/v2/debug/{name}", "GET"), ("/api/v2/debug/{name}", "POST")}
    finally:
        close_app(extra)


def test_app_is_not_in_debug_or_testing_mode(app: Flask) -> None:
    assert app.debug is False and app.testing is False
    assert app.config["PROPAGATE_EXCEPTIONS"] in (None, False)
    assert app.config.get("MAX_CONTENT_LENGTH"), "request bodies must be bounded"


def test_the_deprecated_query_key_is_documented_with_its_sunset() -> None:
    """S15: deprecated features are listed with their sunset dates (docs/auth.md)."""
    from pathlib import Path

    from serve.auth import APIKEY_QUERY_SUNSET

    text = (Path(__file__).resolve().parents[2] / "docs" / "auth.md").read_text()
    assert "?apikey=" in text and APIKEY_QUERY_SUNSET.strftime("%Y-%m-%d") in text
