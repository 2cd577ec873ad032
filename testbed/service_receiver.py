"""`python -m testbed.service_receiver PORT OUT`: stands in for the services a webhook channel's
`format` talks to, on 127.0.0.1, checking each request against the shape that service's API
documents and answering as it does (no traffic leaves the machine):

- `/slack/...`: Slack / Mattermost / Rocket.Chat incoming webhook: a JSON object whose `text`
  is a non-empty string; answers 200 `ok`.
- `/teams/...`: Microsoft Teams incoming webhook / Workflows: `type` `message`, `attachments`
  of Adaptive Cards; answers 202.
- `/bot<token>/sendMessage`: Telegram Bot API: `chat_id` and `text` (1..4096 characters);
  answers 200 `{"ok": true, ...}`.
- `/`: ntfy, publish as JSON: `topic` (ntfy's topic rule), `message`, optional `title`,
  `priority` 1..5, `tags`; answers 200.
- `/v2/enqueue`: PagerDuty Events API v2: `routing_key` (32), `event_action`, `dedup_key`,
  `payload` for a trigger; answers 202.

(alerts/delivery/formats.py cites each service's page.) A request that does not fit is
answered 400 with the service's kind of error body. Every
request is appended to OUT as one JSON line: `service`, `path`, `headers`, `body` (as text),
`problems` (empty when it fits) and `received`.
"""

from __future__ import annotations

import argparse
import json
import re
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

MAX_BODY = 1 << 20
TELEGRAM_PATH = re.compile(r"^/bot(\d+:[A-Za-z0-9_-]{10,})/sendMessage$")
NTFY_TOPIC = re.compile(r"^[-_A-Za-z0-9]{1,64}$")
PD_SEVERITIES = ("critical", "error", "warning", "info")


def service_of(path: str) -> str:
    """Which service a path stands for."""
    if path.startswith("/slack"):
        return "slack"
    if path.startswith("/teams"):
        return "teams"
    if TELEGRAM_PATH.match(path) or path.endswith("/sendMessage"):
        return "telegram"
    if path == "/v2/enqueue":
        return "pagerduty"
    return "ntfy" if path == "/" else "unknown"


def _string(doc: dict[str, Any], key: str, *, most: int = 1 << 20) -> bool:
    value = doc.get(key)
    return isinstance(value, str) and 0 < len(value) <= most


def problems_of(service: str, path: str, doc: Any, content_type: str) -> list[str]:
    """What does not fit the service's documented request (empty: it fits)."""
    if service == "unknown":
        return [f"no service at {path}"]
    if not content_type.startswith("application/json"):
        return [f"Content-Type {content_type!r} is not application/json"]
    if not isinstance(doc, dict):
        return ["the body is not a JSON object"]
    found: list[str] = []
    if service == "slack":
        if not _string(doc, "text"):
            found.append("text: a non-empty string is required (no_text)")
    elif service == "teams":
        attachments = doc.get("attachments")
        if doc.get("type") != "message":
            found.append("type must be 'message'")
        if not isinstance(attachments, list) or not attachments:
            found.append("attachments: a non-empty list is required")
        else:
            for a in attachments:
                card = a.get("content") if isinstance(a, dict) else None
                if not isinstance(a, dict) or a.get(
                        "contentType") != "application/vnd.microsoft.card.adaptive":
                    found.append("attachments[].contentType must be the adaptive card type")
                elif not isinstance(card, dict) or card.get("type") != "AdaptiveCard" or \
                        not isinstance(card.get("body"), list) or not _string(card, "version"):
                    found.append("attachments[].content must be an AdaptiveCard with a "
                                 "version and a body")
    elif service == "telegram":
        if not TELEGRAM_PATH.match(path):
            found.append("the path must be /bot<token>/sendMessage")
        if not isinstance(doc.get("chat_id"), (int, str)) or doc.get("chat_id") == "":
            found.append("chat_id is required")
        if not _string(doc, "text", most=4096):
            found.append("message text is empty or longer than 4096")
    elif service == "ntfy":
        if not isinstance(doc.get("topic"), str) or not NTFY_TOPIC.match(doc["topic"]):
            found.append("topic is missing or invalid")
        for key in ("message", "title"):
            if key in doc and not isinstance(doc[key], str):
                found.append(f"{key} must be a string")
        if "priority" in doc and doc["priority"] not in (1, 2, 3, 4, 5):
            found.append("priority must be 1..5")
        if "tags" in doc and (not isinstance(doc["tags"], list)
                              or not all(isinstance(t, str) for t in doc["tags"])):
            found.append("tags must be a list of strings")
    elif service == "pagerduty":
        found += _pagerduty(doc)
    return found


