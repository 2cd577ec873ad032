"""The sealed (encrypted) copy of each API key, so its owner can read the key again.

The interface spec has `GET /apikeys` and `PUT` answers carry the key value, and a deactivated
key "stays retrievable". Keys are still looked up by their SHA-256 digest only; beside it the
database keeps the value encrypted with Fernet (AES-128-CBC + HMAC-SHA256, `cryptography`)
under a key the database never holds (`SDS_APIKEY_SEAL_KEYS`, generated into
.state/secrets.env). A dump of the database alone therefore yields no usable key.

`SDS_APIKEY_SEAL_KEYS` is a comma-separated list: the first key seals, every key opens
(MultiFernet), so the encryption key is rotated by putting a new key first, running
`sds apikey reseal`, then dropping the old one. The same keys seal webhook signing secrets and
organisations' SMTP passwords: `SEALED` lists every sealed column, and `reseal_column` is how
the command moves each to the first key. `SDS_APIKEY_RETRIEVABLE=false`, or no seal
key, means show-once keys: nothing is sealed and listings show a masked value.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass

import psycopg
from cryptography.fernet import Fernet, InvalidToken, MultiFernet

from shared.config import Settings

log = logging.getLogger(__name__)


class SealError(ValueError):
    """A seal key setting that is not a list of Fernet keys."""


def new_key() -> str:
    """A new seal key (32 random bytes, url-safe base64: the Fernet key format)."""
    return Fernet.generate_key().decode()


def parse_keys(raw: str | None) -> list[str]:
    """The keys of a SDS_APIKEY_SEAL_KEYS value, first (sealing) key first."""
    return [k.strip() for k in (raw or "").split(",") if k.strip()]


class Sealer:
    """Seals key values with the first key and opens them with any of the keys."""

    def __init__(self, keys: Sequence[str]) -> None:
        if not keys:
            raise SealError("no seal key given")
        try:
            self._fernets = [Fernet(k.encode()) for k in keys]
        except (ValueError, TypeError) as exc:
            raise SealError(
                "SDS_APIKEY_SEAL_KEYS must be comma-separated Fernet keys (32 bytes, url-safe "
                "base64; `sds apikey new-seal-key` makes one)") from exc
        self._multi = MultiFernet(self._fernets)

    def seal(self, value: str) -> bytes:
        """The sealed form of `value` (with the first key)."""
        return self._multi.encrypt(value.encode())

    def open(self, sealed: bytes | memoryview | None) -> str | None:
        """The value of a sealed copy, or None when there is none or no key opens it (a key
        dropped too early, a tampered row): the caller then shows the masked value."""
        if sealed is None:
            return None
        try:
            return self._multi.decrypt(bytes(sealed)).decode()
        except InvalidToken:
            log.warning("an API key's sealed copy opens with none of SDS_APIKEY_SEAL_KEYS")
            return None

    def needs_reseal(self, sealed: bytes | memoryview) -> bool:
        """True unless the first key opens it (sealed under an older key)."""
        try:
            self._fernets[0].decrypt(bytes(sealed))
            return False
        except InvalidToken:
            return True

    def reseal(self, sealed: bytes | memoryview) -> bytes:
        """The same value sealed again with the first key (InvalidToken if no key opens it)."""
        return self._multi.rotate(bytes(sealed))


def from_settings(settings: Settings, *, warn: bool = True) -> Sealer | None:
    """The Sealer of these settings, or None for show-once keys (retrieval off, or no key;
    the latter logged as a warning unless `warn` is false)."""
    if not settings.apikey_retrievable:
        return None
    keys = parse_keys(settings.apikey_seal_keys)
    if not keys:
        if warn:
            log.warning("SDS_APIKEY_SEAL_KEYS is not set: API keys are shown once and listed "
                        "masked (set it, as deploy/run.sh does, to let owners retrieve them)")
        return None
    return Sealer(keys)


def secret_sealer(settings: Settings) -> Sealer | None:
    """The Sealer of stored secrets the service must use again itself (webhook signing
    secrets): SDS_APIKEY_SEAL_KEYS whether or not API keys are retrievable; None without keys."""
    keys = parse_keys(settings.apikey_seal_keys)
    return Sealer(keys) if keys else None


@dataclass(frozen=True, slots=True)
class SealedColumn:
    """A column of sealed values: its table, the row key, the column, what it holds in words,
    and whether it is sealed only while API keys are retrievable (`api_keys`)."""

    table: str
    key: str
    column: str
    what: str
    retrievable_only: bool = False


# Every sealed column (one list: `sds apikey reseal` reseals each; a new one belongs here).
SEALED = (SealedColumn("api_keys", "id", "sealed", "API keys", retrievable_only=True),
          SealedColumn("alert_channels", "id", "secret_sealed", "webhook secrets"),
          SealedColumn("org_smtp_settings", "org_id", "password_sealed", "SMTP passwords"))


def reseal_column(conn: psycopg.Connection, col: SealedColumn, sealer: Sealer
                  ) -> tuple[int, int, int]:
    """Seal every value of `col` again with the first key, in the caller's transaction (rows
    locked): (resealed, already under the first key, opened by no key)."""
    done = current = lost = 0
    rows = conn.execute(
        f"SELECT {col.key}, {col.column} FROM {col.table}"  # nosec B608  constants of SEALED
        f" WHERE {col.column} IS NOT NULL FOR UPDATE").fetchall()
    for key, sealed in rows:
        if not sealer.needs_reseal(sealed):
            current += 1
        elif sealer.open(sealed) is None:
            lost += 1
        else:
            conn.execute(f"UPDATE {col.table} SET {col.column} = %s"  # nosec B608  constants
                         f" WHERE {col.key} = %s", (sealer.reseal(sealed), key))
            done += 1
    return done, current, lost
