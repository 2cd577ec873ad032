"""The recovery kit: the files of `.state` that a whole-machine loss needs besides the
database, kept sealed in the database's `recovery_files` table (docs/decisions.md "Recovery
kit"; docs/operations.md "Whole machine lost").

secrets.env holds the passwords, the API-key seal key and the recovery key itself; the
broker's password file (or the RabbitMQ definitions) holds every device's and alert reader's
hashed credentials; the stamps keep `deploy/run.sh` from re-creating the demo over real data;
settings.env is the operator's SDS_* settings. Each is sealed with SDS_RECOVERY_KEY (Fernet:
AES-128-CBC + HMAC-SHA256), a key the database never holds, so a dump or a backup alone
yields none of them; the operator keeps a copy of the key off the machine.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

import psycopg
from cryptography.fernet import Fernet, InvalidToken

# Relative to .state. Written back with mode 600.
FILES = (
    "secrets.env",
    "settings.env",
    "mosquitto/passwd",
    "rabbitmq/definitions.json",
    "broker-profile",
    "db-profile",
    "ingest-shards",
    "monitoring.on",
    "demo.done",
    "demo-credentials.txt",
    "demo-devices.json",
)

# Settings that secrets.env derives on each start (ports, URLs): not the operator's choices.
_DERIVED = {"SDS_DATABASE_URL", "SDS_DATABASE_READ_URL", "SDS_BACKUP_CONFIG", "SDS_STATE_DIR",
            "SDS_RECOVERY_KEY"}


class RecoveryError(ValueError):
    """A recovery key that is missing or opens nothing."""


def _fernet(key: str | None) -> Fernet:
    if not key:
        raise RecoveryError("SDS_RECOVERY_KEY is not set (it is in .state/secrets.env; after a "
                            "whole-machine loss, from the copy kept off the machine)")
    try:
        return Fernet(key.strip().encode())
    except (ValueError, TypeError) as exc:
        raise RecoveryError("SDS_RECOVERY_KEY is not a Fernet key (32 bytes, url-safe base64)"
                            ) from exc


def settings_text(env: Mapping[str, str]) -> str:
    """settings.env: the operator's SDS_* settings of `env`, without the derived ones and
    without what secrets.env holds (which is saved as its own file)."""
    lines = [f"{k}={v}" for k, v in sorted(env.items())
             if k.startswith("SDS_") and k not in _DERIVED and "\n" not in v]
    return "# The SDS_* settings at the last `sds recovery save` (shared/recovery.py).\n" + \
        "".join(f"{line}\n" for line in lines)


def collect(state: Path, env: Mapping[str, str]) -> dict[str, bytes]:
    """The kit's files present under `state`, and settings.env made from `env` minus the
    values secrets.env already holds."""
    files: dict[str, bytes] = {}
    for name in FILES:
        path = state / name
        if name != "settings.env" and path.is_file():
            files[name] = path.read_bytes()
    secrets = _env_lines(files.get("secrets.env", b"").decode())
    files["settings.env"] = settings_text(
        {k: v for k, v in env.items() if k not in secrets}).encode()
    return files


def _env_lines(text: str) -> dict[str, str]:
    return dict(line.split("=", 1) for line in text.splitlines()
                if "=" in line and not line.startswith("#"))


def save(conn: psycopg.Connection, files: Mapping[str, bytes], key: str | None) -> int:
    """Seal and store `files` (replacing the kit: files no longer present are dropped), in
    the caller's transaction; how many were stored."""
    fernet = _fernet(key)
    conn.execute("DELETE FROM recovery_files WHERE NOT (name = ANY(%s))", (list(files),))
    for name, data in files.items():
        conn.execute(
            "INSERT INTO recovery_files (name, sealed) VALUES (%s, %s) ON CONFLICT (name) DO "
            "UPDATE SET sealed = EXCLUDED.sealed, updated_at = now() "
            "WHERE recovery_files.sealed IS DISTINCT FROM EXCLUDED.sealed",
            (name, fernet.encrypt(data)))
    return len(files)


BROKER_LOGINS = "mosquitto/passwd"


def keep_broker_logins(conn: psycopg.Connection, passwd_file: Path, key: str | None) -> None:
    """Seal the broker's password file into the kit now (after the API changed a device's
    login), through the one kit file the API's role may replace (migration 0220)."""
    sealed = _fernet(key).encrypt(passwd_file.read_bytes())
    conn.execute("SELECT sds_recovery_keep_broker_logins(%s)", (sealed,))


def open_all(rows: Mapping[str, bytes], key: str | None) -> dict[str, bytes]:
    """The files of sealed `rows` (name -> token); RecoveryError when the key opens none of
    them (the wrong key) or a name is not one of the kit's."""
    fernet = _fernet(key)
    files = {}
    for name, token in rows.items():
        if name not in FILES:
            raise RecoveryError(f"recovery_files holds {name!r}, which is not a kit file")
        try:
            files[name] = fernet.decrypt(token)
        except InvalidToken:
            raise RecoveryError(
                f"SDS_RECOVERY_KEY does not open {name} of the recovery kit: the wrong key "
                "(the one in the old .state/secrets.env is the right one)") from None
    return files


def write(state: Path, files: Mapping[str, bytes]) -> list[str]:
    """Write the kit's files under `state` (mode 600, directories 700); their names."""
    for name, data in files.items():
        path = state / name
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        tmp = path.with_name(path.name + ".recovering")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "wb") as out:
            out.write(data)
        tmp.replace(path)
    return sorted(files)
