"""`python -m testbed.smtp_sink PORT OUT`: a real SMTP server (aiosmtpd) on 127.0.0.1 for tests.

Each message it accepts is appended to OUT as one JSON line (`mail_from`, `rcpt_tos`, `data`:
the message as received, `received`: Unix time). No TLS and no AUTH: the tests run the
deliverer with SDS_SMTP_SECURITY=none.
"""

from __future__ import annotations

import argparse
import json
import threading
import time
from typing import Any

from aiosmtpd.controller import Controller


class _Writer:
    def __init__(self, path: str) -> None:
        self.out = open(path, "a", encoding="utf-8")  # noqa: SIM115 (open for the process's life)

    async def handle_DATA(self, server: Any, session: Any, envelope: Any) -> str:  # noqa: N802
        """Record the message; 250 accepts it."""
        line = json.dumps({"mail_from": envelope.mail_from, "rcpt_tos": list(envelope.rcpt_tos),
                           "data": envelope.content.decode("utf-8", "replace"),
                           "received": time.time()})
        self.out.write(line + "\n")
        self.out.flush()
        return "250 Message accepted for delivery"


def main() -> None:
    """Serve until killed."""
    parser = argparse.ArgumentParser()
    parser.add_argument("port", type=int)
    parser.add_argument("out")
    args = parser.parse_args()
    controller = Controller(_Writer(args.out), hostname="127.0.0.1", port=args.port)
    controller.start()
    threading.Event().wait()


if __name__ == "__main__":
    main()
