"""Pure tests of topics, payload decoding/validation and derived values (no services)."""

from __future__ import annotations

import json
import math
from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ingest import derive, jsonframe, payload, topics
from ingest.payload import Limits, decode_payload
from shared.columns import READING_INPUTS
from shared.errors import InvalidReading
from shared.quarantinecodes import REASONS

NOW = datetime(2024, 7, 1, 12, 2, 30, tzinfo=UTC)
LIMITS = Limits(max_payload=4096, max_future=timedelta(minutes=5), horizon=timedelta(days=400))


def decode(body: object, kind: str = "readings", device: str = "A1", raw: bytes | None = None):
    data = raw if raw is not None else json.dumps(body).encode()
    return decode_payload(data, kind=kind, device=device, now=NOW, limits=LIMITS)


def test_topics_parse_and_reject() -> None:
    assert topics.parse_topic("sensors/A000101/readings", "sensors") == topics.DeviceTopic(
        "A000101", "readings")
    assert topics.parse_topic("sensors/A-1.x_2/health", "sensors").kind == "health"
    for bad in ("sensors/A1/other", "other/A1/readings", "sensors/A1/readings/x",
                "sensors//readings", "sensors/A 1/readings", "sensors/A1"):
        with pytest.raises(InvalidReading) as exc:
            topics.parse_topic(bad, "sensors")
        assert exc.value.code == "bad_topic"
    # Everything under the prefix, so a device's stray topic is quarantined, not unheard.
    assert topics.subscriptions("p") == ["p/#"]
    assert topics.topic_device("sensors/A1/other/x", "sensors") == "A1"
    assert topics.topic_device("sensors/A 1/readings", "sensors") is None
    assert topics.topic_device("other/A1/readings", "sensors") is None


def test_single_object_accepted_with_int_and_null_values() -> None:
    out = decode({"time": "2024-07-01T12:00:00Z", "tair": 21, "rh": 0.5, "p": None,
                  "device": "A1"})
    assert out.rejections == []
    [r] = out.readings
    assert r.index is None and r.time == datetime(2024, 7, 1, 12, tzinfo=UTC)
    assert r.values == {"tair": 21.0, "rh": 0.5}
    assert type(r.values["tair"]) is float


def test_offsets_normalised_to_utc() -> None:
    out = decode([{"time": "2024-07-01T12:00:00+00:00", "tair": 1},
                  {"time": "2024-07-01T13:00:00+01:00", "tair": 2},
                  {"time": "2024-07-01T12:00:00.000Z", "tair": 3}])
    assert {r.time for r in out.readings} == {datetime(2024, 7, 1, 12, tzinfo=UTC)}


@pytest.mark.parametrize("raw,code", [
    (b"x" * 5000, "payload_too_large"),
    (b"\xff\xfe{\"time\": 1}", "not_utf8"),
    (b"{\"time\": ", "bad_json"),
    (b"", "bad_json"),
    (b"[]", "bad_shape"),
    (b"42", "bad_shape"),
    (b"\"text\"", "bad_shape"),
], ids=["too_large", "not_utf8", "truncated", "empty", "empty_array", "number", "string"])
def test_message_level_rejections(raw: bytes, code: str) -> None:
    out = decode(None, raw=raw)
    assert out.readings == []
    [rej] = out.rejections
    assert rej.index is None and rej.code == code and rej.detail


def test_size_checked_before_parsing() -> None:
    # Not even valid JSON: the size rule must fire first, without parsing.
    out = decode(None, raw=b"{" * 5000)
    assert out.rejections[0].code == "payload_too_large"
    assert "5000 bytes" in out.rejections[0].detail


GOOD = {"time": "2024-07-01T12:00:00Z", "tair": 20.0}


