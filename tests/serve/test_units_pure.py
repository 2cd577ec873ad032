"""Pure pieces of serve (no database): cursors, rendering, negotiation, argument parsing."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta, timezone
from zoneinfo import ZoneInfo

import marshmallow as ma
import pytest
from hypothesis import given
from hypothesis import strategies as st
from werkzeug.datastructures import MIMEAccept

from serve import cursor, render
from serve.api.data import select_columns
from serve.args import DataArgs
from shared import units
from shared.columns import TABLES
from shared.errors import BadCursor, UnknownColumn

KEY = cursor.derive_key("k")
BINDING = {"table": "hourly", "device": "D1", "order": "asc"}
T = datetime(2024, 7, 1, 12, 30, tzinfo=UTC)


def _state(device: str = "A000101", t: datetime = T) -> cursor.CursorState:
    return cursor.CursorState(cursor.Position(t, device), T - timedelta(days=7), T)


# ---- cursors -------------------------------------------------------------------------------

def test_cursor_round_trip_is_url_safe_and_opaque() -> None:
    token = cursor.encode(_state(), key=KEY, binding=BINDING)
    assert set(token) <= set("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_")
    assert "A000101" not in token and "2024" not in token
    assert cursor.decode(token, key=KEY, binding=BINDING) == _state()


@given(st.text(alphabet=st.characters(min_codepoint=33, max_codepoint=0x2FFF), min_size=1,
               max_size=64),
       st.datetimes(min_value=datetime(1971, 1, 1), max_value=datetime(2200, 1, 1),
                    timezones=st.just(UTC)))
def test_cursor_round_trip_any_device_and_time(device: str, t: datetime) -> None:
    state = _state(device, t)
    assert cursor.decode(cursor.encode(state, key=KEY, binding=BINDING), key=KEY,
                             binding=BINDING) == state


@given(st.text(max_size=120))
def test_arbitrary_text_is_never_accepted_nor_a_crash(text: str) -> None:
    with pytest.raises(BadCursor):
        cursor.decode(text, key=KEY, binding=BINDING)


def test_cursor_refused_with_other_key_or_binding() -> None:
    token = cursor.encode(_state(), key=KEY, binding=BINDING)
    with pytest.raises(BadCursor, match="garbled or altered"):
        cursor.decode(token, key=cursor.derive_key("other"), binding=BINDING)
    with pytest.raises(BadCursor, match="other parameters"):
        cursor.decode(token, key=KEY, binding={**BINDING, "device": "D2"})


def test_every_single_bit_flip_is_detected() -> None:
    import base64

    token = cursor.encode(_state(), key=KEY, binding=BINDING)
    raw = base64.urlsafe_b64decode(token + "=" * (-len(token) % 4))
    for i in range(len(raw) * 8):
        flipped = bytearray(raw)
        flipped[i // 8] ^= 1 << (i % 8)
        mangled = base64.urlsafe_b64encode(bytes(flipped)).rstrip(b"=").decode()
        with pytest.raises(BadCursor):
            cursor.decode(mangled, key=KEY, binding=BINDING)


def test_fingerprint_ignores_binding_order_but_not_values() -> None:
    assert cursor.fingerprint({"a": 1, "b": None}) == cursor.fingerprint({"b": "", "a": 1})
    assert cursor.fingerprint({"a": 1}) != cursor.fingerprint({"a": 2})


# ---- rendering -------------------------------------------------------------------------------

@pytest.mark.parametrize("t,tz,expected", [
    (datetime(2019, 7, 1, tzinfo=UTC), ZoneInfo("America/New_York"), "2019-06-30T20:00:00-0400"),
    (datetime(2019, 1, 1, tzinfo=UTC), ZoneInfo("America/New_York"), "2018-12-31T19:00:00-0500"),
    (datetime(2019, 1, 1, tzinfo=UTC), timezone(timedelta(hours=-4)), "2018-12-31T20:00:00-0400"),
    (datetime(2019, 1, 1, tzinfo=UTC), ZoneInfo("Asia/Kathmandu"), "2019-01-01T05:45:00+0545"),
    (datetime(2019, 1, 1, 0, 0, 0, 500000, tzinfo=UTC), UTC,
     "2019-01-01T00:00:00.500000+0000"),
    (datetime(2019, 1, 1, tzinfo=UTC), timezone(timedelta(seconds=-25201)),
     "2018-12-31T16:59:59-070001"),
], ids=["edt", "est", "flat", "kathmandu", "micro", "seconds"])
def test_format_local(t: datetime, tz, expected: str) -> None:  # type: ignore[no-untyped-def]
    assert render.format_local(t, tz) == expected


@pytest.mark.parametrize("header,expected", [
    ("", False), ("text/csv", True), ("text/csv;q=0", False), ("application/json", False),
    ("application/json;q=0.9, text/csv", True), ("text/csv;q=0.5, application/json", False),
    ("*/*", False), ("text/csv, application/json", True),
])
def test_wants_csv(header: str, expected: bool) -> None:
    from werkzeug.http import parse_accept_header

    assert render.wants_csv(parse_accept_header(header, MIMEAccept)) is expected


def test_units_header_order_and_labels() -> None:
    hourly = TABLES["hourly"]
    chosen = {p: units.parse_unit(p, None) for p in units.UNIT_PARAMS}
    assert render.units_header(hourly.columns, chosen) == "C,mb,pct,mm,mps"
    chosen["temp"] = units.parse_unit("temp", "F")
    gdd_only = [TABLES["daily"].column("gdd")]
    assert render.units_header(gdd_only, chosen) == "F"
    assert render.units_header([hourly.column("time")], chosen) == ""


def test_json_rows_join_chunks_into_one_array() -> None:
    writer = render.JsonRows(["time", "v"], None)
    parts = [writer.start(), writer.chunk([(T, 1.5), (T, None)]), writer.chunk([]),
             writer.chunk([(T, 2.0)]), writer.end()]
    assert json.loads(b"".join(parts)) == [
        {"time": "2024-07-01T12:30:00Z", "v": 1.5}, {"time": "2024-07-01T12:30:00Z", "v": None},
        {"time": "2024-07-01T12:30:00Z", "v": 2.0}]
    empty = render.JsonRows(["time"], None)
    assert empty.start() + empty.end() == b"[]"


def test_csv_header_quotes_like_csv() -> None:
    cols = [TABLES["hourly"].column(n) for n in ("time", "tair")]
    assert render.csv_header(cols, True) == b"time,tair,local_time\n"


def test_copy_body_sends_head_then_blocks_until_an_empty_one() -> None:
    blocks = [b"b,2\n", b"", b"never read\n"]
    assert list(render.copy_body(b"h\na,1\n", lambda: blocks.pop(0))) == [b"h\na,1\n", b"b,2\n"]
    assert blocks == [b"never read\n"]


def test_json_body_fetches_lazily() -> None:
    fetched = []
    chunks = [[(T, float(i))] * 2 for i in range(1, 4)] + [[]]

    def fetch():  # type: ignore[no-untyped-def]
        fetched.append(1)
        return chunks[len(fetched)]

    it = render.json_body(render.JsonRows(["time", "v"], None), chunks[0], fetch, 2)
    assert next(it) == b"["
    next(it)
    assert fetched == []  # the second chunk is read only when the first has been sent
    rest = b"".join(it)
    assert len(fetched) == 3 and rest.endswith(b"]")


def test_json_body_short_chunk_is_the_last() -> None:
    def fetch():  # type: ignore[no-untyped-def]
        raise AssertionError("a chunk shorter than chunk_rows ends the page")

    body = b"".join(render.json_body(render.JsonRows(["v"], None), [(1.0,)], fetch, 10))
    assert json.loads(body) == [{"v": 1.0}]


# ---- arguments -------------------------------------------------------------------------------

def test_data_args_parse_and_ignore_unknown() -> None:
    args = DataArgs().load({"device": "D1", "limit": "10", "order": "DESC", "temp": "F",
                            "start_time": "2019-07-01", "end_time": "2019-07-01T08:00:00Z",
                            "local_time": "-04:00", "vol": "x"})
    assert args["limit"] == 10 and args["order"] == "desc" and args["temp"].label == "F"
    assert args["start_time"].day is not None and args["end_time"].day is None
    assert args["local_time"].tz.utcoffset(None) == timedelta(hours=-4)
    assert "vol" not in args


@pytest.mark.parametrize("field,value", [
    ("limit", "0"), ("limit", "10001"), ("limit", "x"), ("order", "sideways"),
    ("start_time", "2019-02-30"), ("local_time", "Nowhere/City"), ("speed", "furlongs"),
])
def test_data_args_errors_name_the_field(field: str, value: str) -> None:
    with pytest.raises(ma.ValidationError) as info:
        DataArgs().load({field: value})
    assert list(info.value.messages) == [field]


def test_select_columns() -> None:
    hourly = TABLES["hourly"]
    assert select_columns(hourly, None, local_time=False) == hourly.columns
    assert [c.name for c in select_columns(hourly, "rh,time,rh", local_time=False)] == \
        ["rh", "time"]
    assert [c.name for c in select_columns(hourly, "local_time,rh", local_time=True)] == ["rh"]
    with pytest.raises(UnknownColumn, match="nope, zip"):
        select_columns(hourly, "time,nope,zip", local_time=False)
