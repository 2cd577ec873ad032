"""The API as deployed, for tests that talk HTTP over a real socket (the Python client, the
browser tests): `serve.wsgi:app` under gunicorn with deploy/gunicorn.conf.py on a free loopback
port, against a test database. Stopped with SIGTERM (then SIGKILL) on exit."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from tests.support.services import free_port

REPO = Path(__file__).resolve().parents[2]


@contextmanager
def gunicorn_api(database_url: str, log_dir: Path, *, workers: int = 2,
                 **env: str) -> Iterator[str]:
    """Run the API on `database_url`; yields its base URL (http://127.0.0.1:PORT). Extra
    keyword arguments are SDS_* settings (e.g. SDS_API_RATE_LIMIT="3")."""
    port = free_port()
    environ = dict(os.environ, SDS_DATABASE_URL=database_url,
                   SDS_HTTP_BIND=f"127.0.0.1:{port}", SDS_HTTP_WORKERS=str(workers),
                   SDS_LOG_DIR=str(log_dir), SDS_CURSOR_SECRET="apiserver-test",
                   SDS_DB_POOL_MIN="1", SDS_DB_POOL_MAX="2", **env)
    stderr_path = log_dir / "gunicorn-stderr.log"
    with stderr_path.open("wb") as stderr:
        proc = subprocess.Popen(
            [str(Path(sys.executable).parent / "gunicorn"), "-c",
             str(REPO / "deploy" / "gunicorn.conf.py"), "serve.wsgi:app"],
            cwd=REPO, env=environ, stdout=subprocess.DEVNULL, stderr=stderr)
        base = f"http://127.0.0.1:{port}"
        try:
            deadline = time.monotonic() + 60
            while True:
                assert proc.poll() is None, stderr_path.read_text()
                try:
                    with urllib.request.urlopen(f"{base}/api/v2/health", timeout=5) as answer:
                        if answer.status == 200:
                            break
                except (OSError, urllib.error.URLError):
                    pass
                assert time.monotonic() < deadline, "gunicorn did not answer within 60 s"
                time.sleep(0.1)
            yield base
        finally:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


__all__ = ["gunicorn_api"]
