"""`python -m testbed.webhook_receiver PORT OUT [--status N]`: a webhook receiver for tests and
benchmarks, a separate process on 127.0.0.1.

Every POST is appended to OUT as one JSON line (`headers`, `body`, `received`: Unix time) and
answered with status N (default 200), after --delay seconds: a failing endpoint is the same
receiver with --status 500.
It verifies nothing itself: the test reads the file and verifies the signatures.
"""

from __future__ import annotations

import argparse
import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

MAX_BODY = 1 << 20


def main() -> None:
    """Serve until killed."""
    parser = argparse.ArgumentParser()
    parser.add_argument("port", type=int)
    parser.add_argument("out")
    parser.add_argument("--status", type=int, default=200)
    parser.add_argument("--delay", type=float, default=0.0,
                        help="seconds to wait before answering (a slow receiver)")
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
            self.send_response(args.status)
            self.send_header("Content-Length", "2")
            self.end_headers()
            self.wfile.write(b"ok")

        def log_message(self, format: str, *a: object) -> None:  # noqa: A002
            pass

    server = ThreadingHTTPServer(("127.0.0.1", args.port), Handler)
    server.serve_forever()


if __name__ == "__main__":
    main()
