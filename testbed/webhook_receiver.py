"""`python -m testbed.webhook_receiver PORT OUT [--status N] [--hostile MODE]`: a webhook
receiver for tests and benchmarks, a separate process on 127.0.0.1.

Every POST is appended to OUT as one JSON line (`headers`, `body`, `received`: Unix time) and
answered with status N (default 200), after --delay seconds: a failing endpoint is the same
receiver with --status 500. --hostile MODE answers as a hostile receiver would instead (HOSTILE
below: a NUL in the status line or the reason, garbage headers, a connection reset, an answer
trickled a byte at a time).
It verifies nothing itself: the test reads the file and verifies the signatures.
"""

from __future__ import annotations

import argparse
import json
import socket
import struct
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

MAX_BODY = 1 << 20
# What each hostile mode writes instead of an answer (None: it does something else).
HOSTILE: dict[str, bytes | None] = {
    "nul-reason": b"HTTP/1.1 500 Bad\x00Reason\x1b[31m\r\nContent-Length: 0\r\n\r\n",
    "nul-status": b"HTTP/1.1 2\x0000 OK\r\nContent-Length: 0\r\n\r\n",
    "garbage-headers": b"HTTP/1.1 200 OK\r\n" + b"".join(
        b"X-\xff\xfe%d: \x00\x01\x7f\xc3\r\n" % k for k in range(150)) + b"\r\n",
    "reset": None,  # the connection reset (RST) instead of an answer
    "trickle": None,  # a 200 status line, one byte every 0.5 s, for as long as it is read
}


def main() -> None:
    """Serve until killed."""
    parser = argparse.ArgumentParser()
    parser.add_argument("port", type=int)
    parser.add_argument("out")
    parser.add_argument("--status", type=int, default=200)
    parser.add_argument("--delay", type=float, default=0.0,
                        help="seconds to wait before answering (a slow receiver)")
    parser.add_argument("--hostile", choices=sorted(HOSTILE), default=None)
    args = parser.parse_args()
    lock = threading.Lock()
    out = open(args.out, "a", encoding="utf-8")  # noqa: SIM115 (open for the process's life)

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:  # noqa: N802 (http.server's name)
            size = min(int(self.headers.get("Content-Length") or 0), MAX_BODY)
            body = self.rfile.read(size)
            line = json.dumps({"headers": dict(self.headers.items()), "path": self.path,
                               "body": body.decode("utf-8", "replace"),
                               "received": time.time()})
            with lock:
                out.write(line + "\n")
                out.flush()
            if args.delay:
                time.sleep(args.delay)
            if args.hostile:
                self._hostile(args.hostile)
                return
            self.send_response(args.status)
            self.send_header("Content-Length", "2")
            self.end_headers()
            self.wfile.write(b"ok")

        def _hostile(self, mode: str) -> None:
            self.close_connection = True
            raw = HOSTILE[mode]
            if raw is not None:
                self.wfile.write(raw)
            elif mode == "reset":  # linger 0: close sends RST
                self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER,
                                           struct.pack("ii", 1, 0))
                self.connection.close()
            else:
                for byte in b"HTTP/1.1 200 OK\r\n" + b"X-Slow: " + b"z" * 60000:
                    self.wfile.write(bytes([byte]))
                    self.wfile.flush()
                    time.sleep(0.5)

        def finish(self) -> None:
            try:
                super().finish()
            except (OSError, ValueError):  # the hostile mode closed or reset the socket
                pass

        def handle_one_request(self) -> None:
            try:
                super().handle_one_request()
            except (OSError, ValueError):  # a trickle the client cut off
                self.close_connection = True

        def log_message(self, format: str, *a: object) -> None:  # noqa: A002
            pass

    server = ThreadingHTTPServer(("127.0.0.1", args.port), Handler)
    server.serve_forever()


if __name__ == "__main__":
    main()
