"""WSGI entry point for gunicorn: `gunicorn -c deploy/gunicorn.conf.py serve.wsgi:app`.

Settings come from the `SDS_*` environment once per worker process.
"""

from __future__ import annotations

import os

from serve import create_app
from shared.config import Settings
from shared.logs import configure_logging

settings = Settings.from_env(os.environ)
configure_logging(settings)
app = create_app(settings)
