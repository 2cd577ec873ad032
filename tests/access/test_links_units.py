"""Pure parts of the one-time links (people/links.py), without a database: the URL, the email
rule, the mail text, and the link secret's form."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from people import credentials, links
from shared.config import Settings
from shared.errors import BadParameter


def test_the_link_starts_with_the_public_url_never_a_host_header() -> None:
    settings = Settings(public_url="https://sds.example.com/")
    assert links.link_url(settings, "sdsl_x") == "https://sds.example.com/dashboard/accept/sdsl_x"


@pytest.mark.parametrize("raw", ["", "no-at", "@x.example", "a@", "a b@x.example",
                                 "x" * 320 + "@x.example"])
def test_bad_emails_are_named(raw: str) -> None:
    with pytest.raises(BadParameter, match="email"):
        links._email(raw)


def test_invited_emails_are_lower_case_and_trimmed() -> None:
    assert links._email("  Grace@Example.COM ") == "grace@example.com"


def test_the_mail_says_what_the_link_is_for_and_until_when() -> None:
    until = datetime(2026, 12, 3, 1, 14, tzinfo=UTC)
    subject, text = links.message_text(purpose="invite", url="https://x/dashboard/accept/s",
                                       org_name="Org A", role="viewer", expires=until)
    assert subject == "You are invited to Org A"
    assert "as viewer" in text and "https://x/dashboard/accept/s" in text
    assert "2026-12-03 01:14 UTC" in text
    subject, text = links.message_text(purpose="password_reset", url="u", org_name="",
                                       role=None, expires=until)
    assert subject == "Reset your password" and "ignore this email" in text


def test_a_link_secret_is_256_bits_with_a_check_and_only_its_digest_is_kept() -> None:
    made = credentials.new_link()
    assert made.value.startswith("sdsl_") and len(made.value) == 5 + 43 + 8
    assert credentials.well_formed(made.value, credentials.LINK_PREFIX)
    flipped = made.value[:-1] + ("1" if made.value.endswith("0") else "0")
    assert not credentials.well_formed(flipped, credentials.LINK_PREFIX)  # the check suffix
    assert made.digest == credentials.digest(made.value) and len(made.digest) == 32
    assert not credentials.well_formed(made.value, credentials.TOKEN_PREFIX)
