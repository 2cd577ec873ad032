"""The dashboard's own whole-number parameters (`days`, `before` of the bad-data pages) are read
by the API's one parser, serve/counts.py: ASCII digits only, anything else a 400 page naming
the parameter (issue 30 item 5; `int()` read `+30`, ` 30`, `3_0` and full-width digits)."""

from __future__ import annotations

from flask.testing import FlaskClient

from tests.support.dashboard import World, sign_in


def test_the_bad_data_pages_numbers_are_ascii_digits(client: FlaskClient, world: World) -> None:
    sign_in(client, "admin@a.example")
    for bad in ("days=%2B30", "days=%2030", "days=3_0", "days=%EF%BC%93%EF%BC%90",
                "before=%2B1"):
        r = client.get(f"/dashboard/quarantine?{bad}")
        assert r.status_code == 400 and r.mimetype == "text/html", bad
        page = r.get_data(as_text=True)
        assert "ASCII digits only" in page and bad.split("=")[0] in page, bad
    assert client.get("/dashboard/quarantine?days=030").status_code == 200