@pytest.mark.parametrize("reading,code,fragment", [
    ({"tair": 20.0}, "missing_time", "time: missing"),
    ({"time": "yesterday", "tair": 1.0}, "bad_time", "not an ISO 8601"),
    ({"time": "2024-07-01T12:00:00", "tair": 1.0}, "bad_time", "no UTC offset"),
    ({"time": 1719835200, "tair": 1.0}, "bad_time", "expected an ISO 8601 string"),
    ({"time": "2024-07-01T12:01:00Z", "tair": 1.0}, "off_grid", "5-minute grid"),
    ({"time": "2024-07-01T12:00:30Z", "tair": 1.0}, "off_grid", "5-minute grid"),
    ({"time": "2024-07-01T12:10:00Z", "tair": 1.0}, "future_time", "in the future"),
    ({"time": "2023-01-01T00:00:00Z", "tair": 1.0}, "too_old", "older than"),
    ({"time": "2024-07-01T12:00:00Z", "tair": "20"}, "wrong_type", "tair: expected a number"),
    ({"time": "2024-07-01T12:00:00Z", "tair": True}, "wrong_type", "a boolean"),
    ({"time": "2024-07-01T12:00:00Z", "tair": [1]}, "wrong_type", "an array"),
    ({"time": "2024-07-01T12:00:00Z", "tair": 71.0}, "out_of_range", "tair: 71.0 is outside"),
    ({"time": "2024-07-01T12:00:00Z", "rh": 1.5}, "out_of_range", "rh: 1.5 is outside 0..1"),
    ({"time": "2024-07-01T12:00:00Z", "precip": -0.1}, "out_of_range", "precip"),
    ({"time": "2024-07-01T12:00:00Z", "tair": 10 ** 400}, "out_of_range", "tair"),
    ({"time": "2024-07-01T12:00:00Z"}, "no_values", "no measurement"),
    ({"time": "2024-07-01T12:00:00Z", "tair": None}, "no_values", "no measurement"),
    ({"time": "2024-07-01T12:00:00Z", "tair": 1.0, "device": "B2"}, "device_mismatch", "'B2'"),
], ids=lambda v: v if isinstance(v, str) and "_" in v else None)
def test_reading_rejections_keep_good_neighbours(reading: dict, code: str, fragment: str) -> None:
    out = decode([GOOD, reading, {**GOOD, "time": "2024-07-01T11:55:00Z"}])
    assert [r.index for r in out.readings] == [0, 2]
    [rej] = out.rejections
    assert rej.index == 1 and rej.code == code
    assert fragment in rej.detail and rej.detail.startswith("reading 1: ")


@pytest.mark.parametrize("literal", ["NaN", "Infinity", "-Infinity"])
def test_non_finite_numbers_reject_only_their_reading(literal: str) -> None:
    raw = ('[{"time": "2024-07-01T12:00:00Z", "tair": %s},'  # noqa: UP031 - JSON braces
           ' {"time": "2024-07-01T11:55:00Z", "tair": 3}]' % literal).encode()
    out = decode(None, raw=raw)
    assert [r.index for r in out.readings] == [1]
    assert out.rejections[0].code == "not_finite" and literal in out.rejections[0].detail


def test_overflowing_float_is_not_finite() -> None:
    out = decode(None, raw=b'{"time": "2024-07-01T12:00:00Z", "tair": 1e999}')
    assert out.rejections[0].code in ("not_finite", "bad_json")


def test_several_problems_reported_together_first_code_wins() -> None:
    out = decode({"time": "2024-07-01T12:01:00Z", "tair": "x", "rh": 7})
    [rej] = out.rejections
    assert rej.code == "off_grid"
    assert "tair: expected a number" in rej.detail and "rh: 7" in rej.detail


def test_unknown_fields_ignored_and_counted() -> None:
    out = decode([{**GOOD, "colour": "blue", "tdew": 3.0},
                  {**GOOD, "time": "2024-07-01T11:55:00Z", "x": 1}])
    assert len(out.readings) == 2 and out.unknown_fields == 3
    assert "colour" not in out.readings[0].values and "tdew" not in out.readings[0].values


def test_health_payload_not_bound_to_grid() -> None:
    out = decode({"time": "2024-07-01T12:01:17Z", "batt_pct": 88, "batt_volt": 3.9,
                  "rssi": -71, "sys_temp": 30.5, "fw": "1.4.2"}, kind="health")
    assert out.rejections == []
    assert out.readings[0].values["fw"] == "1.4.2"
    out = decode({"time": "2024-07-01T12:00:00Z", "fw": 12, "batt_pct": 101}, kind="health")
    assert out.rejections[0].code == "wrong_type" and "batt_pct" in out.rejections[0].detail


def test_every_registry_input_has_a_check() -> None:
    assert payload.fields_of("readings") == tuple(c.name for c in READING_INPUTS)
    for col in READING_INPUTS:
        lo, hi = col.valid_range
        ok = decode({"time": "2024-07-01T12:00:00Z", col.name: hi})
        bad = decode({"time": "2024-07-01T12:00:00Z", col.name: hi + 1})
        assert ok.readings and bad.rejections[0].code == "out_of_range", col.name


def test_every_reason_code_documented() -> None:
    from pathlib import Path
    doc = (Path(__file__).resolve().parents[2] / "docs" / "ingest.md").read_text()
    for code in REASONS:
        assert f"`{code}`" in doc, code


@given(st.recursive(st.none() | st.booleans() | st.floats() | st.integers() | st.text(),
                    lambda kids: st.lists(kids, max_size=4)
                    | st.dictionaries(st.sampled_from(["time", "tair", "rh", "device", "z"])
                                      | st.text(max_size=5), kids, max_size=5),
                    max_leaves=20))
