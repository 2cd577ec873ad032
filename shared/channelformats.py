"""The message formats a webhook channel may have, what each needs beside its URL, and the
check of a channel's URL and options against its format: one place for the API (which refuses a
bad channel), the dashboard (which offers the formats) and the deliverer
(alerts/delivery/formats.py renders each; docs/alerts.md "Message formats").
"""

from __future__ import annotations

import re
from typing import Any
from urllib.parse import urlsplit

FORMATS = ("standard", "slack", "teams", "telegram", "ntfy", "pagerduty")
"""Values of a webhook channel's `format` (`standard`: the signed envelope)."""

OPTIONS: dict[str, tuple[str, ...]] = {"telegram": ("chat_id",), "pagerduty": ("routing_key",)}
"""The options each format requires beside the URL (none for the others)."""

NTFY_TOPIC = re.compile(r"^[-_A-Za-z0-9]{1,64}$")  # ntfy's own topic rule
TELEGRAM_CHAT = re.compile(r"^(-?\d{1,20}|@[A-Za-z][A-Za-z0-9_]{4,31})$")
PAGERDUTY_KEY = re.compile(r"^[A-Za-z0-9]{32}$")


def check(fmt: str, url: str, options: dict[str, Any]) -> dict[str, str]:
    """What is wrong with a channel of format `fmt` at `url` with `options`, by field (empty:
    nothing). Only the format's own options are allowed."""
    problems: dict[str, str] = {}
    wanted = OPTIONS.get(fmt, ())
    extra = sorted(set(options) - set(wanted))
    if extra:
        problems["options"] = (f"the {fmt} format takes {', '.join(wanted) or 'no options'}; "
                               f"not {', '.join(extra)}")
    for key in wanted:
        value = options.get(key)
        if not isinstance(value, str) or not value:
            problems["options"] = f"the {fmt} format needs options.{key}"
    if "options" in problems:
        return problems
    if fmt == "telegram":
        if not TELEGRAM_CHAT.match(options["chat_id"]):
            problems["options"] = "chat_id must be a chat's number or @channelusername"
        if not urlsplit(url).path.endswith("/sendMessage"):
            problems["url"] = "must be the bot's sendMessage URL (.../bot<token>/sendMessage)"
    elif fmt == "pagerduty" and not PAGERDUTY_KEY.match(options["routing_key"]):
        problems["options"] = "routing_key must be the 32-character integration key"
    elif fmt == "ntfy" and not NTFY_TOPIC.match(urlsplit(url).path.rsplit("/", 1)[-1]):
        problems["url"] = ("must be the topic's URL (https://ntfy.sh/<topic>; a topic is 1 to 64 "
                           "letters, digits, - or _)")
    return problems
