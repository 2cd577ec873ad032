"""The durable mail outbox (migration 0180; docs/auth.md "Invitations and password reset"): the
one way the service's own mail (invitation and password-reset links) leaves it. A mail is a
`mail_outbox` row written in the transaction that makes its link (people/links.py; for a reset
asked for by email, when the deliverer resolves the queued request: `resolve_reset_requests`),
then sent, retried with back-off and given up after SDS_DELIVERY_MAX_ATTEMPTS by the deliverer
(alerts/delivery/service.py), whichever process or worker is up: nothing is dropped when busy
or lost on a restart. Two processes use it (the API and `sds` queue, the deliverer sends), so it
lives in shared/.

The body holds the link's secret: sealed with SDS_APIKEY_SEAL_KEYS when a key is set, and
erased once the mail is sent, given up or past its link's expiry.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta
from email.message import EmailMessage
from uuid import UUID

import psycopg

from shared import mail, sealing
from shared.config import Settings

REASON_MAX = 500  # characters of a stored SMTP error


@dataclass(frozen=True)
class Body:
    """A mail body as stored: sealed when a seal key is set, else its UTF-8 bytes."""

    data: bytes
    sealed: bool


def seal(settings: Settings, text: str) -> Body:
    """`text` as the outbox stores it (settings' first seal key, when there is one)."""
    sealer = sealing.secret_sealer(settings)
    return Body(sealer.seal(text), True) if sealer else Body(text.encode(), False)


def queue_link(conn: psycopg.Connection, settings: Settings, *, link: UUID, subject: str,
               text: str, mailed_only: bool) -> UUID:
    """Queue the mail of `link`, made in this same transaction, to the link's email (migration
    0180's `sds_mail_link`; committed with the link or not at all). `mailed_only`: the secret
    goes only to the inbox, so using the link proves the email."""
    body = seal(settings, text)
    row = conn.execute("SELECT sds_mail_link(%s, %s, %s, %s, %s)",
                       (link, subject, body.data, body.sealed, mailed_only)).fetchone()
    if row is None or row[0] is None:
        raise RuntimeError(f"link {link} was not made in this transaction")  # a caller's bug
    return UUID(str(row[0]))


RESOLVE_BATCH = 100  # reset requests resolved per transaction


def resolve_reset_requests(conn: psycopg.Connection) -> int:
    """Resolve the queued password-reset requests (migration 0255; queued by people/links.py
    whatever the email, so the request's time tells nothing): an active account's becomes its
    link, its mail in this outbox and its audit entry; any other is dropped. Run by the
    deliverer; returns how many were resolved."""
    total = 0
    while True:
        with conn.transaction():
            row = conn.execute("SELECT sds_reset_requests_resolve(%s)",
                               (RESOLVE_BATCH,)).fetchone()
        done = int(row[0]) if row and row[0] is not None else 0
        total += done
        if done < RESOLVE_BATCH:
            return total


@dataclass(frozen=True)
class Mail:
    """A claimed mail: its row, locked until the claiming transaction ends."""

    id: UUID
    recipient: str
    subject: str
    body: bytes
    sealed: bool
    attempts: int


_EXPIRE_SQL = ("UPDATE mail_outbox SET state = 'expired', body = NULL, last_error ="
               " 'the link expired before the mail was sent' WHERE state = 'pending'"
               " AND expires_at <= now()")
_CLAIM_SQL = ("SELECT id, recipient, subject, body, sealed, attempts FROM mail_outbox"
              " WHERE state = 'pending' AND next_attempt_at <= now() AND expires_at > now()"
              " ORDER BY next_attempt_at LIMIT 1 FOR UPDATE SKIP LOCKED")


def claim(conn: psycopg.Connection) -> Mail | None:
    """The next due mail, locked until the caller's transaction ends (two deliverers never send
    one at once; one killed mid-send leaves it pending); None when none is due. Mails whose
    link expired first are closed as `expired`. Call inside a transaction."""
    conn.execute(_EXPIRE_SQL)
    row = conn.execute(_CLAIM_SQL).fetchone()
    if row is None:
        return None
    return Mail(row[0], row[1], row[2], bytes(row[3]), row[4], row[5])


def message(settings: Settings, item: Mail, sealer: sealing.Sealer | None) -> EmailMessage | str:
    """The email of a claimed mail, or why it cannot be made (its seal key is gone)."""
    text = (sealer.open(item.body) if sealer else None) if item.sealed else item.body.decode()
    if text is None:
        return "the mail's body does not open with SDS_APIKEY_SEAL_KEYS"
    msg = mail.new_message(settings, to=item.recipient, subject=item.subject, text=text)
    domain = settings.smtp_from.rpartition("@")[2] or "localhost"
    msg["Message-ID"] = f"<{item.id}@{domain}>"  # a resend after a crash is recognisable
    return msg


def sent(conn: psycopg.Connection, item: Mail) -> None:
    """Record that the mail server took the mail; its body (the secret) is erased."""
    conn.execute("UPDATE mail_outbox SET state = 'sent', body = NULL, sent_at = now(),"
                 " attempts = attempts + 1, last_attempt_at = now(), last_error = NULL"
                 " WHERE id = %s", (item.id,))


def failed(conn: psycopg.Connection, item: Mail, error: str, *, retry_in: float,
           max_attempts: int) -> bool:
    """Record a failed attempt: retried after `retry_in` seconds, or given up (body erased)
    after `max_attempts`. True when given up."""
    attempts = item.attempts + 1
    done = attempts >= max_attempts
    conn.execute("UPDATE mail_outbox SET attempts = %s, last_attempt_at = now(),"
                 " last_error = %s, next_attempt_at = now() + %s,"
                 " state = CASE WHEN %s THEN 'failed' ELSE state END,"
                 " body = CASE WHEN %s THEN NULL ELSE body END WHERE id = %s",
                 (attempts, error.replace("\x00", "\\x00")[:REASON_MAX],
                  timedelta(seconds=retry_in), done, done, item.id))
    return done
