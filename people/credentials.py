"""Passwords (argon2id), API keys, bearer tokens and one-time links: generation, digests, checks.

Keys and tokens are random, carry a recognisable prefix and a CRC32 check suffix (so a
mistyped or forged value is refused without a database query), and only their SHA-256 digest
is stored. Comparisons of secrets use `hmac.compare_digest`.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
import zlib
from dataclasses import dataclass

from argon2 import PasswordHasher
from argon2.exceptions import InvalidHashError, VerificationError, VerifyMismatchError

# OWASP minimum for argon2id (m=19 MiB, t=2, p=1): ~30 ms here instead of ~200 ms for the
# library default, which matters because every failed login pays it.
HASHER = PasswordHasher(time_cost=2, memory_cost=19456, parallelism=1)

API_KEY_PREFIX = "sdsk_"
TOKEN_PREFIX = "sdst_"  # nosec B105  a public prefix, not a password
LINK_PREFIX = "sdsl_"  # one-time links: invitations and password resets (people/links.py)
_BODY_BYTES = 32  # 256 bits of entropy

# A fixed hash to verify against when the email is unknown, so both failures cost the same.
_DUMMY_HASH = HASHER.hash("timing-equaliser-not-a-password")

SCOPES: dict[str, str] = {
    "data:read": "Read all history data",
    "orgs:read": "Read org info and org members",
    "orgs:write": "Modify org and manage org members",
    "users:read": "Read user info",
    "users:write": "Modify user, but not change password",
    "teams:read": "Read team info",
    "teams:write": "Modify, create, delete team and manage members",
    "notifications:read": "Read notifications",
    "notifications:write": "Modify, create, delete notifications",
    "annotations:read": "Read annotations",
    "annotations:write": "Modify, create, delete annotations",
    "devices:read": "Read devices",
    "locations:read": "Read locations",
    "locations:write": "Modify locations",
    "apikeys:read": "Read API key info",
}


# Roles and what each may do: people/roles.py.


# The one password rule, for every way a password is set (user creation, change, reset).
MIN_PASSWORD_LENGTH = 8


def password_problem(password: str) -> str | None:
    """What is wrong with a new password (a message for the caller's error), or None."""
    if len(password) < MIN_PASSWORD_LENGTH:
        return f"password: at least {MIN_PASSWORD_LENGTH} characters"
    return None


def hash_password(password: str) -> str:
    """An argon2id hash of `password`."""
    return HASHER.hash(password)


def verify_password(stored_hash: str | None, password: str) -> bool:
    """True when `password` matches; with no stored hash, still pays one verify (timing)."""
    try:
        return HASHER.verify(stored_hash or _DUMMY_HASH, password) and stored_hash is not None
    except (VerifyMismatchError, VerificationError, InvalidHashError):
        return False


def needs_rehash(stored_hash: str) -> bool:
    """True when the hash was made with weaker parameters than today's."""
    return HASHER.check_needs_rehash(stored_hash)


def digest(secret: str) -> bytes:
    """SHA-256 of a key or token: what the database stores."""
    return hashlib.sha256(secret.encode()).digest()


def _check(body: str) -> str:
    return f"{zlib.crc32(body.encode()) & 0xFFFFFFFF:08x}"


def _new(prefix: str) -> str:
    body = secrets.token_urlsafe(_BODY_BYTES)
    return f"{prefix}{body}{_check(prefix + body)}"


def well_formed(value: str, prefix: str) -> bool:
    """True when `value` has the prefix, length and check suffix of a genuine secret."""
    if not value.startswith(prefix) or len(value) != len(prefix) + 43 + 8:
        return False
    return hmac.compare_digest(_check(value[:-8]), value[-8:])


@dataclass(frozen=True, slots=True)
class NewSecret:
    """A freshly generated key or token: the value (shown once) and what is stored."""

    value: str
    digest: bytes
    prefix: str  # first characters, safe to display
    last4: str


def new_api_key() -> NewSecret:
    """A new API key value."""
    value = _new(API_KEY_PREFIX)
    return NewSecret(value, digest(value), value[:9], value[-4:])


def new_token() -> NewSecret:
    """A new bearer token value."""
    value = _new(TOKEN_PREFIX)
    return NewSecret(value, digest(value), value[:9], value[-4:])


def new_link() -> NewSecret:
    """A new one-time link secret (invitation or password reset)."""
    value = _new(LINK_PREFIX)
    return NewSecret(value, digest(value), value[:9], value[-4:])


def mask(prefix: str, last4: str) -> str:
    """The listing form of a key: prefix and last four characters only."""
    return f"{prefix}...{last4}"
