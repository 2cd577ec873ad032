"""Email of alert events, one message per event and channel (the SMTP conversation: shared/mail.py).

The message's Message-ID is derived from the event id, so a duplicate delivery of one event is
recognisable in a mailbox as it is by `webhook-id` at a webhook receiver; the event id is also
in the `X-SDS-Event-Id` header and in the JSON part of the text.
"""

from __future__ import annotations

from collections.abc import Sequence
from email.message import EmailMessage
from email.utils import formatdate
from typing import Any

from alerts.delivery.payload import email_text
from alerts.delivery.webhook import Outcome
from shared import mail
from shared.config import Settings


def message(settings: Settings, event: dict[str, Any], recipients: Sequence[str]) -> EmailMessage:
    """The email of `event` to `recipients`."""
    subject, text = email_text(event)
    msg = mail.new_message(settings, to=", ".join(recipients), subject=subject, text=text)
    msg["Date"] = formatdate(usegmt=True)
    domain = settings.smtp_from.rpartition("@")[2] or "localhost"
    msg["Message-ID"] = f"<{event['id']}@{domain}>"
    msg["X-SDS-Event-Id"] = str(event["id"])
    return msg


def send(settings: Settings, event: dict[str, Any], recipients: Sequence[str]) -> Outcome:
    """Send the event's email; a refused recipient or any SMTP error is a failed attempt."""
    if not recipients:
        return Outcome(False, None, "no recipients") if mail.configured(settings) else Outcome(
            False, None, "email is off: no SMTP settings (SDS_SMTP_HOST or the organisation's)")
    problem, reply = mail.send_with_reply(settings, message(settings, event, recipients))
    return Outcome(False, None, problem, answer=reply) if problem else Outcome(
        True, 250, answer=reply)
