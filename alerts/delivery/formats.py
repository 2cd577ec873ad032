"""The message formats of a webhook channel besides the signed Standard Webhooks envelope: the
request each service's own API documents (pure functions; docs/alerts.md "Message formats").
What people read (text, titles, summaries) is in words, the column's name and the value in the
rule's units; PagerDuty's `custom_details` carries the envelope's machine fields unchanged.

- `slack`: Slack incoming webhooks, `{"text": ...}` (https://api.slack.com/messaging/webhooks);
  Mattermost (https://developers.mattermost.com/integrate/webhooks/incoming/) and Rocket.Chat
  incoming webhooks take the same body.
- `teams`: a Microsoft Teams incoming webhook or Workflows "post to a channel when a webhook
  request is received": a `message` with one Adaptive Card attachment
  (https://learn.microsoft.com/en-us/microsoftteams/platform/webhooks-and-connectors/how-to/
  connectors-using#send-adaptive-cards-using-an-incoming-webhook).
- `telegram`: Bot API sendMessage, `{"chat_id", "text"}` to
  `https://api.telegram.org/bot<token>/sendMessage` (https://core.telegram.org/bots/api#sendmessage).
- `ntfy`: publish as JSON to the server's root, `{"topic", "message", "title", "priority",
  "tags"}`; the channel's URL is the topic's URL (https://docs.ntfy.sh/publish/#publish-as-json).
- `pagerduty`: Events API v2 `enqueue`, `trigger` on firing and `resolve` on the all-clear with
  the same `dedup_key` per rule and device, so PagerDuty closes the incident it opened
  (https://developer.pagerduty.com/docs/events-api-v2/trigger-events/).
"""

from __future__ import annotations

from typing import Any
from urllib.parse import urlsplit, urlunsplit

import orjson

from alerts.delivery.payload import envelope
from shared import rulewords
from shared.channelformats import FORMATS, OPTIONS, check

SUMMARY_MAX = 1024  # PagerDuty's limit of payload.summary
_PREFIX = {"firing": "ALERT", "resolved": "RESOLVED", "test": "TEST",
           "channel_disabled": "CHANNEL DISABLED"}


def _text(event: dict[str, Any]) -> tuple[str, str, dict[str, Any]]:
    """(headline, facts one a line, the envelope's data): the title and facts in words
    (shared/rulewords.py: the column's name, the value in the rule's units)."""
    data = envelope(event)["data"]
    head = f"[{_PREFIX.get(event['kind'], 'ALERT')}] {rulewords.event_title(event)}".strip()
    return head, "\n".join(rulewords.event_lines(event)), data


def _dedup_key(data: dict[str, Any]) -> str:
    rule = data.get("rule_id") or (data.get("rule") or {}).get("id") or "rule"
    where = data.get("device") or data.get("location_id") or "organisation"
    if data.get("kind") == "test":
        return f"sds-test-{data.get('id')}"
    return f"sds-{rule}-{where}"[:255]


def _ntfy_root(url: str) -> tuple[str, str]:
    parts = urlsplit(url)
    parent, _, topic = parts.path.rpartition("/")
    return urlunsplit((parts.scheme, parts.netloc, parent or "/", "", "")), topic


__all__ = ["FORMATS", "OPTIONS", "check", "render"]


def render(fmt: str, url: str, options: dict[str, Any], event: dict[str, Any]
           ) -> tuple[str, bytes]:
    """(the URL to POST to, the JSON body) of `event` in format `fmt` (not `standard`)."""
    head, detail, data = _text(event)
    text = head + (f"\n{detail}" if detail else "")
    doc: dict[str, Any]
    if fmt == "slack":
        doc = {"text": text}
    elif fmt == "teams":
        facts = [{"title": line.partition(": ")[0], "value": line.partition(": ")[2]}
                 for line in detail.splitlines()]
        card = {"$schema": "http://adaptivecards.io/schemas/adaptive-card.json",
                "type": "AdaptiveCard", "version": "1.4",
                "body": [{"type": "TextBlock", "text": head, "weight": "Bolder", "wrap": True,
                          "size": "Medium"},
                         {"type": "FactSet", "facts": facts}]}
        doc = {"type": "message", "attachments": [
            {"contentType": "application/vnd.microsoft.card.adaptive", "contentUrl": None,
             "content": card}]}
    elif fmt == "telegram":
        doc = {"chat_id": options["chat_id"], "text": text[:4096]}
    elif fmt == "ntfy":
        url, topic = _ntfy_root(url)
        doc = {"topic": topic, "title": head, "message": detail or head,
               "priority": 4 if event["kind"] == "firing" else 3,
               "tags": ["warning"] if event["kind"] == "firing" else ["white_check_mark"]
               if event["kind"] == "resolved" else ["information_source"]}
    elif fmt == "pagerduty":
        doc = {"routing_key": options["routing_key"],
               "event_action": "resolve" if event["kind"] == "resolved" else "trigger",
               "dedup_key": _dedup_key(data)}
        if event["kind"] != "resolved":
            doc["payload"] = {"summary": head[:SUMMARY_MAX],
                              "source": data.get("device") or "sensor data service",
                              "severity": "info" if event["kind"] == "test" else "warning",
                              "timestamp": data.get("at") or data.get("created_at"),
                              "custom_details": data}
    else:
        raise ValueError(f"unknown format {fmt!r}")
    return url, orjson.dumps(doc)
