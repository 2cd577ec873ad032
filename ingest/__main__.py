"""`python -m ingest`: settings -> metrics endpoint -> MQTT client -> ingest until SIGTERM.

`python -m ingest --retire` instead drains and ends this shard's broker session (ingest/shards.py):
it unsubscribes, ingests what the session had queued, and disconnects with the session's
expiry set to 0. deploy/run.sh uses it when the shard count changes.
"""

from __future__ import annotations

import logging
import os
import sys

from ingest.client import Ingester
from ingest.leader import LeadershipLost
from shared.config import Settings
from shared.logs import configure_logging

log = logging.getLogger("ingest")


def main(argv: list[str] | None = None) -> int:
    """Run the ingester in the foreground; exit status 0 after a graceful stop."""
    args = sys.argv[1:] if argv is None else argv
    if args not in ([], ["--retire"]):
        print("usage: python -m ingest [--retire]", file=sys.stderr)
        return 2
    try:
        settings = Settings.from_env(os.environ)
    except ValueError as exc:
        print(f"bad configuration: {exc}", file=sys.stderr)
        return 2
    configure_logging(settings)
    try:
        ingester = Ingester(settings, retire=args == ["--retire"])
    except ValueError as exc:  # settings that only the ingester checks
        print(f"bad configuration: {exc}", file=sys.stderr)
        return 2
    ingester.install_signals()
    if not ingester.link.retire:
        ingester.metrics.serve(ingester.settings.metrics_port, settings.metrics_bind)
    log.info("ingester starting: %r", ingester.settings)
    try:
        ingester.run()
    except LeadershipLost as exc:
        log.error("stepping down: %s; nothing more was acknowledged", exc)
        return 3
    return 0


if __name__ == "__main__":
    sys.exit(main())