def test_any_json_value_decodes_without_exceptions(value: object) -> None:
    raw = json.dumps(value).encode()
    out = decode(None, raw=raw)
    n = len(value) if isinstance(value, list) and value else 1
    # Every reading ends up exactly once: accepted or rejected.
    if out.rejections and out.rejections[0].index is None:
        assert out.readings == [] and len(out.rejections) == 1
    else:
        assert len(out.readings) + len(out.rejections) == n
    for r in out.readings:
        assert all(isinstance(v, float) and math.isfinite(v) for v in r.values.values())


@given(st.binary(max_size=200))
def test_any_bytes_decode_without_exceptions(raw: bytes) -> None:
    out = decode(None, raw=raw)
    assert out.readings or out.rejections


# ---- derived values --------------------------------------------------------------------------

def test_fao56_saturation_vapour_pressure_table() -> None:
    # FAO-56 Annex 2, Table 2.3: e°(T) at 1, 20 and 35 C.
    assert derive.saturation_vapour_pressure(1.0) == pytest.approx(0.657, abs=5e-4)
    assert derive.saturation_vapour_pressure(20.0) == pytest.approx(2.338, abs=5e-4)
    assert derive.saturation_vapour_pressure(35.0) == pytest.approx(5.623, abs=5e-4)


def test_dew_point_inverts_saturation_and_vpd() -> None:
    d = derive.derive({"tair": 25.0, "rh": 0.6}, None)
    es = derive.saturation_vapour_pressure(25.0)
    assert d["ea"] == pytest.approx(0.6 * es)
    assert d["vpd"] == pytest.approx(0.4 * es)
    assert derive.saturation_vapour_pressure(d["tdew"]) == pytest.approx(d["ea"])
    assert d["tdew"] == pytest.approx(16.7, abs=0.1)  # psychrometric tables: 25 C, 60 % -> 16.7
    assert derive.derive({"tair": 25.0, "rh": 1.0}, None)["tdew"] == pytest.approx(25.0)
    assert derive.derive({"tair": 25.0, "rh": 0.0}, None)["tdew"] is None
    assert derive.derive({"tair": 25.0}, None) == {"tdew": None, "ea": None, "vpd": None,
                                                   "slp": None}


def test_sea_level_pressure() -> None:
    # 1000 m, 15 C: the standard atmosphere gives about 89.9 kPa at the station for 101.3 at sea.
    assert derive.sea_level_pressure(89.88, 1000.0, 8.5) == pytest.approx(101.3, abs=0.3)
    assert derive.sea_level_pressure(100.0, 0.0, 20.0) == pytest.approx(100.0)
    assert derive.sea_level_pressure(89.88, 1000.0, None) == pytest.approx(101.3, abs=0.5)
    assert derive.derive({"p": 90.0, "tair": 10.0}, None)["slp"] is None  # no elevation
    assert derive.derive({"p": 90.0}, 900.0)["slp"] > 90.0


def test_docs_field_table_matches_registry() -> None:
    from pathlib import Path

    from shared.columns import HEALTH_INPUTS

    doc = (Path(__file__).resolve().parents[2] / "docs" / "ingest.md").read_text()
    lines = {line.split("|")[1].strip(): line for line in doc.splitlines()
             if line.startswith("| `")}
    for col in READING_INPUTS + HEALTH_INPUTS:
        line = lines[f"`{col.name}`"]
        if col.valid_range:
            lo, hi = col.valid_range
            assert f"{lo:g} .. {hi:g}" in line, col.name


@given(st.lists(st.sampled_from([b'"', b":", b" ", b"\t", b"\r", b"\n", b"a", b"\\", b"{", b","]),
                max_size=40).map(b"".join))
def test_key_token_count_matches_the_regular_expression(data: bytes) -> None:
    """The fast count of key tokens (bytes.count when no blank precedes a colon) is the
    regular expression's count for any bytes."""
    assert jsonframe._key_tokens(data) == len(jsonframe._KEY_TOKEN.findall(data))


def test_repeated_key_in_compact_json_is_rejected() -> None:
    """Compact encoding (no blanks at all, the fast count's case): a repeated key is still
    seen, and the other element is stored."""
    t = "2024-07-01T11:55:00Z"
    out = decode(None, raw=f'[{{"time":"{t}","tair":1,"tair":2}},{{"time":"{t}","rh":0.5}}]'
                 .encode())
    assert [(r.index, r.code) for r in out.rejections] == [(0, "duplicate_key")]
    assert [r.index for r in out.readings] == [1]
