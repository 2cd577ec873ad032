"""gunicorn's own answers and access log lines made safe (loaded by deploy/gunicorn.conf.py).

- Errors gunicorn answers itself, before the app sees a request (a malformed request line or
  header, a request line over `limit_request_line` (414), too many or too long headers (431)),
  come back in the API's JSON error body (serve/errors.py) instead of gunicorn's HTML page, also
  when they pass through the edge (nginx forwards answers from gunicorn unchanged).
- `AccessLogger` writes every value of an access-log line with control characters, `"` and `\\`
  escaped as `\\xHH` (the escaping nginx uses for its log): a CR, LF or NUL decoded from the URL
  cannot start a forged line or cut one short.
"""

from __future__ import annotations

import re
import socket
from http import HTTPStatus
from typing import Any

import orjson
from gunicorn import util
from gunicorn.glogging import Logger

# Bytes below 32, DEL, and the two characters that delimit fields in the log line.
_UNSAFE = re.compile(r'[\x00-\x1f\x7f"\\]')


def escape_log_value(value: str) -> str:
    """`value` with control characters, `"` and `\\` written as `\\xHH`."""
    return _UNSAFE.sub(lambda m: f"\\x{ord(m.group()):02X}", value)


class AccessLogger(Logger):
    """gunicorn's logger whose access-log values are escaped (`escape_log_value`)."""

    def atoms(self, resp: Any, req: Any, environ: dict[str, Any], request_time: Any
              ) -> dict[str, Any]:
        """gunicorn's atoms, every text value escaped."""
        atoms = super().atoms(resp, req, environ, request_time)
        return {k: escape_log_value(v) if isinstance(v, str) else v for k, v in atoms.items()}


def error_body(status: int, message: str) -> bytes:
    """The JSON error body {code, status, message} of serve/errors.py for gunicorn's errors."""
    try:
        phrase = HTTPStatus(status).phrase
    except ValueError:
        phrase = "Error"
    return orjson.dumps({"code": status, "status": phrase, "message": message})


def write_json_error(sock: socket.socket, status_int: int, reason: str, mesg: str) -> None:
    """Drop-in for gunicorn.util.write_error: the same answer with a JSON body.

    `mesg` is gunicorn's description of what was wrong; it may quote the client's bytes, which
    JSON encoding keeps inert (and the answer says nosniff).
    """
    body = error_body(status_int, mesg or reason)
    # The reason phrase is gunicorn's own constant text; the status line is latin-1 as before.
    head = (f"HTTP/1.1 {status_int} {reason}\r\nConnection: close\r\n"
            "Content-Type: application/json\r\nX-Content-Type-Options: nosniff\r\n"
            f"Content-Length: {len(body)}\r\n\r\n").encode("latin-1", "replace")
    util.write_nonblock(sock, head + body)


def install() -> None:
    """Make gunicorn answer its own errors with `write_json_error` (workers call
    util.write_error through the module, so replacing the attribute is enough)."""
    util.write_error = write_json_error
