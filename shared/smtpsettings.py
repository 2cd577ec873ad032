"""An organisation's own SMTP settings (table org_smtp_settings, migration 0190), and the SMTP
settings that apply to it: its own when an owner set them, else the server's SDS_SMTP_*.

Read at every use (the API's email-channel check, the deliverer's each send), so a change takes
effect without restarting a process. The password is stored sealed with SDS_APIKEY_SEAL_KEYS
(shared.sealing, like webhook secrets) and is never shown again.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import psycopg
from psycopg.rows import dict_row

from shared import sealing
from shared.config import Settings

SECURITY = ("none", "starttls", "tls")
_COLUMNS = "host, port, security, username, password_sealed, from_address, updated_at"


def stored(conn: psycopg.Connection, org: Any) -> dict[str, Any] | None:
    """The organisation's own settings row, or None."""
    with conn.cursor(row_factory=dict_row) as cur:
        return cur.execute(f"SELECT {_COLUMNS} FROM org_smtp_settings"  # nosec B608 constant
                           " WHERE org_id = %s", (org,)).fetchone()


def applied(settings: Settings, row: dict[str, Any] | None,
            sealer: sealing.Sealer | None) -> Settings:
    """`settings` with the organisation's own SMTP settings (`row`) in place of SDS_SMTP_*;
    unchanged without a row. A password that no seal key opens is sent as none (the server's
    refusal then says so)."""
    if row is None:
        return settings
    password = sealer.open(row["password_sealed"]) if sealer and row["password_sealed"] else None
    return dataclasses.replace(
        settings, smtp_host=row["host"], smtp_port=row["port"], smtp_security=row["security"],
        smtp_username=row["username"], smtp_password=password, smtp_from=row["from_address"])


def for_org(conn: psycopg.Connection, settings: Settings, org: Any,
            sealer: sealing.Sealer | None) -> Settings:
    """The SMTP settings that apply to `org` now."""
    return applied(settings, stored(conn, org), sealer)


def source(settings: Settings, row: dict[str, Any] | None) -> str:
    """Where the organisation's email settings come from: `organisation`, `server` or `none`
    (no email can be sent)."""
    if row is not None:
        return "organisation"
    return "server" if settings.smtp_host else "none"


def save(conn: psycopg.Connection, org: Any, values: dict[str, Any], *, password_sealed:
         bytes | None, keep_password: bool, user: Any) -> None:
    """Insert or replace the organisation's settings. `keep_password`: the stored sealed
    password stays (the form left it empty); otherwise `password_sealed` replaces it."""
    conn.execute(
        "INSERT INTO org_smtp_settings (org_id, host, port, security, username, password_sealed,"
        " from_address, updated_by) VALUES (%(org)s, %(host)s, %(port)s, %(security)s,"
        " %(username)s, %(sealed)s, %(from)s, %(user)s)"
        " ON CONFLICT (org_id) DO UPDATE SET host = EXCLUDED.host, port = EXCLUDED.port,"
        " security = EXCLUDED.security, username = EXCLUDED.username,"
        " password_sealed = CASE WHEN %(keep)s THEN org_smtp_settings.password_sealed"
        "   ELSE EXCLUDED.password_sealed END,"
        " from_address = EXCLUDED.from_address, updated_by = EXCLUDED.updated_by,"
        " updated_at = now()",
        {"org": org, "host": values["host"], "port": values["port"],
         "security": values["security"], "username": values.get("username"),
         "sealed": password_sealed, "from": values["from"], "user": user, "keep": keep_password})


def remove(conn: psycopg.Connection, org: Any) -> bool:
    """Delete the organisation's settings (the server's apply again); True if there were."""
    return conn.execute("DELETE FROM org_smtp_settings WHERE org_id = %s", (org,)).rowcount > 0