def _pagerduty(doc: dict[str, Any]) -> list[str]:
    found = []
    if not isinstance(doc.get("routing_key"), str) or len(doc["routing_key"]) != 32:
        found.append("routing_key must be 32 characters")
    action = doc.get("event_action")
    if action not in ("trigger", "acknowledge", "resolve"):
        found.append("event_action must be trigger, acknowledge or resolve")
    if "dedup_key" in doc and not _string(doc, "dedup_key", most=255):
        found.append("dedup_key must be a string of at most 255 characters")
    if action in ("acknowledge", "resolve") and "dedup_key" not in doc:
        found.append("dedup_key is required to acknowledge or resolve")
    if action == "trigger":
        payload = doc.get("payload")
        if not isinstance(payload, dict):
            found.append("payload is required for a trigger")
        else:
            if not _string(payload, "summary", most=1024):
                found.append("payload.summary: 1 to 1024 characters")
            if not _string(payload, "source"):
                found.append("payload.source is required")
            if payload.get("severity") not in PD_SEVERITIES:
                found.append("payload.severity must be critical, error, warning or info")
    return found


def answer(service: str, doc: Any, problems: list[str]) -> tuple[int, dict[str, str], bytes]:
    """(status, headers, body) the service answers."""
    as_json = {"Content-Type": "application/json"}
    if service == "slack":
        return (200, {}, b"ok") if not problems else (400, {}, b"no_text")
    if service == "teams":
        return (202, {}, b"") if not problems else (400, {}, b"Bad payload")
    if service == "telegram":
        if problems:
            return 400, as_json, json.dumps({"ok": False, "error_code": 400,
                                             "description": "Bad Request: " + problems[0]}
                                            ).encode()
        return 200, as_json, json.dumps({"ok": True, "result": {
            "message_id": 1, "chat": {"id": doc["chat_id"]}, "text": doc["text"]}}).encode()
    if service == "ntfy":
        if problems:
            return 400, as_json, json.dumps({"code": 40001, "http": 400,
                                             "error": "invalid request"}).encode()
        return 200, as_json, json.dumps({"id": "sdsTest1", "time": int(time.time()),
                                         "event": "message", "topic": doc["topic"]}).encode()
    if service == "pagerduty":
        if problems:
            return 400, as_json, json.dumps({"status": "invalid event",
                                             "message": "Event object is invalid",
                                             "errors": problems}).encode()
        return 202, as_json, json.dumps({"status": "success", "message": "Event processed",
                                         "dedup_key": doc.get("dedup_key", "")}).encode()
    return 404, {}, b"not found"


def main() -> None:
    """Serve until killed."""
    parser = argparse.ArgumentParser()
    parser.add_argument("port", type=int)
    parser.add_argument("out")
    args = parser.parse_args()
    lock = threading.Lock()
    out = open(args.out, "a", encoding="utf-8")  # noqa: SIM115 (open for the process's life)

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:  # noqa: N802 (http.server's name)
            size = min(int(self.headers.get("Content-Length") or 0), MAX_BODY)
            raw = self.rfile.read(size)
            service = service_of(self.path)
            try:
                doc = json.loads(raw)
            except ValueError:
                doc = None
            found = problems_of(service, self.path, doc, self.headers.get("Content-Type", ""))
            line = json.dumps({"service": service, "path": self.path, "problems": found,
                               "headers": dict(self.headers.items()),
                               "body": raw.decode("utf-8", "replace"), "received": time.time()})
            with lock:
                out.write(line + "\n")
                out.flush()
            status, headers, body = answer(service, doc, found)
            self.send_response(status)
            for k, v in headers.items():
                self.send_header(k, v)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *a: object) -> None:  # noqa: A002
            pass

    server = ThreadingHTTPServer(("127.0.0.1", args.port), Handler)
    server.serve_forever()


if __name__ == "__main__":
    main()
