"""One webhook attempt: a Standard Webhooks signed POST to an address that passed the SSRF check.

Headers `webhook-id` (the event id, the same on every attempt), `webhook-timestamp` (this
attempt's Unix time) and `webhook-signature` (`v1,<base64 HMAC-SHA256 of id.timestamp.body>`
with the channel's whsec_ secret), made by the specification's own library (`standardwebhooks`).
The name is resolved here and the socket connects to a checked address of that answer
(shared.netguard): no DNS rebinding between check and use. Redirects are not followed (a 3xx
is a failure), the whole attempt has one deadline and at most SDS_WEBHOOK_MAX_RESPONSE bytes of
the answer are read. The deadline is kept by cutting the socket when it passes: a receiver that
trickles its status line or headers a byte at a time (each read within the socket timeout)
cannot hold a worker longer.
"""

from __future__ import annotations

import http.client
import socket
import ssl
import threading
import time
from dataclasses import dataclass
from datetime import UTC, datetime

from standardwebhooks.webhooks import Webhook

from shared import netguard

USER_AGENT = "sds-alerts/1 (Standard Webhooks)"
ANSWER_KEEP = 300  # bytes of a receiver's answer kept to show (the Test button's result)


@dataclass(frozen=True, slots=True)
class Outcome:
    """How an attempt ended: ok, the HTTP status when there was one, and what went wrong."""

    ok: bool
    status: int | None = None
    error: str | None = None
    answer: str | None = None  # the receiver's status line and first bytes, or the SMTP reply


def signed_headers(secret: str, msg_id: str, body: bytes, when: datetime) -> dict[str, str]:
    """The three Standard Webhooks headers for `body` sent at `when`."""
    signature = Webhook(secret).sign(msg_id=msg_id, timestamp=when, data=body.decode())
    return {"webhook-id": msg_id, "webhook-timestamp": str(int(when.timestamp())),
            "webhook-signature": signature}


class _PinnedConnection(http.client.HTTPConnection):
    """An HTTP connection to a fixed, already checked address; Host is still the URL's host.
    Its socket is shut down when `deadline` (monotonic) passes."""

    def __init__(self, host: str, port: int, address: str, deadline: float,
                 tls: ssl.SSLContext | None) -> None:
        super().__init__(host, port, timeout=max(0.001, deadline - time.monotonic()))
        self._address = address
        self._tls = tls
        self._deadline = deadline
        self._raw: socket.socket | None = None
        self._cutter: threading.Timer | None = None
        self.cut = False

    def connect(self) -> None:
        """Open the socket to the pinned address (and TLS with the URL's host name)."""
        sock = socket.create_connection((self._address, self.port), self.timeout)
        self._raw = sock
        self._cutter = threading.Timer(max(0.0, self._deadline - time.monotonic()), self._cut)
        self._cutter.daemon = True
        self._cutter.start()
        if self._tls is not None:
            sock = self._tls.wrap_socket(sock, server_hostname=self.host)
        self.sock = sock

    def _cut(self) -> None:
        self.cut = True
        try:
            if self._raw is not None:
                self._raw.shutdown(socket.SHUT_RDWR)  # the blocked read returns at once
        except OSError:
            pass

    def close(self) -> None:
        """Close, and forget the deadline."""
        if self._cutter is not None:
            self._cutter.cancel()
        super().close()


def _read_capped(response: http.client.HTTPResponse, limit: int, deadline: float) -> bytes:
    """Read up to `limit` bytes of the answer before `deadline` (the rest is left unread);
    the first ANSWER_KEEP bytes of it."""
    left = limit
    kept = b""
    while left > 0:
        if time.monotonic() > deadline:
            raise TimeoutError("answer not read within the attempt's deadline")
        chunk = response.read1(min(left, 16384))
        if not chunk:
            break
        if len(kept) < ANSWER_KEEP:
            kept += chunk[:ANSWER_KEEP - len(kept)]
        left -= len(chunk)
    return kept


def answer_text(status: int, reason: str, body: bytes) -> str:
    """What the receiver answered, as stored and shown: `HTTP 200 OK: <first bytes>`."""
    text = body.decode("utf-8", "replace").strip()
    return f"HTTP {status} {reason}" + (f": {text}" if text else "")


def post(url: str, secret: str, msg_id: str, body: bytes, *, timeout: float,
         max_response: int, allow_private: bool) -> Outcome:
    """One signed POST of `body` to `url`; 2xx is success, anything else a failure."""
    headers = signed_headers(secret, msg_id, body, datetime.now(UTC))
    headers["Content-Type"] = "application/json"
    return send(url, body, headers, timeout=timeout, max_response=max_response,
                allow_private=allow_private)


def send(url: str, body: bytes, headers: dict[str, str], *, timeout: float,
         max_response: int, allow_private: bool) -> Outcome:
    """One POST of `body` with `headers` to `url` over a checked address; 2xx is success,
    anything else a failure. The answer's start is kept in the outcome."""
    deadline = time.monotonic() + timeout
    try:
        target = netguard.parse_url(url)
        addresses = netguard.allowed_addresses(target.host, target.port,
                                               allow_private=allow_private)
    except netguard.Refused as exc:
        return Outcome(False, None, f"refused: {exc}")
    headers = {**headers, "User-Agent": USER_AGENT}
    tls = ssl.create_default_context() if target.scheme == "https" else None
    last = "no address answered"
    for address in addresses:
        left = deadline - time.monotonic()
        if left <= 0:
            return Outcome(False, None, f"timed out after {timeout:g} s")
        conn = _PinnedConnection(target.host, target.port, address, deadline, tls)
        try:
            conn.request("POST", target.path, body=body, headers=headers)
            response = conn.getresponse()
            kept = _read_capped(response, max_response, deadline)
            status = response.status
        except (OSError, http.client.HTTPException, ssl.SSLError) as exc:
            if conn.cut:
                return Outcome(False, None, f"{address}: timed out after {timeout:g} s")
            last = f"{address}: {type(exc).__name__}: {exc}"[:500]
            continue
        finally:
            conn.close()
        answer = answer_text(status, response.reason, kept)
        if 200 <= status < 300:
            return Outcome(True, status, answer=answer)
        # A redirect is not followed: its target would escape the check above.
        return Outcome(False, status, f"HTTP {status} {response.reason}"[:500], answer=answer)
    return Outcome(False, None, last)
