"""Password hashing parameters, key and token format, digests."""

from __future__ import annotations

import re

from people import credentials


def test_password_hash_is_argon2id_with_owasp_minimum() -> None:
    h = credentials.hash_password("correct horse battery")
    m = re.match(r"^\$argon2id\$v=19\$m=(\d+),t=(\d+),p=(\d+)\$", h)
    assert m and int(m.group(1)) >= 19456 and int(m.group(2)) >= 2 and int(m.group(3)) >= 1
    assert credentials.verify_password(h, "correct horse battery")
    assert not credentials.verify_password(h, "wrong")
    assert not credentials.verify_password(None, "anything")
    assert h != credentials.hash_password("correct horse battery")  # unique salts


def test_api_key_format_and_check_suffix() -> None:
    k = credentials.new_api_key()
    assert k.value.startswith("sdsk_") and credentials.well_formed(k.value, "sdsk_")
    assert k.digest == credentials.digest(k.value) and len(k.digest) == 32
    tampered = k.value[:-9] + ("A" if k.value[-9] != "A" else "B") + k.value[-8:]
    assert not credentials.well_formed(tampered, "sdsk_")
    assert not credentials.well_formed(k.value, "sdst_")
    assert credentials.mask(k.prefix, k.last4) == k.value[:9] + "..." + k.value[-4:]


def test_tokens_are_unique() -> None:
    assert len({credentials.new_token().value for _ in range(50)}) == 50
