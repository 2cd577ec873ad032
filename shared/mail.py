"""Outgoing email through the operator's SMTP server (SDS_SMTP_*): the one SMTP conversation of
the service, held by the deliverer for alert email (alerts/delivery/mail.py) and for the
invitation and password-reset mail of the durable outbox (shared/mailbox.py)."""

from __future__ import annotations

import smtplib
import ssl
from email import policy as email_policy
from email.message import EmailMessage
from typing import Any

from shared.config import Settings

SECURITY = ("none", "starttls", "tls")
"""Values of SDS_SMTP_SECURITY."""

# Headers folded at RFC 5322's hard limit, not at 78: Python folds a subject with a non-ASCII
# word ("1 °C") before the encoded word, and readers then unfold it with two spaces
# ("at or above 1  °C"). Subjects are one line of at most a few hundred characters.
_POLICY = email_policy.default.clone(max_line_length=998)


def configured(settings: Settings) -> bool:
    """Whether email is on (SDS_SMTP_HOST set)."""
    return bool(settings.smtp_host)


def new_message(settings: Settings, *, to: str, subject: str, text: str) -> EmailMessage:
    """A plain-text message from SDS_SMTP_FROM."""
    msg = EmailMessage(policy=_POLICY)
    msg["From"] = settings.smtp_from
    msg["To"] = to
    msg["Subject"] = subject
    msg.set_content(text)
    return msg


class _ReplySMTP(smtplib.SMTP):
    """An SMTP client that keeps the server's reply to DATA (what the dashboard's Test shows)."""

    last_reply = ""

    def data(self, msg: Any) -> tuple[int, bytes]:
        """Send the message's data; keep the server's answer."""
        code, text = super().data(msg)
        self.last_reply = f"{code} {text.decode('utf-8', 'replace')}"
        return code, text


class _ReplySMTPSSL(smtplib.SMTP_SSL):
    """The TLS-from-the-first-byte client that keeps the server's reply to DATA."""

    last_reply = ""

    def data(self, msg: Any) -> tuple[int, bytes]:
        """Send the message's data; keep the server's answer."""
        code, text = super().data(msg)
        self.last_reply = f"{code} {text.decode('utf-8', 'replace')}"
        return code, text


def send(settings: Settings, msg: EmailMessage) -> str | None:
    """Send `msg` to its recipients; None when the server accepted it for every recipient,
    else what went wrong (email off, a bad security setting, a refused recipient, any SMTP or
    network error), at most 500 characters."""
    return send_with_reply(settings, msg)[0]


def send_with_reply(settings: Settings, msg: EmailMessage) -> tuple[str | None, str | None]:
    """`send`, and the server's reply to the message's data (`250 ...`) when it got that far."""
    if not settings.smtp_host:
        return "email is off: SDS_SMTP_HOST is not set", None
    if settings.smtp_security not in SECURITY:
        return f"SDS_SMTP_SECURITY must be one of {', '.join(SECURITY)}", None
    smtp: _ReplySMTP | _ReplySMTPSSL | None = None
    try:
        if settings.smtp_security == "tls":
            smtp = _ReplySMTPSSL(settings.smtp_host, settings.smtp_port,
                                 timeout=settings.smtp_timeout,
                                 context=ssl.create_default_context())
        else:
            smtp = _ReplySMTP(settings.smtp_host, settings.smtp_port,
                              timeout=settings.smtp_timeout)
        with smtp:
            if settings.smtp_security == "starttls":
                smtp.starttls(context=ssl.create_default_context())
            if settings.smtp_username:
                smtp.login(settings.smtp_username, settings.smtp_password or "")
            refused = smtp.send_message(msg)
    except (OSError, smtplib.SMTPException) as exc:
        return f"SMTP: {type(exc).__name__}: {exc}"[:500], None
    reply = smtp.last_reply[:500] or None
    if refused:
        return f"SMTP refused {', '.join(sorted(refused))}"[:500], reply
    return None, reply
