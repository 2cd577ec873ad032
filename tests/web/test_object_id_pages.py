"""The dashboard's object pages parse their ids with the API's one converter (serve/ids.py,
issue 31): a malformed id is the same 404 page as a well-formed id that names nothing, the
message naming what was asked for, never an id passed on to the API as typed (a `?` in it
once turned a page's call into another route's); a signed-out visitor is sent to sign in
whatever the id."""

from __future__ import annotations

import html
import re
from typing import Any

from flask.testing import FlaskClient

from tests.support.dashboard import csrf_of, sign_in

MISSING = "00000000-0000-4000-8000-000000000000"
# As typed in the address (percent-encoded) and as the page names it (decoded).
MALFORMED = {"not-a-uuid": "not-a-uuid", "1234": "1234", "%3F": "?", "x%3Factive=1": "x?active=1",
             "%2E%2E": ".."}
# (method, page with {} for the id, form fields besides the CSRF value): every object page.
PAGES: list[tuple[str, str, dict[str, str]]] = [
    ("GET", "/dashboard/alerts/{}/edit", {}),
    ("POST", "/dashboard/alerts/{}", {"name": "x"}),
    ("POST", "/dashboard/alerts/{}/active", {"active": "1"}),
    ("POST", "/dashboard/alerts/{}/delete", {"confirm": "yes"}),
    ("GET", "/dashboard/channels/{}", {}),
    ("POST", "/dashboard/channels/{}", {"name": "x"}),
    ("POST", "/dashboard/channels/{}/active", {"active": "1"}),
    ("POST", "/dashboard/channels/{}/test", {}),
    ("GET", "/dashboard/channels/{}/delete", {}),
    ("POST", "/dashboard/channels/{}/delete", {"confirm": "yes"}),
    ("POST", "/dashboard/notifications/{}/ack", {}),
    ("POST", "/dashboard/silences/{}/expire", {}),
    ("POST", "/dashboard/silences/{}/delete", {}),
    ("POST", "/dashboard/keys/{}/active", {"active": "true"}),
    ("POST", "/dashboard/keys/{}/delete", {"confirm": "yes"}),
    ("POST", "/dashboard/members/{}/role", {"role": "viewer"}),
    ("GET", "/dashboard/members/{}/remove", {}),
    ("POST", "/dashboard/members/{}/remove", {"confirm": "yes"}),
    ("POST", "/dashboard/members/{}/reset-link", {}),
    ("POST", "/dashboard/invitations/{}/revoke", {}),
    ("POST", "/dashboard/account/invitations/{}/accept", {}),
    ("GET", "/dashboard/locations/{}", {}),
    ("POST", "/dashboard/locations/{}", {"name": "x"}),
    ("GET", "/dashboard/locations/{}/water", {}),
    ("POST", "/dashboard/locations/{}/water", {"day": "2026-01-01", "depth_mm": "5"}),
    ("GET", "/dashboard/teams/{}", {}),
    ("POST", "/dashboard/teams/{}/rename", {"name": "x"}),
    ("POST", "/dashboard/teams/{}/delete", {"confirm": "yes"}),
    ("POST", "/dashboard/teams/{}/members/add", {"target": MISSING}),
]


def _page(client: FlaskClient, method: str, path: str, form: dict[str, str], csrf: str
          ) -> tuple[int, str, str]:
    """Status, content type and the error message of the answer (empty when none)."""
    r: Any = client.open(path, method=method,
                         data={"csrf": csrf, **form} if method == "POST" else None)
    found = re.search(r'id="error-message">([^<]*)<', r.get_data(as_text=True))
    return r.status_code, r.content_type, html.unescape(found.group(1)) if found else ""


def test_a_malformed_id_is_the_same_404_page_as_a_missing_one(client: FlaskClient) -> None:
    sign_in(client, "admin@a.example")
    csrf = csrf_of(client.get("/dashboard/channels").get_data(as_text=True))
    wrong = []
    for method, path, form in PAGES:
        status, kind, missing = _page(client, method, path.format(MISSING), form, csrf)
        if not (status == 404 and kind.startswith("text/html")
                and re.fullmatch(r"unknown [a-zA-Z ]+ '.*'", missing)):
            wrong.append((method, path.format(MISSING), (status, kind, missing)))
            continue
        for typed, named in MALFORMED.items():
            got = _page(client, method, path.format(typed), form, csrf)
            if got != (404, kind, missing.replace(MISSING, named)):
                wrong.append((method, path.format(typed), got))
    assert wrong == [], "\n".join(map(str, wrong))


def test_a_signed_out_visitor_is_sent_to_sign_in_whatever_the_id(client: FlaskClient) -> None:
    for method, path, _form in PAGES:
        if method != "GET":
            continue
        for typed in (MISSING, *MALFORMED):
            r = client.get(path.format(typed))
            assert r.status_code == 302 and "/dashboard/login" in r.headers["Location"], \
                (path, typed, r.status_code)
