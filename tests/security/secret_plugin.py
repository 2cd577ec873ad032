"""detect-secrets plugin for this service's own credentials (reliability plan S17).

API keys and bearer tokens are `sdsk_` / `sdst_` + 43 URL-safe characters + an 8-hex-digit
CRC32 of the body (people/credentials.py). Only values whose check suffix is valid are
reported, so test fixtures can hold look-alikes with a deliberately wrong check.

Use: `detect-secrets scan --plugin tests/security/secret_plugin.py` (tests/security/
test_static.py runs it over every tracked file).
"""

from __future__ import annotations

import re
from collections.abc import Generator

from detect_secrets.plugins.base import RegexBasedDetector

from people import credentials


class SdsCredentialDetector(RegexBasedDetector):
    """Live-format API keys and bearer tokens of this service."""

    secret_type = "SDS API key or bearer token"
    denylist = (re.compile(r"\b((?:sdsk_|sdst_)[A-Za-z0-9_-]{43}[0-9a-f]{8})\b"),)

    def analyze_string(self, string: str) -> Generator[str, None, None]:
        """Matches of the format whose CRC32 check holds."""
        for value in super().analyze_string(string):
            if credentials.well_formed(value, value[:5]):
                yield value
