"""The recovery kit (shared/recovery.py): which files of .state it takes, the settings it
keeps (not the derived ones, not what secrets.env holds), sealing that only the recovery key
opens, and the files written back private."""

from __future__ import annotations

import stat
from pathlib import Path

import pytest
from cryptography.fernet import Fernet

from shared import recovery


def _state(root: Path) -> Path:
    (root / "mosquitto").mkdir(parents=True)
    (root / "secrets.env").write_text("SDS_DB_PASSWORD=pw\nSDS_RECOVERY_KEY=k\n")
    (root / "mosquitto" / "passwd").write_text("field-1:$7$hash\n")
    (root / "demo.done").write_text("")
    (root / "pg").mkdir()
    (root / "pg" / "postgres.log").write_text("not in the kit")
    return root


def test_collect_takes_the_kit_files_and_the_operators_settings(tmp_path: Path) -> None:
    files = recovery.collect(_state(tmp_path), {
        "SDS_BACKUP_REPO_PATH": "/mnt/backup/sds", "SDS_DATABASE_URL": "postgresql://x",
        "SDS_DB_PASSWORD": "pw", "HOME": "/root"})
    assert set(files) == {"secrets.env", "mosquitto/passwd", "demo.done", "settings.env"}
    settings = files["settings.env"].decode()
    assert "SDS_BACKUP_REPO_PATH=/mnt/backup/sds" in settings
    # Derived on each start, held by secrets.env, or not ours: not among the settings.
    assert "DATABASE_URL" not in settings and "DB_PASSWORD" not in settings
    assert "HOME" not in settings


def test_sealed_files_open_with_the_key_only(tmp_path: Path) -> None:
    key, other = Fernet.generate_key().decode(), Fernet.generate_key().decode()
    files = recovery.collect(_state(tmp_path / "old"), {})
    fernet = Fernet(key.encode())
    rows = {name: fernet.encrypt(data) for name, data in files.items()}
    assert all(b"hash" not in token for token in rows.values())
    assert recovery.open_all(rows, key) == files
    with pytest.raises(recovery.RecoveryError, match="does not open"):
        recovery.open_all(rows, other)
    with pytest.raises(recovery.RecoveryError, match="not set"):
        recovery.open_all(rows, None)
    with pytest.raises(recovery.RecoveryError, match="not a kit file"):
        recovery.open_all({"../../etc/passwd": fernet.encrypt(b"x")}, key)


def test_written_back_private(tmp_path: Path) -> None:
    files = recovery.collect(_state(tmp_path / "old"), {})
    new = tmp_path / "new"
    assert recovery.write(new, files) == sorted(files)
    assert (new / "mosquitto" / "passwd").read_text() == "field-1:$7$hash\n"
    assert stat.S_IMODE((new / "secrets.env").stat().st_mode) == 0o600
