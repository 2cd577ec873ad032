"""Email through the operator's SMTP server (SDS_SMTP_*): one message per event and channel.

The message's Message-ID is derived from the event id, so a duplicate delivery of one event is
recognisable in a mailbox as it is by `webhook-id` at a webhook receiver; the event id is also
in the `X-SDS-Event-Id` header and in the JSON part of the text.
"""

from __future__ import annotations

import smtplib
import ssl
from collections.abc import Sequence
from email.message import EmailMessage
from email.utils import formatdate
from typing import Any

from alerts.delivery.payload import email_text
from alerts.delivery.webhook import Outcome
from shared.config import Settings

SECURITY = ("none", "starttls", "tls")


def message(settings: Settings, event: dict[str, Any], recipients: Sequence[str]) -> EmailMessage:
    """The email of `event` to `recipients`."""
    subject, text = email_text(event)
    msg = EmailMessage()
    msg["From"] = settings.smtp_from
    msg["To"] = ", ".join(recipients)
    msg["Subject"] = subject
    msg["Date"] = formatdate(usegmt=True)
    domain = settings.smtp_from.rpartition("@")[2] or "localhost"
    msg["Message-ID"] = f"<{event['id']}@{domain}>"
    msg["X-SDS-Event-Id"] = str(event["id"])
    msg.set_content(text)
    return msg


def send(settings: Settings, event: dict[str, Any], recipients: Sequence[str]) -> Outcome:
    """Send the event's email; a refused recipient or any SMTP error is a failed attempt."""
    if not settings.smtp_host:
        return Outcome(False, None, "email is off: SDS_SMTP_HOST is not set")
    if settings.smtp_security not in SECURITY:
        return Outcome(False, None, f"SDS_SMTP_SECURITY must be one of {', '.join(SECURITY)}")
    if not recipients:
        return Outcome(False, None, "no recipients")
    msg = message(settings, event, recipients)
    try:
        smtp: smtplib.SMTP
        if settings.smtp_security == "tls":
            smtp = smtplib.SMTP_SSL(settings.smtp_host, settings.smtp_port,
                                    timeout=settings.smtp_timeout,
                                    context=ssl.create_default_context())
        else:
            smtp = smtplib.SMTP(settings.smtp_host, settings.smtp_port,
                                timeout=settings.smtp_timeout)
        with smtp:
            if settings.smtp_security == "starttls":
                smtp.starttls(context=ssl.create_default_context())
            if settings.smtp_username:
                smtp.login(settings.smtp_username, settings.smtp_password or "")
            refused = smtp.send_message(msg)
    except (OSError, smtplib.SMTPException) as exc:
        return Outcome(False, None, f"SMTP: {type(exc).__name__}: {exc}"[:500])
    if refused:
        return Outcome(False, None, f"SMTP refused {', '.join(sorted(refused))}"[:500])
    return Outcome(True, 250)
