"""`handle(topic, payload)`: what one message becomes, without a broker or a database."""

from __future__ import annotations

import json
from datetime import UTC, datetime

import pytest

from ingest import handler
from ingest.handler import Handler, handle
from ingest.payload import Limits

NOW = datetime(2024, 7, 1, 12, 3, tzinfo=UTC)


def test_readings_health_and_rejections() -> None:
    body = json.dumps([{"time": "2024-07-01T12:00:00Z", "tair": 20.0},
                       {"time": "2024-07-01T12:00:00Z", "rh": 7}]).encode()
    msg = handle("sensors/A1/readings", body, received=NOW)
    assert (msg.device, msg.kind, msg.received) == ("A1", "readings", NOW)
    assert [r.values for r in msg.decoded.readings] == [{"tair": 20.0}]
    assert [(r.index, r.code) for r in msg.decoded.rejections] == [(1, "out_of_range")]
    assert msg.quarters == {datetime(2024, 7, 1, 12, 0, tzinfo=UTC)}
    health = handle("p/A1/health", b'{"time": "2024-07-01T12:01:17Z", "fw": "1.0"}',
                    prefix="p", received=NOW)
    assert health.kind == "health" and health.decoded.readings[0].values == {"fw": "1.0"}


def test_bad_topic_keeps_the_device_it_names() -> None:
    msg = handle("sensors/A1/status", b"{}", received=NOW)
    assert (msg.device, msg.kind) == ("A1", None)
    assert [r.code for r in msg.decoded.rejections] == ["bad_topic"]
    assert handle("elsewhere/x", b"{}").device is None


def test_a_decoder_bug_becomes_internal_error(monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(*_a: object, **_k: object) -> None:
        raise RuntimeError("boom")

    monkeypatch.setattr(handler, "decode_payload", broken)
    msg = Handler("sensors", Limits()).handle("sensors/A1/readings", b"{}", NOW)
    assert [(r.code, "boom" in r.detail) for r in msg.decoded.rejections] == [
        ("internal_error", True)]


def test_message_names_the_quarter_hours_of_its_readings() -> None:
    """Every 5-minute slot of an hour maps to the start of its quarter (the dirty marks are
    computed per quarter)."""
    base = datetime(2024, 6, 30, 23, 0, tzinfo=UTC)
    body = json.dumps([{"time": base.replace(minute=m).isoformat(), "tair": 1.0}
                       for m in range(0, 60, 5)]).encode()
    message = handle("sensors/A1/readings", body,
                     received=datetime(2024, 7, 1, 0, 0, tzinfo=UTC))
    assert len(message.decoded.readings) == 12
    assert message.quarters == {base.replace(minute=q) for q in (0, 15, 30, 45)}
    health = handle("sensors/A1/health", json.dumps(
        {"time": base.isoformat(), "batt_pct": 50.0}).encode(),
        received=datetime(2024, 7, 1, 0, 0, tzinfo=UTC))
    assert health.quarters == set()
