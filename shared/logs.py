"""One log format for all three processes; configure_logging(settings) is called once at start."""

from __future__ import annotations

import logging

from shared.config import Settings

FORMAT = "%(asctime)s %(levelname)s %(name)s %(message)s"


def configure_logging(settings: Settings) -> None:
    """Log to stderr at the configured level, in the shared format."""
    logging.basicConfig(level=settings.log_level.upper(), format=FORMAT, force=True)
