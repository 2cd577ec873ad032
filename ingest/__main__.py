"""`python -m ingest`: settings -> metrics endpoint -> MQTT client -> ingest until SIGTERM."""

from __future__ import annotations

import logging
import os
import sys

from ingest.client import Ingester
from ingest.leader import LeadershipLost
from shared.config import Settings
from shared.logs import configure_logging

log = logging.getLogger("ingest")


def main() -> int:
    """Run the ingester in the foreground; exit status 0 after a graceful stop."""
    try:
        settings = Settings.from_env(os.environ)
    except ValueError as exc:
        print(f"bad configuration: {exc}", file=sys.stderr)
        return 2
    configure_logging(settings)
    try:
        ingester = Ingester(settings)
    except ValueError as exc:  # settings that only the ingester checks
        print(f"bad configuration: {exc}", file=sys.stderr)
        return 2
    ingester.install_signals()
    ingester.metrics.serve(settings.metrics_port, settings.metrics_bind)
    log.info("ingester starting: %r", settings)
    try:
        ingester.run()
    except LeadershipLost as exc:
        log.error("stepping down: %s; nothing more was acknowledged", exc)
        return 3
    return 0


if __name__ == "__main__":
    sys.exit(main())
