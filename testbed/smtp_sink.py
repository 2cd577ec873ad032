"""`python -m testbed.smtp_sink PORT OUT`: a real SMTP server (aiosmtpd) on 127.0.0.1 for tests.

Each message it accepts is appended to OUT as one JSON line (`mail_from`, `rcpt_tos`, `data`:
the message as received, `received`: Unix time, `login`: the user name it logged in with).
No TLS: the tests run the deliverer with SDS_SMTP_SECURITY=none. `--auth USER:PASSWORD`:
AUTH (PLAIN or LOGIN, allowed without TLS on loopback) is required, and only that user with
that password is accepted (535 otherwise), so a test sees a stored password really work.
"""

from __future__ import annotations

import argparse
import json
import threading
import time
from typing import Any

from aiosmtpd.controller import Controller
from aiosmtpd.smtp import AuthResult, LoginPassword


class _Writer:
    def __init__(self, path: str) -> None:
        self.out = open(path, "a", encoding="utf-8")  # noqa: SIM115 (open for the process's life)

    async def handle_DATA(self, server: Any, session: Any, envelope: Any) -> str:  # noqa: N802
        """Record the message; 250 accepts it."""
        line = json.dumps({"mail_from": envelope.mail_from, "rcpt_tos": list(envelope.rcpt_tos),
                           "data": envelope.content.decode("utf-8", "replace"),
                           "received": time.time(),
                           "login": session.auth_data.decode() if isinstance(
                               session.auth_data, bytes) else None})
        self.out.write(line + "\n")
        self.out.flush()
        return "250 Message accepted for delivery"


class _Only:
    """An authenticator accepting one user name and password."""

    def __init__(self, pair: str) -> None:
        self.user, _, self.password = pair.partition(":")

    def __call__(self, server: Any, session: Any, envelope: Any, mechanism: str,
                 data: Any) -> AuthResult:
        ok = (isinstance(data, LoginPassword) and data.login.decode() == self.user
              and data.password.decode() == self.password)
        return AuthResult(success=ok, handled=False, auth_data=data.login if ok else None)


def main() -> None:
    """Serve until killed."""
    parser = argparse.ArgumentParser()
    parser.add_argument("port", type=int)
    parser.add_argument("out")
    parser.add_argument("--auth", default=None, help="USER:PASSWORD the client must log in with")
    args = parser.parse_args()
    extra: dict[str, Any] = {}
    if args.auth:
        extra = {"authenticator": _Only(args.auth), "auth_required": True,
                 "auth_require_tls": False}
    controller = Controller(_Writer(args.out), hostname="127.0.0.1", port=args.port, **extra)
    controller.start()
    threading.Event().wait()


if __name__ == "__main__":
    main()
