"""Numbers in a query are ASCII digits and nothing else (issue 30 item 5; serve/counts.py).

Python's int() reads `+10000`, ` 10000` (`%2010000`), `10_000` and full-width digits, so a
page asked for that way was served in full while the heavy-page meters, which read digits,
counted it as small. Every such spelling is now a 400 naming the parameter, on /data (`limit`,
`points`) and on the paged listings (`limit`, `page`); every value the interface spec allows
(an integer 1..10000, leading zeros included) is still served."""

from __future__ import annotations

import pytest
from flask.testing import FlaskClient
from marshmallow import ValidationError

from serve import counts
from tests.support.data_world import URL, World, error

# As they travel in a URL (percent-encoded where a client would have to encode them).
BAD = {
    "plus": "%2B10000", "plus_raw": "+10000", "space_before": "%2010000", "space_after":
    "10%20", "space_only": "%20", "underscore": "10_000", "exponent": "1e4", "decimal": "1.0",
    "hex": "0x10", "minus": "-1", "fullwidth": "%EF%BC%90%EF%BC%91",
    "arabic_indic": "%D9%A1%D9%A0", "tab": "%0910", "newline": "10%0A", "huge": "9" * 40,
}
GOOD = {"10000": 10000, "1": 1, "0100": 100, "0000000001": 1}


@pytest.mark.parametrize("raw", ["+10000", " 10", "10 ", "10_000", "1e4", "０１", "١٠", "1.0",
                                 "", "-1", "0x10", "9" * 19, "\t10"])
def test_plain_reads_ascii_digits_only(raw: str) -> None:
    assert counts.plain(raw) is None
    with pytest.raises(ValidationError) as caught:
        counts.parse("limit", raw, 1, 10000)
    assert caught.value.field_name == "limit"
    assert "ASCII digits only" in str(caught.value.messages)


def test_plain_reads_every_integer_the_spec_allows() -> None:
    assert [counts.plain(str(n)) for n in range(0, 10001)] == list(range(0, 10001))
    assert counts.plain("0010000") == 10000 and counts.plain(10000) is None  # type: ignore[arg-type]


@pytest.mark.parametrize("name", sorted(BAD))
def test_a_data_limit_not_in_ascii_digits_is_a_400_naming_limit(
        client: FlaskClient, world: World, name: str) -> None:
    r = client.get(f"{URL}/calibrated?device=D1&start_time=2024-07-01&limit={BAD[name]}",
                   headers=world.headers())
    body = error(r, 400)
    assert body["message"].startswith("limit: must be an integer from 1 to 10000"), body
    assert list(body["errors"]) == ["limit"]


@pytest.mark.parametrize("raw", sorted(GOOD))
def test_every_limit_the_spec_allows_is_served(client: FlaskClient, world: World,
                                               raw: str) -> None:
    r = client.get(f"{URL}/calibrated?device=D1&start_time=2024-07-01&end_time=2024-07-02"
                   f"&limit={raw}", headers=world.headers())
    assert r.status_code == 200, r.get_data(as_text=True)
    assert 0 < len(r.get_json()) <= GOOD[raw]


@pytest.mark.parametrize("name", ["plus", "space_before", "underscore", "exponent",
                                  "fullwidth"])
def test_points_not_in_ascii_digits_is_a_400_naming_points(
        client: FlaskClient, world: World, name: str) -> None:
    r = client.get(f"{URL}/calibrated?device=D1&start_time=2024-07-01&points={BAD[name]}",
                   headers=world.headers())
    body = error(r, 400)
    assert body["message"].startswith("points: must be an integer"), body
    assert list(body["errors"]) == ["points"]


@pytest.mark.parametrize("param", ["limit", "page"])
@pytest.mark.parametrize("name", ["plus", "space_before", "underscore", "fullwidth"])
def test_a_listing_limit_or_page_not_in_ascii_digits_is_a_400_naming_it(
        client: FlaskClient, world: World, param: str, name: str) -> None:
    r = client.get(f"/api/v2/devices?{param}={BAD[name]}", headers=world.headers("a_devices"))
    body = error(r, 400)
    assert body["message"].startswith(f"{param}: must be an integer from 1 to"), body
    assert list(body["errors"]) == [param]
    assert client.get(f"/api/v2/devices?{param}=01",
                      headers=world.headers("a_devices")).status_code == 200


# ---- what a /data request costs (serve.fairshare's heavy pages) ----------------------------

def test_the_cost_of_a_page_is_its_rows_or_its_buckets_and_readings() -> None:
    from datetime import UTC, datetime, timedelta

    from serve.aggregation import READINGS_PER_ROW, Bucketing, cost, parse_interval

    start = datetime(2025, 1, 1, tzinfo=UTC)
    year, week = start + timedelta(days=365), start + timedelta(days=7)
    assert cost(None, start, year, 1, 10000) == 10000  # a page of rows: its limit
    day = Bucketing(parse_interval("1d"), None)
    # A year of day buckets of one device: 381 buckets at most (a local day may last 23 h),
    # each of 288 readings, however few buckets the page answers.
    assert cost(day, start, year, 1, 2050) == 381 + 381 * 288 // READINGS_PER_ROW
    assert cost(day, start, year, 1, 10) == 10 + 381 * 288 // READINGS_PER_ROW
    assert cost(day, start, year, 3, 2050) == 1143 + 3 * 381 * 288 // READINGS_PER_ROW
    # A week of 1 h buckets of one device is small; of a location, counted at its limit.
    hour = Bucketing(parse_interval("1h"), None)
    assert cost(hour, start, week, 1, 2050) == 169 + 169 * 12 // READINGS_PER_ROW
    assert cost(hour, start, week, 0, 2050) == 2050 + 2050 * 12 // READINGS_PER_ROW
    # points= resolves to its interval over the window first (a week of 1000: 15 minutes).
    assert cost(Bucketing(None, 1000), start, week, 1, 2050) == 673 + 673 * 3 // 8
