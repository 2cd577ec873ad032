"""What a delivery carries and when a failed one is tried again: pure functions.

The payload is Standard Webhooks' recommended envelope, `{"type": "alert.<kind>", "timestamp":
<event creation, ISO 8601>, "data": {...}}`, the same bytes for every attempt of one event, over
every channel kind (the webhook body, the MQTT message, the JSON part of an email). Its fields
are machine fields, unchanged (`title` is the event's stored title, as /api/v2/notifications
serves it); what people read (an email's subject and text) says the event in words.
"""

from __future__ import annotations

import random
from datetime import datetime
from typing import Any

import orjson

from shared import rulewords
from shared.timeutil import format_utc_z_exact

# Event columns copied into `data` beside the event's own body.
EVENT_FIELDS = ("id", "kind", "rule_id", "device", "location_id", "column_name", "value", "unit",
                "at", "title", "created_at")


def envelope(event: dict[str, Any]) -> dict[str, Any]:
    """The delivered document of an alert_events row."""
    data: dict[str, Any] = dict(event.get("body") or {})
    for key in EVENT_FIELDS:
        value = event.get(key)
        if isinstance(value, datetime):
            value = format_utc_z_exact(value)
        elif value is not None and key in ("id", "rule_id", "location_id"):
            value = str(value)
        data["column" if key == "column_name" else key] = value
    return {"type": f"alert.{event['kind']}", "timestamp": format_utc_z_exact(event["created_at"]),
            "data": data}


def encode(event: dict[str, Any]) -> bytes:
    """The envelope as compact JSON bytes (the signed webhook body)."""
    return orjson.dumps(envelope(event))


def retry_delay(attempts: int, *, base: float, cap: float,
                rand: random.Random | None = None) -> float:
    """Seconds before the next attempt after `attempts` failed ones: base x 2^(attempts-1),
    at most `cap`, with 'equal jitter' (between half and all of it), so receivers that failed
    together are not all retried at the same instant."""
    r = rand or random
    ceiling = min(cap, base * 2 ** max(0, attempts - 1))
    return ceiling / 2 + r.uniform(0, ceiling / 2)


def email_text(event: dict[str, Any]) -> tuple[str, str]:
    """(subject, plain-text body) of an event's email: the title and facts in words (the
    column's name, the value in the rule's units: shared/rulewords.py), then the event as
    JSON with its machine fields unchanged."""
    doc = envelope(event)
    data = doc["data"]
    title = rulewords.event_title(event)
    lines = [title, ""]
    if data.get("kind") is not None:
        lines.append(f"Kind: {data['kind']}")
    lines += rulewords.event_lines(event)
    if data.get("id") is not None:
        lines.append(f"Event id: {data['id']}")
    if event["kind"] == "digest":  # the day's events, one a line, before the JSON
        lines += [""] + [f"{e.get('at', '')[:16]} {e.get('kind')}: {e.get('title')}"
                         for e in data.get("events") or []]
    lines += ["", "The event as JSON:", orjson.dumps(doc, option=orjson.OPT_INDENT_2).decode()]
    prefix = {"firing": "[ALERT]", "resolved": "[RESOLVED]", "channel_disabled": "[CHANNEL "
              "DISABLED]", "test": "[TEST]", "digest": "[DIGEST]"}.get(event["kind"], "[ALERT]")
    return f"{prefix} {title}", "\n".join(lines) + "\n"
